package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/weights"
)

// The default latents of bench vae: one FramePack section at 544×704 for
// HunyuanVideo's VAE, 81 frames of 480×832 (Wan 2.1's default video) for
// Wan's.
const (
	HunyuanLatent = "1x16x18x68x88"
	WanLatent     = "1x16x21x60x104"
)

// VAEOptions are bench vae's.
type VAEOptions struct {
	VAE    string // the VAE folder; "": random weights at the released config
	Class  string // hunyuan or wan
	Latent string // BxCxTxHxW; "": the class's default
	DType  string
	Tiling string // framewise, spatial:TILE:STRIDE, none or auto
	// VRAMLimit is the device's budget (the planner's, for auto).
	VRAMLimit memory.Size
	// Reference is a safetensors file with z and sample: z is decoded and
	// the output compared with sample.
	Reference string
	Device    string
	Layout    string // the vendor library tiers' conv3d layout
	Search    string // the vendor library's conv3d algorithm search
	Iters     int
	Seed      uint64
	Profile   bool
}

// vaeJob is what the options ask: the latent (its shape, or the
// reference's z with the sample to compare), the dtype and the tiling.
type vaeJob struct {
	shape  []int
	dt     tensor.DType
	tiling vae.Tiling
	auto   bool // the planner chooses the tiling
	z, ref *tensor.Tensor
}

func (o *VAEOptions) plan() (*vaeJob, error) {
	if o.Class != "hunyuan" && o.Class != "wan" {
		return nil, fmt.Errorf("--vae-class %q: want hunyuan or wan", o.Class)
	}
	latent := o.Latent
	if latent == "" {
		latent = map[string]string{"hunyuan": HunyuanLatent, "wan": WanLatent}[o.Class]
	}
	j := &vaeJob{}
	var err error
	if j.shape, err = parseShape(latent); err != nil {
		return nil, err
	}
	if len(j.shape) != 5 {
		return nil, fmt.Errorf("--latent %q: want 5 sizes BxCxTxHxW", latent)
	}
	if j.dt, err = tensor.ParseDType(o.DType); err != nil {
		return nil, fmt.Errorf("--dtype: %w", err)
	}
	if j.tiling, j.auto, err = vae.ParseTiling(o.Tiling); err != nil {
		return nil, fmt.Errorf("--tiling %w", err)
	}
	if o.Iters <= 0 {
		return nil, fmt.Errorf("--iters %d: want at least 1", o.Iters)
	}
	if o.Reference != "" {
		if j.z, err = readFloat32(o.Reference, "z"); err == nil {
			j.ref, err = readFloat32(o.Reference, "sample")
		}
		if err != nil {
			return nil, fmt.Errorf("--reference: %w", err)
		}
		j.shape = j.z.Shape()
	}
	return j, nil
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

// readFloat32 reads the float tensor name of a safetensors file as an f32
// host tensor.
func readFloat32(path, name string) (*tensor.Tensor, error) {
	ck, err := weights.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if !ck.Has(name) {
		return nil, fmt.Errorf("%s: no tensor %q", path, name)
	}
	t, err := ck.Host(name)
	if err != nil {
		return nil, err
	}
	switch t.DType() {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.F64:
	default:
		return nil, fmt.Errorf("%s: %s is %s, want a float tensor", path, name, t.DType())
	}
	// A copy: the file's memory goes with ck.
	out := tensor.New(tensor.F32, t.Shape()...)
	copy(out.Float32s(), t.ToFloat32())
	return out, nil
}

// vaeDevice is the device the bench decodes on, with the profile's hook
// under its budget when Profile is on.
type vaeDevice struct {
	*device.Device
	prof    *gpu.Profile
	scratch int64 // conv scratch the planner leaves out of the budget
}

func openVAEDevice(o *VAEOptions, log *slog.Logger) (*vaeDevice, error) {
	layout, err := gpu.ParseLayout(o.Layout)
	if err != nil {
		return nil, err
	}
	var prof *gpu.Profile
	dopts := device.Options{Choice: o.Device, VRAMLimit: o.VRAMLimit, Log: log}
	if o.Profile {
		prof = gpu.NewProfile()
		dopts.Hook = prof.Hook
	}
	dopts.Conv = gpu.ConvOptions{Layout: layout, Search: o.Search, Profile: prof}
	d, err := device.Open(dopts)
	if err != nil {
		return nil, err
	}
	vd := &vaeDevice{Device: d, prof: prof}
	if d.IsGPU() {
		vd.scratch = device.ConvScratch
	}
	return vd, nil
}

// VAE times the VAE decode of one latent and prints one line (with the
// reference's comparison and the profile's lines when asked).
func VAE(ctx context.Context, w io.Writer, o VAEOptions) error {
	log := slog.Default()
	j, err := o.plan()
	if err != nil {
		return err
	}
	d, err := openVAEDevice(&o, log)
	if err != nil {
		return err
	}
	defer d.Close()
	open := openHunyuanVAE
	if o.Class == "wan" {
		open = openWanVAE
	}
	start := time.Now()
	m, err := open(&o, d, j.shape, j.dt, j.tiling)
	if err != nil {
		return err
	}
	defer m.close()
	log.Info(fmt.Sprintf("bench vae: %s%s weights on %s in %.1f s", m.name, memory.FormatBytes(m.weights), d.Name, time.Since(start).Seconds()))
	if j.z == nil {
		j.z = randomLatent(j.shape, o.Seed)
	}
	return decodeBench(ctx, w, &o, d, m, j)
}

// vaeModel is one VAE class under the bench: its decode at the tiling
// chosen so far.
type vaeModel struct {
	name    string // the log's name for a class other than HunyuanVideo's ("wan ")
	weights int64  // WeightBytes
	// plan chooses the tiling for avail bytes of activations; peak is the
	// planned activation peak at the tiling chosen.
	plan   func(avail int64) (tiling fmt.Stringer, planned int64)
	peak   func() int64
	decode func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, decodeStats)
	extra  Result // the class's own keys of every result line
	close  func()
}

