package main

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
)

func init() { benchCommands = append(benchCommands, newBenchVAE) }

type benchVAEFlags struct {
	vaeDir, latent, dtype, tiling string
	vramLimit, reference, device  string
	layout, class                 string
	iters                         int
	seed                          uint64
	profile                       bool
	search                        string
}

func newBenchVAE() *cobra.Command {
	f := &benchVAEFlags{}
	cmd := &cobra.Command{
		Use:   "vae",
		Short: "Time the VAE decode at the released configuration (random weights unless --vae)",
		Long: `Decode one latent with HunyuanVideo's VAE (--vae-class wan: Wan 2.1's, by default at
81 frames of 480x832, latent 1x16x21x60x104) and print one JSON line per measurement:
seconds (median of --iters after a warm-up decode), peak device memory (the budget's
accounting, weights included, and the GPU pool's), the planned activation peak
(vae.DecodePeak) against the measured one, the tiles, and the conv3d chain's work per tier.

--tiling framewise is diffusers' default decode (frame-wise temporal tiles, no spatial
tiles), spatial:TILE:STRIDE adds enable_tiling's spatial tiles (spatial:256:192 is its
default), none decodes in one piece, and auto lets the planner choose from the budget
(--vram-limit, weights and conv scratch taken off first).

--reference FILE.safetensors (tensors z and sample, as bench/reference/bench_ref.py --save
writes them) decodes that z instead of a random one and reports the relative L2 error
against sample, for the whole video and frame by frame (frame_rel_l2, and frame_psnr of the
frames converted to 8 bits as FramePack writes them); use it with --vae pointing at the same
weights.`,
		Example: `  framepack bench vae --dtype f16 --tiling framewise
  framepack bench vae --tiling auto --vram-limit 4.2G
  framepack bench vae --vae /tmp/ref/vae --reference /tmp/ref/decode_framewise.safetensors
  framepack bench vae --vae-class wan --latent 1x16x5x40x40`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchVAE(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.vaeDir, "vae", "", "VAE folder (config.json + diffusion_pytorch_model.safetensors); default: random weights at the released config")
	fl.StringVar(&f.latent, "latent", "1x16x18x68x88", "latent shape BxCxTxHxW (one FramePack section at 544x704; with --vae-class wan: "+wanBenchLatent+")")
	fl.StringVar(&f.class, "vae-class", "hunyuan", "hunyuan (AutoencoderKLHunyuanVideo) or wan (AutoencoderKLWan, Wan 2.1); framewise and none are the same for wan, whose decode is always frame by frame")
	fl.StringVar(&f.dtype, "dtype", "f16", "compute dtype: f16, bf16 or f32")
	fl.StringVar(&f.tiling, "tiling", "framewise", "framewise, spatial:TILE:STRIDE, none or auto")
	fl.StringVar(&f.vramLimit, "vram-limit", "", `device memory budget ("4.2G", "50%"); default: the device's`)
	fl.StringVar(&f.reference, "reference", "", "safetensors file with z and sample to decode and compare against")
	fl.StringVar(&f.device, "device", "auto", "auto, gpu or cpu")
	fl.StringVar(&f.layout, "conv-layout", "auto", "conv3d layout of the vendor library tiers (optimized, conv2d): auto, ndhwc or ncdhw")
	fl.StringVar(&f.search, "conv-search", "auto", "benchmark the vendor library's conv3d algorithms for each new shape (in a child process, remembered): auto (on AMD), on or off")
	fl.IntVar(&f.iters, "iters", 3, "timed decodes (after one warm-up)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the random weights and latent")
	fl.BoolVar(&f.profile, "profile", false, "also time every kernel class (waits for the device after each; slower) and print one line per class")
	return cmd
}

func parseShape(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, "x") {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("shape %q: want positive sizes like 1x16x18x68x88", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDType(s string) (tensor.DType, error) {
	switch s {
	case "f16", "fp16", "float16":
		return tensor.F16, nil
	case "bf16", "bfloat16":
		return tensor.BF16, nil
	case "f32", "fp32", "float32":
		return tensor.F32, nil
	}
	return 0, fmt.Errorf("--dtype %q: want f16, bf16 or f32", s)
}

// parseTiling reads framewise, none, spatial:TILE:STRIDE; auto is
// planned later.
func parseTiling(s string) (vae.Tiling, bool, error) {
	switch {
	case s == "framewise":
		return vae.DefaultTiling(), false, nil
	case s == "none":
		return vae.Tiling{}, false, nil
	case s == "auto":
		return vae.Tiling{}, true, nil
	case strings.HasPrefix(s, "spatial"):
		tile, stride := 256, 192
		if parts := strings.Split(s, ":"); len(parts) == 3 {
			a, err1 := strconv.Atoi(parts[1])
			b, err2 := strconv.Atoi(parts[2])
			if err1 != nil || err2 != nil {
				return vae.Tiling{}, false, fmt.Errorf("--tiling %q: want spatial:TILE:STRIDE in pixels", s)
			}
			// Zero would silently become the default 256/192.
			if a <= 0 || b <= 0 || b >= a || a%8 != 0 || b%8 != 0 {
				return vae.Tiling{}, false, fmt.Errorf("--tiling %q: want spatial:TILE:STRIDE in pixels, multiples of 8 with 0 < STRIDE < TILE (spatial alone: 256:192)", s)
			}
			tile, stride = a, b
		} else if s != "spatial" {
			return vae.Tiling{}, false, fmt.Errorf("--tiling %q: want spatial:TILE:STRIDE in pixels", s)
		}
		return vae.SpatialTiling(tile, stride), false, nil
	}
	return vae.Tiling{}, false, fmt.Errorf("--tiling %q: want framewise, spatial:TILE:STRIDE, none or auto", s)
}

// benchDevice is the bench's compute backend: budget(chain(gpu)) or budget(cpu), with
// the profile's Hook in its settings under --profile.
type benchDevice struct {
	be      *memory.Backend
	gpu     *gpu.Backend
	name    string
	prof    *gpu.Profile
	scratch int64 // conv scratch the planner leaves out of the budget
	close   func()
}

func openBenchDevice(f *benchVAEFlags, log *slog.Logger) (*benchDevice, error) {
	layout, err := gpu.ParseLayout(f.layout)
	if err != nil {
		return nil, err
	}
	var prof *gpu.Profile
	if f.profile {
		prof = gpu.NewProfile()
	}
	if f.device != "cpu" {
		g, err := gpu.New(gpu.Options{Log: log})
		if err == nil {
			free, total, _ := g.Device().MemGetInfo()
			b, err := memory.NewBudget(g.Device().Name, int64(total), int64(free)).WithFlags(f.vramLimit, "")
			if err != nil {
				g.Close()
				return nil, err
			}
			chain, err := g.WithConvChain(cpu.New(), gpu.ConvOptions{Layout: layout, Search: f.search, Profile: prof, Log: log})
			if err != nil {
				g.Close()
				return nil, err
			}
			var inner tensor.Backend = chain
			if prof != nil {
				inner = tensor.WithSettings(chain, tensor.Settings{Hook: prof.Hook(chain)})
			}
			return &benchDevice{be: memory.Budgeted(inner, b), gpu: g, prof: prof,
				name:    fmt.Sprintf("%s (%s), %s", g.Device().Name, g.Device().Arch, g.BLAS()),
				scratch: device.ConvScratch, close: func() { g.Close() }}, nil
		}
		if f.device == "gpu" || !errors.Is(err, hip.ErrNoGPU) {
			return nil, fmt.Errorf("--device %s: %w", f.device, err)
		}
		log.Info("bench: no GPU, timing the CPU", "why", err)
	}
	c := cpu.New()
	b, err := memory.NewBudget("cpu", 1<<40, 0).WithFlags(f.vramLimit, "")
	if err != nil {
		return nil, err
	}
	var inner tensor.Backend = c
	if prof != nil {
		inner = tensor.WithSettings(c, tensor.Settings{Hook: prof.Hook(c)})
	}
	return &benchDevice{be: memory.Budgeted(inner, b), prof: prof, name: "CPU", close: func() {}}, nil
}

func runBenchVAE(cmd *cobra.Command, f *benchVAEFlags) error {
	log := slog.Default()
	if f.class != "hunyuan" && f.class != "wan" {
		return fmt.Errorf("--vae-class %q: want hunyuan or wan", f.class)
	}
	if f.class == "wan" && !cmd.Flags().Changed("latent") {
		f.latent = wanBenchLatent
	}
	shape, err := parseShape(f.latent)
	if err != nil {
		return err
	}
	if len(shape) != 5 {
		return fmt.Errorf("--latent %q: want 5 sizes BxCxTxHxW", f.latent)
	}
	dt, err := parseDType(f.dtype)
	if err != nil {
		return err
	}
	til, auto, err := parseTiling(f.tiling)
	if err != nil {
		return err
	}
	if f.iters <= 0 {
		return fmt.Errorf("--iters %d: want at least 1", f.iters)
	}
	var ref, z *tensor.Tensor
	if f.reference != "" {
		if z, err = readLatents(f.reference, "z"); err == nil {
			ref, err = readLatents(f.reference, "sample")
		}
		if err != nil {
			return fmt.Errorf("--reference: %w", err)
		}
		shape = z.Shape()
	}

	d, err := openBenchDevice(f, log)
	if err != nil {
		return err
	}
	defer d.close()
	open := openBenchHunyuan
	if f.class == "wan" {
		open = openBenchWan
	}
	start := time.Now()
	m, err := open(f, d, shape, dt, til)
	if err != nil {
		return err
	}
	defer m.close()
	log.Info(fmt.Sprintf("bench vae: %s%s weights on %s in %.1f s", m.name, memory.FormatBytes(m.weights), d.name, time.Since(start).Seconds()))
	if z == nil {
		z = benchLatent(shape, f.seed)
	}
	return runBenchDecode(cmd, f, d, m, shape, dt, auto, z, ref)
}

// benchModel is one VAE class under the bench: its decode at the tiling
// chosen so far.
type benchModel struct {
	name    string // the log's name for a class other than HunyuanVideo's ("wan ")
	weights int64  // WeightBytes
	// plan chooses the tiling for avail bytes of activations; peak is the
	// planned activation peak at the tiling chosen.
	plan   func(avail int64) (tiling fmt.Stringer, planned int64)
	peak   func() int64
	decode func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, benchStats)
	extra  benchResult // the class's own keys of every result line
	close  func()
}

// benchStats is what a decode reports (vae.DecodeStats, wan.DecodeStats).
type benchStats struct {
	tiling         string
	tiles, retries int
}

func openBenchHunyuan(f *benchVAEFlags, d *benchDevice, shape []int, dt tensor.DType, til vae.Tiling) (*benchModel, error) {
	var v *vae.VAE
	var err error
	if f.vaeDir != "" {
		v, err = vae.Load(f.vaeDir, d.be, vae.Options{DType: dt, NoEncoder: true})
	} else {
		v, err = vae.RandomWeightsWith(vae.DefaultConfig(), d.be, vae.Options{DType: dt, NoEncoder: true}, f.seed)
	}
	if err != nil {
		return nil, err
	}
	if cfg := v.Config(); shape[1] != cfg.LatentChannels {
		v.Close()
		return nil, fmt.Errorf("latent %v: the VAE has %d latent channels", shape, cfg.LatentChannels)
	}
	opts := vae.DecodeOptions{Tiling: til}
	return &benchModel{weights: v.WeightBytes(), close: v.Close,
		plan: func(avail int64) (fmt.Stringer, int64) {
			var planned int64
			opts, planned = v.Plan(shape, avail)
			return opts.Tiling, planned
		},
		peak: func() int64 { return v.DecodePeak(shape, opts.Tiling) },
		decode: func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, benchStats) {
			var st vae.DecodeStats
			o := opts
			o.Stats, o.Log = &st, log
			out := v.Decode(s, z, o)
			return out, benchStats{st.Tiling.String(), st.Tiles, st.Retries}
		},
	}, nil
}

// runBenchDecode times m's decode of z: one warm-up, then f.iters timed
// decodes, printed as JSON lines with the reference comparison and the
// profile when asked.
func runBenchDecode(cmd *cobra.Command, f *benchVAEFlags, d *benchDevice, m *benchModel, shape []int, dt tensor.DType, auto bool, z, ref *tensor.Tensor) error {
	log := slog.Default()
	budget := d.be.Budget().Cap
	if auto {
		avail := budget - m.weights - d.scratch
		til, planned := m.plan(avail)
		log.Info(fmt.Sprintf("bench vae: planner: %s for %s of activations (planned peak %s)", til,
			memory.FormatBytes(avail), memory.FormatBytes(planned)))
	}
	planned := m.peak()

	var times, idles []float64
	var st benchStats
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
		logf := func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
		s := tensor.NewScope(d.be)
		idle0, idleOK := tensor.QueueIdle(d.be)
		t0 := time.Now()
		err := tensor.Catch(func() { out, st = m.decode(s, z, logf) })
		if err == nil {
			err = d.be.Sync()
		}
		el := time.Since(t0).Seconds()
		if idle1, ok := tensor.QueueIdle(d.be); ok && idleOK && i > 0 {
			idles = append(idles, (idle1 - idle0).Seconds())
		}
		s.Close()
		if err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		if i == 0 {
			log.Info(fmt.Sprintf("bench vae: warm-up decode %.2f s (%s, %d tiles)", el, st.tiling, st.tiles))
			d.prof.Reset() // the profile covers the timed decodes only
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
	res := benchResult{
		"bench": "vae_decode", "impl": "framepack", "mode": f.tiling, "tiling": st.tiling,
		"latent": shape, "dtype": dt.String(), "seconds": sorted[len(sorted)/2], "all": times,
		"peak_bytes": peak, "weights_bytes": m.weights,
		"activation_peak_bytes": peak - m.weights, "planned_activation_peak_bytes": planned,
		"budget_bytes": budget, "tiles": st.tiles, "retries": st.retries, "device": d.name,
	}
	if len(idles) == len(times) {
		// How long the device's queue stood empty after the host waited
		// on it (the pixels' downloads), in the median decode.
		res["device_idle_s"] = idles[slices.Index(times, sorted[len(sorted)/2])]
	}
	maps.Copy(res, m.extra)
	if d.gpu != nil {
		res["gpu_pool_peak_bytes"] = gpuPeak
	}
	if c := convchain.ChainOf(d.be); c != nil {
		var lines []string
		for _, s := range c.Summary() {
			lines = append(lines, s.String())
		}
		res["conv3d"] = lines
		res["conv3d_tiers"] = c.Tiers()
	}
	if err := printResult(cmd.OutOrStdout(), res); err != nil {
		return err
	}
	if ref != nil {
		e, maxAbs, err := compareSample(out, ref)
		if err != nil {
			return err
		}
		r := benchResult{"bench": "vae_reference", "reference": f.reference,
			"tiling": st.tiling, "dtype": dt.String(), "rel_l2": e, "max_abs": maxAbs}
		if rel, psnr, err := frameErrors(out.ToFloat32(), tensor.Float32s(ref), ref.Shape()); err == nil {
			// Frame by frame: a difference confined to a few frames (a
			// tile's seam) shows here, not in the whole video's error.
			r["frame_rel_l2"], r["frame_psnr"], r["psnr"] = sig3s(rel), rounded(psnr), psnrSummary(psnr)
		}
		if model, ok := m.extra["model"]; ok {
			r["model"] = model
		}
		if err := printResult(cmd.OutOrStdout(), r); err != nil {
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
	return tensor.RandN(rand.New(rand.NewPCG(seed, 2)), shape...)
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

// compareSample is the relative L2 error and largest absolute difference
// of got against want (same shape).
func compareSample(got, want *tensor.Tensor) (float64, float64, error) {
	if !slices.Equal(got.Shape(), want.Shape()) {
		return 0, 0, fmt.Errorf("decoded %v, the reference sample is %v", got.Shape(), want.Shape())
	}
	g, w := got.ToFloat32(), tensor.Float32s(want)
	var num, den, mx float64
	for i := range w {
		dv := float64(g[i]) - float64(w[i])
		num += dv * dv
		den += float64(w[i]) * float64(w[i])
		mx = max(mx, math.Abs(dv))
	}
	return math.Sqrt(num / max(den, 1e-30)), mx, nil
}
