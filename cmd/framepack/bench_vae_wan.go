package main

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/vae/wan"
)

// wanBenchLatent is the default latent of `bench vae --vae-class wan`: 81
// frames of 480×832, Wan 2.1's default video.
const wanBenchLatent = "1x16x21x60x104"

// runBenchWan is runBenchVAE for the Wan 2.1 VAE (random weights at the
// released config unless --vae): the same JSON lines, with "model": "wan2.1".
func runBenchWan(cmd *cobra.Command, f *benchVAEFlags, d *benchDevice, shape []int, dt tensor.DType, vt vae.Tiling, auto bool, z, ref *tensor.Tensor) error {
	log := slog.Default()
	start := time.Now()
	var v *wan.VAE
	var err error
	if f.vaeDir != "" {
		v, err = wan.Load(f.vaeDir, d.be, wan.Options{DType: dt, NoEncoder: true})
	} else {
		v, err = wan.RandomWeights(wan.DefaultConfig(), d.be, wan.Options{DType: dt, NoEncoder: true}, f.seed)
	}
	if err != nil {
		return err
	}
	defer v.Close()
	cfg := v.Config()
	if shape[1] != cfg.ZDim {
		return fmt.Errorf("latent %v: the VAE has %d latent channels", shape, cfg.ZDim)
	}
	log.Info(fmt.Sprintf("bench vae: wan %s weights on %s in %.1f s", memory.FormatBytes(v.WeightBytes()), d.name, time.Since(start).Seconds()))
	if z == nil {
		z = benchLatent(shape, f.seed)
	}
	budget := d.be.Budget().Cap
	opts := wan.DecodeOptions{Tiling: wanTiling(vt)}
	if auto {
		avail := budget - v.WeightBytes() - d.scratch
		var planned int64
		opts, planned = v.Plan(shape, avail)
		log.Info(fmt.Sprintf("bench vae: planner: %s for %s of activations (planned peak %s)", opts.Tiling,
			memory.FormatBytes(avail), memory.FormatBytes(planned)))
	}
	planned := v.DecodePeak(shape, opts.Tiling)

	var times []float64
	var st wan.DecodeStats
	var out *tensor.Tensor
	var peak, gpuPeak int64
	for i := 0; i <= f.iters; i++ {
		if err := cmd.Context().Err(); err != nil {
			return err
		}
		d.be.ResetPeak()
		if d.gpu != nil {
			d.gpu.ResetPeak()
		}
		o := opts
		o.Stats = &st
		o.Log = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
		s := tensor.NewScope(d.be)
		t0 := time.Now()
		err := tensor.Catch(func() { out = v.Decode(s, z, o) })
		if err == nil {
			err = d.be.Sync()
		}
		el := time.Since(t0).Seconds()
		s.Close()
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if i == 0 {
			log.Info(fmt.Sprintf("bench vae: warm-up decode %.2f s (%s, %d tiles)", el, st.Tiling, st.Tiles))
			d.prof.Reset()
			continue
		}
		times = append(times, el)
		peak = max(peak, d.be.Stats().Peak)
		if d.gpu != nil {
			gpuPeak = max(gpuPeak, d.gpu.Stats().Peak)
		}
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	r := cfg.SpatialRatio()
	res := benchResult{
		"bench": "vae_decode", "impl": "framepack", "model": "wan2.1", "mode": f.tiling, "tiling": st.Tiling.String(),
		"latent": shape, "frames": cfg.SampleFrames(shape[2]), "height": shape[3] * r, "width": shape[4] * r,
		"dtype": dt.String(), "seconds": sorted[len(sorted)/2], "all": times,
		"peak_bytes": peak, "weights_bytes": v.WeightBytes(),
		"activation_peak_bytes": peak - v.WeightBytes(), "planned_activation_peak_bytes": planned,
		"budget_bytes": budget, "tiles": st.Tiles, "retries": st.Retries, "device": d.name,
	}
	if d.gpu != nil {
		res["gpu_pool_peak_bytes"] = gpuPeak
	}
	if c := convchain.ChainOf(d.be); c != nil {
		var lines []string
		for _, s := range c.Summary() {
			lines = append(lines, s.String())
		}
		res["conv3d"] = lines
	}
	if err := printResult(cmd.OutOrStdout(), res); err != nil {
		return err
	}
	if ref != nil {
		e, maxAbs, err := compareSample(out, ref)
		if err != nil {
			return err
		}
		if err := printResult(cmd.OutOrStdout(), benchResult{"bench": "vae_reference", "model": "wan2.1", "reference": f.reference,
			"tiling": st.Tiling.String(), "dtype": dt.String(), "rel_l2": e, "max_abs": maxAbs}); err != nil {
			return err
		}
	}
	if err := printProfile(cmd, d, f.iters); err != nil {
		return err
	}
	if c := convchain.ChainOf(d.be); c != nil {
		c.LogSummary()
	}
	return nil
}

// benchLatent is a standard normal latent of shape from seed.
func benchLatent(shape []int, seed uint64) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(seed, 2))
	vals := make([]float32, tensor.Numel(shape))
	for i := range vals {
		vals[i] = float32(rng.NormFloat64())
	}
	return tensor.FromFloat32(vals, shape...)
}

// printProfile prints the per-class profile lines of --profile.
func printProfile(cmd *cobra.Command, d *benchDevice, iters int) error {
	if d.prof == nil {
		return nil
	}
	var total float64
	for _, l := range d.prof.Lines() {
		if !strings.Contains(l.Class, ".") {
			total += l.Seconds
		}
	}
	for _, l := range d.prof.Lines() {
		r := benchResult{"bench": "vae_profile", "class": l.Class, "calls": l.Calls,
			"seconds": l.Seconds / float64(iters), "share": l.Seconds / total}
		if l.TFLOPS > 0 {
			r["tflops"] = l.TFLOPS
		}
		if err := printResult(cmd.OutOrStdout(), r); err != nil {
			return err
		}
	}
	return nil
}