// decodeStats is what a decode reports (vae.DecodeStats, wan.DecodeStats).
type decodeStats struct {
	tiling         string
	tiles, retries int
}

func openHunyuanVAE(o *VAEOptions, d *vaeDevice, shape []int, dt tensor.DType, til vae.Tiling) (*vaeModel, error) {
	var v *vae.VAE
	var err error
	if o.VAE != "" {
		v, err = vae.Load(o.VAE, d.Backend, vae.Options{DType: dt, NoEncoder: true})
	} else {
		v, err = vae.RandomWeightsWith(vae.DefaultConfig(), d.Backend, vae.Options{DType: dt, NoEncoder: true}, o.Seed)
	}
	if err != nil {
		return nil, err
	}
	if cfg := v.Config(); shape[1] != cfg.LatentChannels {
		v.Close()
		return nil, fmt.Errorf("latent %v: the VAE has %d latent channels", shape, cfg.LatentChannels)
	}
	opts := vae.DecodeOptions{Tiling: til}
	return &vaeModel{weights: v.WeightBytes(), close: v.Close,
		plan: func(avail int64) (fmt.Stringer, int64) {
			var planned int64
			opts, planned = v.Plan(shape, avail)
			return opts.Tiling, planned
		},
		peak: func() int64 { return v.DecodePeak(shape, opts.Tiling) },
		decode: func(s *tensor.Scope, z *tensor.Tensor, log func(string, ...any)) (*tensor.Tensor, decodeStats) {
			var st vae.DecodeStats
			o := opts
			o.Stats, o.Log = &st, log
			out := v.Decode(s, z, o)
			return out, decodeStats{st.Tiling.String(), st.Tiles, st.Retries}
		},
	}, nil
}

// randomLatent is a standard normal latent of shape from seed.
func randomLatent(shape []int, seed uint64) *tensor.Tensor {
	return tensor.RandN(rand.New(rand.NewPCG(seed, 2)), shape...)
}

// decodeTimes are the timed decodes of a run.
type decodeTimes struct {
	times, idles  []float64 // seconds; the device's queue idle in each
	st            decodeStats
	out           *tensor.Tensor // the last decode's
	peak, gpuPeak int64
}

