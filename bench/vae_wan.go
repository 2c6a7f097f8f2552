package bench

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
)

// openWanVAE loads the Wan 2.1 VAE for the bench (random weights at the
// released config unless VAE is set): the same JSON lines, with "model":
// "wan2.1" and the video's size.
func openWanVAE(o *VAEOptions, d *vaeDevice, shape []int, dt tensor.DType, vt vae.Tiling) (*vaeModel, error) {
	var v *wan.VAE
	var err error
	if o.VAE != "" {
		v, err = wan.Load(o.VAE, d.Backend, wan.Options{DType: dt, NoEncoder: true})
	} else {
		v, err = wan.RandomWeights(wan.DefaultConfig(), d.Backend, wan.Options{DType: dt, NoEncoder: true}, o.Seed)
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
	return &vaeModel{name: "wan ", weights: v.WeightBytes(), close: v.Close,
		plan: func(avail int64) (fmt.Stringer, int64) {
			var planned int64
			opts, planned = v.Plan(shape, avail)
			return opts.Tiling, planned
		},
		peak: func() int64 { return v.DecodePeak(shape, opts.Tiling) },
		decode: func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, decodeStats) {
			var st wan.DecodeStats
			o := opts
			o.Stats, o.Log = &st, log
			out := v.Decode(s, z, o)
			return out, decodeStats{st.Tiling.String(), st.Tiles, st.Retries}
		},
		extra: Result{"model": "wan2.1", "frames": cfg.SampleFrames(shape[2]), "height": shape[3] * r, "width": shape[4] * r},
	}, nil
}

// wanTiling is the Wan VAE's tiling for a --tiling value (as the vae
// command reads it): its decode is always frame by frame, so framewise and
// none are untiled.
func wanTiling(t vae.Tiling) wan.Tiling {
	if !t.Spatial {
		return wan.Tiling{}
	}
	return wan.Tiling{Spatial: true, TileHeight: t.TileHeight, TileWidth: t.TileWidth,
		TileStrideHeight: t.TileStrideHeight, TileStrideWidth: t.TileStrideWidth}
}
