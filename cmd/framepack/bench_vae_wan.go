package main

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
)

// wanBenchLatent is the default latent of `bench vae --vae-class wan`: 81
// frames of 480×832, Wan 2.1's default video.
const wanBenchLatent = "1x16x21x60x104"

// openBenchWan loads the Wan 2.1 VAE for the bench (random weights at the
// released config unless --vae): the same JSON lines, with "model":
// "wan2.1" and the video's size.
func openBenchWan(f *benchVAEFlags, d *benchDevice, shape []int, dt tensor.DType, vt vae.Tiling) (*benchModel, error) {
	var v *wan.VAE
	var err error
	if f.vaeDir != "" {
		v, err = wan.Load(f.vaeDir, d.be, wan.Options{DType: dt, NoEncoder: true})
	} else {
		v, err = wan.RandomWeights(wan.DefaultConfig(), d.be, wan.Options{DType: dt, NoEncoder: true}, f.seed)
	}
	if err != nil {
		return nil, err
	}
	cfg := v.Config()
	if shape[1] != cfg.ZDim {
		v.Close()
		return nil, fmt.Errorf("latent %v: the VAE has %d latent channels", shape, cfg.ZDim)
	}
	opts := wan.DecodeOptions{Tiling: wanTiling(vt)}
	r := cfg.SpatialRatio()
	return &benchModel{name: "wan ", weights: v.WeightBytes(), close: v.Close,
		plan: func(avail int64) (fmt.Stringer, int64) {
			var planned int64
			opts, planned = v.Plan(shape, avail)
			return opts.Tiling, planned
		},
		peak: func() int64 { return v.DecodePeak(shape, opts.Tiling) },
		decode: func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, benchStats) {
			var st wan.DecodeStats
			o := opts
			o.Stats, o.Log = &st, log
			out := v.Decode(s, z, o)
			return out, benchStats{st.Tiling.String(), st.Tiles, st.Retries}
		},
		extra: benchResult{"model": "wan2.1", "frames": cfg.SampleFrames(shape[2]), "height": shape[3] * r, "width": shape[4] * r},
	}, nil
}
