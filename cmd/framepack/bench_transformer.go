package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	framepack "github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/internal/envconfig"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/tensor"
)

func init() { benchCommands = append(benchCommands, newBenchTransformer) }

type benchTransformerFlags struct {
	modes, dtype, device   string
	weightsMode            string
	fp8Compute             string
	fp8Attention           bool
	vramLimit, preserve    string
	iters, warmup          int
	layers, singleLayers   int
	latentH, latentW       int
	seed                   uint64
	profile, check, opByOp bool
	gpus                   string
	save, against          string
}

func newBenchTransformer() *cobra.Command {
	f := &benchTransformerFlags{}
	cmd := &cobra.Command{
		Use:   "transformer",
		Short: "Time one forward of FramePack's transformer at the real config (random weights made in process)",
		Long: `Run FramePack's packed HunyuanVideo transformer at the released config with random
weights on one section at 544x704 (noisy latents 9x68x88, clean 2 + 2 + 16 frames, 729 SigLIP
tokens, 100 valid text tokens) and print one JSON line per measurement: seconds per forward
(median of --iters after --warmup), peak device memory (the budget's accounting and the GPU
pool's), the FLOPs of the blocks' GEMMs and attention and the overall rate.

--mode resident keeps every weight on the device; streamed keeps the blocks in pinned host
memory under the --vram-limit budget (default 6G) and copies each block ahead of its use,
keeping resident what the budget allows beside --preserve.

--profile times every kernel class with device events in one more forward per mode and
prints one line per class (calls, seconds, share of the forward, TFLOP/s where it counts
FLOPs); "idle" is the forward's time not covered by a kernel (launch gaps, waits for
streamed weights). --check compares the streamed output with the resident one.

--gpus runs one process per GPU sharing each forward (sequence parallel over
NCCL or RCCL, as generate --gpus); rank 0 prints, the profile's "exchange" is
the time of the all-to-alls, and --check holds the shared output against the
same forward on one GPU.`,
		Example: `  framepack bench transformer
  framepack bench transformer --mode streamed --vram-limit 6G --profile
  framepack bench transformer --mode resident,streamed --check
  framepack bench transformer --mode resident --gpus 2 --profile`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchTransformer(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.modes, "mode", "resident,streamed", "resident, streamed, or both comma-separated")
	fl.StringVar(&f.dtype, "dtype", "bf16", "compute dtype: bf16, f16 or f32")
	fl.StringVar(&f.weightsMode, "weights", "", "block weights: empty for the compute dtype, or fp8 (FP8 E4M3, per-channel scales)")
	fl.StringVar(&f.fp8Compute, "fp8-compute", "auto", "with --weights fp8: on (inputs quantized per token, FP8 products), off (weight-only) or auto (on where the GPU has FP8 tensor cores)")
	fl.BoolVar(&f.fp8Attention, "fp8-attention", false, "the attention in FP8 where the GPU has an engine for it (as generate --fp8-attention)")
	fl.StringVar(&f.device, "device", "auto", "auto, gpu or cpu")
	fl.StringVar(&f.vramLimit, "vram-limit", "6G", "the streamed mode's device memory budget")
	fl.StringVar(&f.preserve, "preserve", "3.5G", "the streamed mode's memory kept free for activations and streamed blocks")
	fl.IntVar(&f.iters, "iters", 5, "timed forwards per mode")
	fl.IntVar(&f.warmup, "warmup", 1, "untimed forwards first")
	fl.IntVar(&f.layers, "layers", -1, "double blocks (default: the config's 20)")
	fl.IntVar(&f.singleLayers, "single-layers", -1, "single blocks (default: the config's 40)")
	fl.IntVar(&f.latentH, "latent-height", 68, "latent height (pixels / 8)")
	fl.IntVar(&f.latentW, "latent-width", 88, "latent width (pixels / 8)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the weights and inputs")
	fl.BoolVar(&f.profile, "profile", false, "time every kernel class with device events (one more forward per mode)")
	fl.BoolVar(&f.check, "check", false, "compare the streamed output with the resident one (with --gpus: the shared output with one GPU's)")
	fl.BoolVar(&f.opByOp, "op-by-op", false, "run the elementwise work op by op (no fused kernels), for comparison")
	fl.StringVar(&f.gpus, "gpus", "", gpusUsage)
	fl.StringVar(&f.save, "save", "", "write the last forward's output to this file (f32, little-endian), for --against")
	fl.StringVar(&f.against, "against", "", "report the output's relative L2 against a file --save wrote (another dtype, device or --gpus)")
	return cmd
}

func runBenchTransformer(cmd *cobra.Command, f *benchTransformerFlags) error {
	if supervised, err := superviseGPUs(cmd.Context(), cmd, f.gpus); supervised {
		return err
	}
	out := cmd.OutOrStdout()
	if isFollower() {
		out = io.Discard
	}
	log := slog.Default()
	dt, err := parseTrDType(f.dtype)
	if err != nil {
		return err
	}
	if f.weightsMode != "" && f.weightsMode != "fp8" {
		return fmt.Errorf("--weights %q: want fp8 or nothing", f.weightsMode)
	}
	fp8c, err := framepack.ParseFP8Compute(f.fp8Compute)
	if err != nil {
		return fmt.Errorf("--fp8-compute: %w", err)
	}
	modes := strings.Split(f.modes, ",")
	for _, m := range modes {
		if m != "resident" && m != "streamed" {
			return fmt.Errorf("--mode %q: want resident, streamed or both", f.modes)
		}
	}
	if f.iters < 1 || f.warmup < 0 {
		return fmt.Errorf("--iters must be at least 1 and --warmup at least 0")
	}
	cfg := hunyuan.FramePackI2V()
	if f.layers >= 0 {
		cfg.NumLayers = f.layers
	}
	if f.singleLayers >= 0 {
		cfg.NumSingleLayers = f.singleLayers
	}
	sec := hunyuan.BenchSection()
	sec.LatentH, sec.LatentW = f.latentH, f.latentW
	if err := cfg.Validate(); err != nil {
		return err
	}

	rank, err := thisRank()
	if err != nil {
		return err
	}
	opts := device.Options{Choice: f.device, Log: log}
	if rank != nil {
		opts.Choice, opts.Ordinal = "gpu", rank.GPU
	}
	d, err := device.Open(opts)
	if err != nil {
		return err
	}
	defer d.Close()
	var prof *eventProfile
	inner := tensor.Backend(d.CPU)
	if d.GPU != nil {
		prof = &eventProfile{g: d.GPU}
		inner = tensor.WithSettings(d.GPU, tensor.Settings{Hook: prof.hook, OpByOp: f.opByOp || envconfig.Read().OpByOp})
	}
	var comm tensor.Comm
	if rank != nil {
		c, err := gpu.Join(d.GPU, rank.Rank, rank.Size, rank.ID, rank.Publish, 5*time.Minute)
		if err != nil {
			return err
		}
		defer c.Close()
		comm = &profiledComm{Comm: c, prof: prof}
	}

	img, txt := cfg.Tokens(sec)
	gemmF, attnF := cfg.BlockFLOPs(img, txt)
	base := benchResult{
		"bench": "transformer_forward", "impl": "framepack", "dtype": dt.String(), "weights": f.weightsMode, "device": d.Name,
		"fp8_compute":   f.weightsMode == "fp8" && fp8c.Enabled(d.Backend),
		"fp8_attention": f.fp8Attention,
		"latent":        []int{sec.Batch, cfg.InChannels, sec.WindowSize, sec.LatentH, sec.LatentW},
		"valid_text":    sec.ValidText,
		"tokens":        img + txt,
		"layers":        []int{cfg.NumLayers, cfg.NumSingleLayers},
		"gemm_tflop":    gemmF / 1e12,
		"attn_tflop":    attnF / 1e12,
		"fused":         !f.opByOp,
		"gpus":          1,
	}
	if comm != nil {
		base["gpus"] = comm.Size()
	}
	in := hunyuan.SectionInputs(cfg, sec, f.seed)

	var residentOut []float32
	for _, mode := range modes {
		budget := d.Budget
		mopts := hunyuan.Options{DType: dt, FP8: f.weightsMode == "fp8"}
		mopts.FP8Compute, mopts.FP8Attention = base["fp8_compute"].(bool), f.fp8Attention
		if mode == "streamed" {
			budget, err = d.Budget.WithFlags(f.vramLimit, f.preserve)
			if err != nil {
				return err
			}
			mopts.HostBlocks, mopts.KeepBlockBytes = true, hunyuan.AutoKeep
		}
		mb := memory.Budgeted(inner, budget)
		r, got, err := benchTransformerMode(mb, d.GPU, prof, comm, cfg, sec, in, mopts, f, log)
		if err != nil {
			if err := printResult(out, merge(base, benchResult{"mode": mode, "error": err.Error()})); err != nil {
				return err
			}
			continue
		}
		r["mode"] = mode
		r["budget_cap_bytes"] = budget.Cap
		if mode == "streamed" {
			r["budget_preserve_bytes"] = budget.Preserve
		}
		r["tflops"] = (gemmF + attnF) / r["seconds"].(float64) / 1e12
		if f.check {
			if mode == "resident" {
				residentOut = got
			} else if residentOut != nil {
				r["rel_l2_vs_resident"] = numcmp.RelL2(got, residentOut)
			}
		}
		lines := r["profile"]
		delete(r, "profile")
		if err := printResult(out, merge(base, r)); err != nil {
			return err
		}
		if pl, ok := lines.([]benchResult); ok {
			for _, l := range pl {
				l["bench"], l["mode"] = "transformer_profile", mode
				if err := printResult(out, l); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// benchTransformerMode makes the random model on mb, times its forwards
// and returns the measurements and the last output (host f32).
func benchTransformerMode(mb *memory.Backend, g *gpu.Backend, prof *eventProfile, comm tensor.Comm, cfg hunyuan.Config, sec hunyuan.Section,
	in *hunyuan.Inputs, opts hunyuan.Options, f *benchTransformerFlags, log *slog.Logger) (benchResult, []float32, error) {
	t0 := time.Now()
	m, err := hunyuan.RandomModel(cfg, mb, opts, f.seed)
	if err != nil {
		return nil, nil, err
	}
	if err := m.SetSequenceParallel(comm); err != nil {
		m.Close()
		return nil, nil, err
	}
	defer func() {
		m.Close()
		mb.Trim()
	}()
	build := time.Since(t0).Seconds()
	dev, host := m.WeightBytes()
	log.Info("bench transformer: model ready", "seconds", build, "device_weights", memory.FormatBytes(dev),
		"host_weights", memory.FormatBytes(host), "streamed_blocks", m.StreamedBlocks())

	// The inputs live on the device, as the pipeline keeps them (the mask
	// stays on the host: the model reads it there).
	ins := tensor.NewScope(mb)
	defer ins.Close()
	var din hunyuan.Inputs
	err = tensor.Catch(func() {
		din = *in
		for _, p := range []**tensor.Tensor{&din.HiddenStates, &din.EncoderHiddenStates, &din.PooledProjections,
			&din.ImageEmbeddings, &din.CleanLatents, &din.CleanLatents2x, &din.CleanLatents4x} {
			if *p != nil {
				*p = ins.To(*p)
			}
		}
	})
	if err != nil {
		return nil, nil, err
	}

	var out []float32
	forward := func(keep bool) (float64, error) {
		s := tensor.NewScope(mb)
		defer s.Close()
		start := time.Now()
		err := tensor.Catch(func() {
			o := m.Forward(s, &din)
			if err := mb.Sync(); err != nil {
				panic(&tensor.OpError{Op: "sync", Err: err})
			}
			if keep {
				out = tensor.Float32s(o)
			}
		})
		return time.Since(start).Seconds(), err
	}
	for i := 0; i < f.warmup; i++ {
		if _, err := forward(false); err != nil {
			return nil, nil, err
		}
	}
	mb.ResetPeak()
	if g != nil {
		g.ResetPeak()
	}
	var times []float64
	for i := 0; i < f.iters; i++ {
		sec, err := forward(i == f.iters-1 && (f.check || f.save != "" || f.against != ""))
		if err != nil {
			return nil, nil, err
		}
		times = append(times, sec)
	}
	var vsOne float64
	if comm != nil && f.check {
		// Every rank runs the forward alone once (no exchanges, so no rank
		// waits for another) to hold the shared output against it.
		shared := out
		if err := m.SetSequenceParallel(nil); err != nil {
			return nil, nil, err
		}
		if _, err := forward(true); err != nil {
			return nil, nil, err
		}
		vsOne = numcmp.RelL2(shared, out)
		out = shared // what --save and --against see is the shared forward's
		if err := m.SetSequenceParallel(comm); err != nil {
			return nil, nil, err
		}
	}
	st := mb.Stats()
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	r := benchResult{
		"seconds":             sorted[len(sorted)/2],
		"all":                 times,
		"peak_bytes":          st.Peak,
		"device_weight_bytes": dev,
		"host_weight_bytes":   host,
		"streamed_blocks":     m.StreamedBlocks(),
		"build_seconds":       build,
	}
	if comm != nil && f.check {
		r["rel_l2_vs_one_gpu"] = vsOne
	}
	if err := saveOrCompare(r, out, f); err != nil {
		return nil, nil, err
	}
	if g != nil {
		gs := g.Stats()
		r["gpu_peak_bytes"], r["gpu_pool_bytes"] = gs.Peak, gs.Reserved
	}
	if f.profile && prof != nil {
		prof.start()
		wall, err := forward(false)
		lines, perr := prof.stop(wall)
		if err != nil {
			return nil, nil, err
		}
		if perr != nil {
			return nil, nil, perr
		}
		r["profile"] = lines
		r["profile_seconds"] = wall
	}
	return r, out, nil
}

func parseTrDType(s string) (tensor.DType, error) {
	switch s {
	case "bf16", "bfloat16":
		return tensor.BF16, nil
	case "f16", "fp16", "float16":
		return tensor.F16, nil
	case "f32", "fp32", "float32":
		return tensor.F32, nil
	}
	return 0, fmt.Errorf("--dtype %q: want bf16, f16 or f32", s)
}

func merge(a, b benchResult) benchResult {
	out := benchResult{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// ---- kernel-class timing with device events ----

// eventProfile times kernel classes by recording a pair of events on the
// GPU's stream around each kernel while on; the times are read after the
// forward, so the kernels run as they do unprofiled.
type eventProfile struct {
	g    *gpu.Backend
	mu   sync.Mutex
	on   bool
	recs []eventRec
	pool []hip.Event
	err  error
}

type eventRec struct {
	class      string
	flops      float64
	start, end hip.Event
}

func (p *eventProfile) event() (hip.Event, error) {
	if n := len(p.pool); n > 0 {
		e := p.pool[n-1]
		p.pool = p.pool[:n-1]
		return e, nil
	}
	return p.g.Device().NewEvent(true)
}

func (p *eventProfile) time(class string, flops float64, fn func() error) error {
	p.mu.Lock()
	if !p.on {
		p.mu.Unlock()
		return fn()
	}
	d, st := p.g.Device(), p.g.Stream()
	a, err1 := p.event()
	b, err2 := p.event()
	if err1 != nil || err2 != nil {
		p.err = fmt.Errorf("profile: events: %v %v", err1, err2)
		p.on = false
		p.mu.Unlock()
		return fn()
	}
	d.Record(a, st)
	p.mu.Unlock()
	err := fn()
	p.mu.Lock()
	d.Record(b, st)
	p.recs = append(p.recs, eventRec{class, flops, a, b})
	p.mu.Unlock()
	return err
}

func (p *eventProfile) start() {
	p.mu.Lock()
	p.on, p.recs, p.err = true, nil, nil
	p.mu.Unlock()
}

// stop ends timing and returns one line per class, largest first, and the
// idle time of a forward of wall seconds.
func (p *eventProfile) stop(wall float64) ([]benchResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = false
	if err := p.g.Sync(); err != nil {
		return nil, err
	}
	type acc struct {
		calls     int
		ms, flops float64
	}
	by := map[string]*acc{}
	var total float64
	for _, r := range p.recs {
		ms, err := p.g.Device().Elapsed(r.start, r.end)
		if err != nil {
			return nil, err
		}
		a := by[r.class]
		if a == nil {
			a = &acc{}
			by[r.class] = a
		}
		a.calls++
		a.ms += float64(ms)
		a.flops += r.flops
		total += float64(ms)
		p.pool = append(p.pool, r.start, r.end)
	}
	p.recs = nil
	var lines []benchResult
	for c, a := range by {
		l := benchResult{"class": c, "calls": a.calls, "seconds": a.ms / 1e3, "share": a.ms / 1e3 / wall}
		if a.flops > 0 && a.ms > 0 {
			l["tflop"] = a.flops / 1e12
			l["tflops"] = a.flops / (a.ms / 1e3) / 1e12
		}
		lines = append(lines, l)
	}
	slices.SortFunc(lines, func(a, b benchResult) int {
		x, y := a["seconds"].(float64), b["seconds"].(float64)
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	idle := wall - total/1e3
	lines = append(lines, benchResult{"class": "idle", "seconds": idle, "share": idle / wall})
	return lines, p.err
}

// hook times the kernels a Scope launches, fused ones included, by class.
func (p *eventProfile) hook(op tensor.Op, run func() error) error {
	return p.time(op.Class, op.Flops, run)
}

// profiledComm times the exchanges as the profile's "exchange" class (they
// are queued on the GPU's stream like its kernels).
type profiledComm struct {
	tensor.Comm
	prof *eventProfile
}

func (c *profiledComm) AllToAll(send, recv []*tensor.Tensor) error {
	return c.prof.time("exchange", 0, func() error { return c.Comm.AllToAll(send, recv) })
}

func (c *profiledComm) AllGather(x *tensor.Tensor, recv []*tensor.Tensor) error {
	return c.prof.time("exchange", 0, func() error { return c.Comm.AllGather(x, recv) })
}

// saveOrCompare writes out to --save and reports its relative L2 against
// the output in --against.
func saveOrCompare(r benchResult, out []float32, f *benchTransformerFlags) error {
	if f.save != "" && !isFollower() {
		if err := atomicfile.WriteFile(f.save, tensor.BytesOf(out), 0o644); err != nil {
			return err
		}
	}
	if f.against == "" {
		return nil
	}
	raw, err := os.ReadFile(f.against)
	if err != nil {
		return err
	}
	if len(raw) != 4*len(out) {
		return fmt.Errorf("--against %s: %d bytes, want %d (%d f32 values)", f.against, len(raw), 4*len(out), len(out))
	}
	want := make([]float32, len(out))
	for i := range want {
		want[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	r["rel_l2_vs_file"] = numcmp.RelL2(out, want)
	return nil
}