// decodeBench times m's decode of j.z: one warm-up, then o.Iters timed
// decodes, printed as JSON lines with the reference comparison and the
// profile when asked.
func decodeBench(ctx context.Context, w io.Writer, o *VAEOptions, d *vaeDevice, m *vaeModel, j *vaeJob) error {
	log := slog.Default()
	budget := d.Backend.Budget().Cap
	if j.auto {
		avail := budget - m.weights - d.scratch
		til, planned := m.plan(avail)
		log.Info(fmt.Sprintf("bench vae: planner: %s for %s of activations (planned peak %s)", til,
			memory.FormatBytes(avail), memory.FormatBytes(planned)))
	}
	planned := m.peak()
	dt, err := timeDecodes(ctx, o.Iters, d, m, j.z)
	if err != nil {
		return err
	}
	sorted := slices.Clone(dt.times)
	slices.Sort(sorted)
	res := Result{
		"bench": "vae_decode", "impl": "framepack", "mode": o.Tiling, "tiling": dt.st.tiling,
		"latent": j.shape, "dtype": j.dt.String(), "seconds": sorted[len(sorted)/2], "all": dt.times,
		"peak_bytes": dt.peak, "weights_bytes": m.weights,
		"activation_peak_bytes": dt.peak - m.weights, "planned_activation_peak_bytes": planned,
		"budget_bytes": budget, "tiles": dt.st.tiles, "retries": dt.st.retries, "device": d.Name,
	}
	if len(dt.idles) == len(dt.times) {
		// How long the device's queue stood empty after the host waited
		// on it (the pixels' downloads), in the median decode.
		res["device_idle_s"] = dt.idles[slices.Index(dt.times, sorted[len(sorted)/2])]
	}
	maps.Copy(res, m.extra)
	if d.GPU != nil {
		res["gpu_pool_peak_bytes"] = dt.gpuPeak
	}
	if c := convchain.ChainOf(d.Backend); c != nil {
		var lines []string
		for _, s := range c.Summary() {
			lines = append(lines, s.String())
		}
		res["conv3d"] = lines
		res["conv3d_tiers"] = c.Tiers()
	}
	if err := Print(w, res); err != nil {
		return err
	}
	if j.ref != nil {
		if err := printReference(w, o.Reference, m, j, dt); err != nil {
			return err
		}
	}
	if err := printVAEProfile(w, d.prof, o.Iters); err != nil {
		return err
	}
	if c := convchain.ChainOf(d.Backend); c != nil {
		c.LogSummary()
	}
	return nil
}

// timeDecodes runs one warm-up decode and iters timed ones, each with the
// peaks reset.
func timeDecodes(ctx context.Context, iters int, d *vaeDevice, m *vaeModel, z *tensor.Tensor) (*decodeTimes, error) {
	log := slog.Default()
	logf := func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
	dt := &decodeTimes{}
	for i := 0; i <= iters; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d.Backend.ResetPeak()
		if d.GPU != nil {
			d.GPU.ResetPeak()
		}
		s := tensor.NewScope(d.Backend)
		idle0, idleOK := tensor.QueueIdle(d.Backend)
		t0 := time.Now()
		err := tensor.Catch(func() { dt.out, dt.st = m.decode(s, z, logf) })
		if err == nil {
			err = d.Backend.Sync()
		}
		el := time.Since(t0).Seconds()
		if idle1, ok := tensor.QueueIdle(d.Backend); ok && idleOK && i > 0 {
			dt.idles = append(dt.idles, (idle1 - idle0).Seconds())
		}
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		if i == 0 {
			log.Info(fmt.Sprintf("bench vae: warm-up decode %.2f s (%s, %d tiles)", el, dt.st.tiling, dt.st.tiles))
			d.prof.Reset() // the profile covers the timed decodes only
			continue
		}
		dt.times = append(dt.times, el)
		dt.peak = max(dt.peak, d.Backend.Stats().Peak)
		if d.GPU != nil {
			dt.gpuPeak = max(dt.gpuPeak, d.GPU.Stats().Peak)
		}
	}
	return dt, nil
}

// printReference prints how far the last decode is from the reference's
// sample: the whole video, and frame by frame (a difference confined to a
// few frames, a tile's seam, shows there, not in the whole video's error).
func printReference(w io.Writer, reference string, m *vaeModel, j *vaeJob, dt *decodeTimes) error {
	e, maxAbs, err := compareSample(dt.out, j.ref)
	if err != nil {
		return err
	}
	r := Result{"bench": "vae_reference", "reference": reference,
		"tiling": dt.st.tiling, "dtype": j.dt.String(), "rel_l2": e, "max_abs": maxAbs}
	if rel, psnr, err := frameErrors(dt.out.ToFloat32(), tensor.Float32s(j.ref), j.ref.Shape()); err == nil {
		r["frame_rel_l2"], r["frame_psnr"], r["psnr"] = sig3s(rel), rounded(psnr), psnrSummary(psnr)
	}
	if model, ok := m.extra["model"]; ok {
		r["model"] = model
	}
	return Print(w, r)
}

// printVAEProfile prints the per-class profile lines of Profile.
func printVAEProfile(w io.Writer, prof *gpu.Profile, iters int) error {
	if prof == nil {
		return nil
	}
	var total float64
	for _, l := range prof.Lines() {
		if !strings.Contains(l.Class, ".") {
			total += l.Seconds
		}
	}
	for _, l := range prof.Lines() {
		r := Result{"bench": "vae_profile", "class": l.Class, "calls": l.Calls,
			"seconds": l.Seconds / float64(iters), "share": l.Seconds / total}
		if l.TFLOPS > 0 {
			r["tflops"] = l.TFLOPS
		}
		if err := Print(w, r); err != nil {
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
