package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/convchain"
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

// openWan opens the device and loads the half of the Wan VAE that is
// needed, in f.dtype (auto: f16 on a GPU, f32 on the CPU).
func (f *vaeFlags) openWan(log *slog.Logger, opts wan.Options) (*device.Device, *wan.VAE, error) {
	d, err := device.Open(device.Options{Choice: f.device, VRAMLimit: f.vramLimit, Preserve: f.preserve, Log: log})
	if err != nil {
		return nil, nil, err
	}
	opts.DType = tensor.F32
	if d.IsGPU() {
		opts.DType = tensor.F16
	}
	if f.dtype != "auto" {
		opts.DType, _ = parseDType(f.dtype)
	}
	start := time.Now()
	v, err := wan.Load(f.vaeDir, d.Backend, opts)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	log.Info(fmt.Sprintf("wan vae: %s weights in %s on %s in %.1f s", memory.FormatBytes(v.WeightBytes()), opts.DType,
		d.Name, time.Since(start).Seconds()))
	return d, v, nil
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
	d, v, err := f.openWan(log, wan.Options{NoEncoder: true})
	if err != nil {
		return err
	}
	defer d.Close()
	defer v.Close()
	defer convchain.LogSummary(d.Backend)
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
	quiet, _ := cmd.Flags().GetBool("quiet")
	prog := newProgress(cmd.ErrOrStderr(), log, quiet, nil)
	prog.report(framepack.Progress{Stage: framepack.StageDecode, Section: 1, Sections: 1})
	err = tensor.Catch(func() { px = v.Decode(s, z, opts) })
	prog.done()
	s.Close()
	if err != nil {
		return fmt.Errorf("vae decode: %w", err)
	}
	log.Info(fmt.Sprintf("wan vae decode: %d tiles at %s (%d retries) in %.2f s; activations peak %s (planned %s); %s",
		ds.Tiles, ds.Tiling, ds.Retries, ds.Elapsed.Seconds(), memory.FormatBytes(d.Backend.Stats().Peak-v.WeightBytes()),
		memory.FormatBytes(planned), d.Backend))
	frames, err := video.FromPixels(px)
	if err != nil {
		return err
	}
	vo.Log = log
	if err := out.write(cmd.Context(), frames, vo, log); err != nil {
		return err
	}
	log.Info(fmt.Sprintf("wan vae decode: wrote %s (%d frames)", out.path, px.Dim(2)))
	return nil
}

func runWanEncode(f *vaeFlags, im *section.RGB, sample bool, seed uint64) error {
	log := slog.Default()
	d, v, err := f.openWan(log, wan.Options{NoDecoder: true})
	if err != nil {
		return err
	}
	defer d.Close()
	defer v.Close()
	defer convchain.LogSummary(d.Backend)
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
	err = tensor.Catch(func() {
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
	out := cfg.Normalize(lat) // the scale Wan's pipelines keep latents in
	log.Info(fmt.Sprintf("wan vae encode: %.2f s, activations peak %s; %s", time.Since(start).Seconds(),
		memory.FormatBytes(d.Backend.Stats().Peak-v.WeightBytes()), d.Backend))
	if err := weights.Save(f.out, map[string]*tensor.Tensor{"latents": out}, nil); err != nil {
		return err
	}
	log.Info(fmt.Sprintf("wan vae encode: wrote %s (latents %v)", f.out, out.Shape()))
	return nil
}
