package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

// vaeClass is config.json's _class_name in dir: AutoencoderKLWan picks the
// Wan VAE; AutoencoderKLHunyuanVideo (or no name, as older folders have)
// HunyuanVideo's. Any other class is refused.
func vaeClass(dir string) (string, error) {
	var c struct {
		Class string `json:"_class_name"`
	}
	if err := weights.ReadConfig(dir, &c); err != nil {
		return "", err
	}
	switch c.Class {
	case "", "AutoencoderKLHunyuanVideo":
		return "AutoencoderKLHunyuanVideo", nil
	case wan.ClassName:
		return c.Class, nil
	}
	return "", fmt.Errorf("%s/config.json: _class_name %q is not a VAE framepack runs (AutoencoderKLHunyuanVideo or AutoencoderKLWan)", dir, c.Class)
}

// wanTiling is the Wan VAE's tiling for a --tiling value: its decode is
// always frame by frame, so framewise and none are untiled.
func wanTiling(t vae.Tiling) wan.Tiling {
	if !t.Spatial {
		return wan.Tiling{}
	}
	return wan.Tiling{Spatial: true, TileHeight: t.TileHeight, TileWidth: t.TileWidth,
		TileStrideHeight: t.TileStrideHeight, TileStrideWidth: t.TileStrideWidth}
}

func runWanDecode(cmd *cobra.Command, f *vaeFlags, z *tensor.Tensor, til vae.Tiling, auto, unscaled bool, out videoOutput, vo video.Options) error {
	log := slog.Default()
	return withVAE(f, log, "wan vae", wan.Load, wan.Options{NoEncoder: true}, func(d *device.Device, v *wan.VAE) error {
		cfg := v.Config()
		if z.Dim(1) != cfg.ZDim {
			return fmt.Errorf("latents %v: the VAE takes %d channels", z.Shape(), cfg.ZDim)
		}
		if !unscaled {
			z = cfg.Denormalize(z) // as Wan's pipelines do before AutoencoderKLWan.decode
		}
		opts := wan.DecodeOptions{Tiling: wanTiling(til)}
		avail, err := d.DecodeRoom()
		if err != nil {
			return fmt.Errorf("vae decode: %w", err)
		}
		var planned int64
		if auto {
			opts, planned = v.Plan(z.Shape(), avail)
		} else {
			planned = v.DecodePeak(z.Shape(), opts.Tiling)
		}
		T, h, w := z.Dim(2), z.Dim(3), z.Dim(4)
		r := cfg.SpatialRatio()
		log.Info(fmt.Sprintf("wan vae decode: latents %v → %d frames of %dx%d; %s; %s free for activations, planned peak %s",
			z.Shape(), cfg.SampleFrames(T), h*r, w*r, opts.Tiling, memory.FormatBytes(avail), memory.FormatBytes(planned)))
		var ds wan.DecodeStats
		opts.Stats = &ds
		opts.Log = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
		d.Backend.ResetPeak()
		s := tensor.NewScope(d.Backend)
		var px *tensor.Tensor
		err = withDecodeProgress(cmd, log, func(func(done, total int)) { px = v.Decode(s, z, opts) })
		s.Close()
		if err != nil {
			return fmt.Errorf("vae decode: %w", err)
		}
		log.Info(fmt.Sprintf("wan vae decode: %d tiles at %s (%d retries) in %.2f s; activations peak %s (planned %s); %s",
			ds.Tiles, ds.Tiling, ds.Retries, ds.Elapsed.Seconds(), memory.FormatBytes(d.Backend.Stats().Peak-v.WeightBytes()),
			memory.FormatBytes(planned), d.Backend))
		return writeFrames(cmd, log, "wan vae decode", px, out, vo)
	})
}

func runWanEncode(f *vaeFlags, im *section.RGB, sample bool, seed uint64) error {
	log := slog.Default()
	return withVAE(f, log, "wan vae", wan.Load, wan.Options{NoDecoder: true}, func(d *device.Device, v *wan.VAE) error {
		cfg := v.Config()
		r := cfg.SpatialRatio()
		if im.W%r != 0 || im.H%r != 0 {
			return usagef("%dx%d pixels; the Wan VAE needs multiples of %d (use --resolution)", im.W, im.H, r)
		}
		x := section.VAEPixels(im)
		log.Info(fmt.Sprintf("wan vae encode: %dx%d image → latents (1, %d, 1, %d, %d)", im.W, im.H, cfg.ZDim, im.H/r, im.W/r))
		start := time.Now()
		d.Backend.ResetPeak()
		s := tensor.NewScope(d.Backend)
		defer s.Close()
		var lat *tensor.Tensor
		err := tensor.Catch(func() {
			mean, logvar := v.Encode(s, x)
			if sample {
				lat = vae.Sample(mean, logvar, sampler.NewTorchGenerator(seed))
			} else {
				lat = mean
			}
		})
		if err != nil {
			return fmt.Errorf("vae encode: %w", err)
		}
		if err := encodedFinite(f.vaeDir, lat); err != nil {
			return err
		}
		out := cfg.Normalize(lat) // the scale Wan's pipelines keep latents in
		return saveLatents(log, "wan vae encode", d, start, v.WeightBytes(), f.out, out)
	})
}
