package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/internal/launch"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/tensor"
)

// TransformerOptions are bench transformer's.
type TransformerOptions struct {
	Modes               string // resident, streamed or both, comma-separated
	DType, Device       string
	Weights, FP8Compute string // the block weights ("" or fp8) and, with fp8, auto, on or off
	FP8Attention        bool
	// VRAMLimit and Preserve are the streamed mode's budget on the device.
	VRAMLimit, Preserve  memory.Size
	Iters, Warmup        int
	Layers, SingleLayers int // -1: the config's
	LatentH, LatentW     int
	Seed                 uint64
	Profile, Check       bool
	OpByOp               bool
	Save, Against        string
	// Rank is this process's rank when one process per GPU shares each
	// forward (--gpus); nil alone.
	Rank *launch.Rank
}

// follower is a rank other than 0: it computes but prints and writes nothing.
func (o *TransformerOptions) follower() bool { return o.Rank != nil && o.Rank.Rank != 0 }

// transformerRun is what the options make: the config, the section and
// the settings every mode shares.
type transformerRun struct {
	cfg   hunyuan.Config
	sec   hunyuan.Section
	dt    tensor.DType
	fp8c  framepack.FP8Compute
	modes []string
}

func (o *TransformerOptions) plan() (*transformerRun, error) {
	r := &transformerRun{cfg: hunyuan.FramePackI2V(), sec: hunyuan.BenchSection()}
	var err error
	if r.dt, err = tensor.ParseDType(o.DType); err != nil {
		return nil, fmt.Errorf("--dtype: %w", err)
	}
	if o.Weights != "" && o.Weights != "fp8" {
		return nil, fmt.Errorf("--weights %q: want fp8 or nothing", o.Weights)
	}
	if r.fp8c, err = framepack.ParseFP8Compute(o.FP8Compute); err != nil {
		return nil, fmt.Errorf("--fp8-compute: %w", err)
	}
	r.modes = strings.Split(o.Modes, ",")
	for _, m := range r.modes {
		if m != "resident" && m != "streamed" {
			return nil, fmt.Errorf("--mode %q: want resident, streamed or both", o.Modes)
		}
	}
	if o.Iters < 1 || o.Warmup < 0 {
		return nil, fmt.Errorf("--iters must be at least 1 and --warmup at least 0")
	}
	if o.Layers >= 0 {
		r.cfg.NumLayers = o.Layers
	}
	if o.SingleLayers >= 0 {
		r.cfg.NumSingleLayers = o.SingleLayers
	}
	r.sec.LatentH, r.sec.LatentW = o.LatentH, o.LatentW
	return r, r.cfg.Validate()
}

// Transformer times the forward of FramePack's transformer at the real
// config with random weights, once per mode (resident, streamed), and
// prints one line per mode and, with Profile, one per kernel class.
func Transformer(ctx context.Context, w io.Writer, o TransformerOptions) error {
	if o.follower() {
		w = io.Discard
	}
	log := slog.Default()
	run, err := o.plan()
	if err != nil {
		return err
	}
	prof := &eventProfile{}
	dopts := device.Options{Choice: o.Device, OpByOp: o.OpByOp, Log: log, Hook: prof.hookOn}
	if o.Rank != nil {
		dopts.Choice, dopts.Ordinal = device.GPU, o.Rank.GPU
	}
	d, err := device.Open(dopts)
	if err != nil {
		return err
	}
	defer d.Close()
	if prof.g = d.GPU; d.GPU == nil {
		prof = nil
	}
	var comm tensor.Comm
	if o.Rank != nil {
		c, err := gpu.Join(d.GPU, o.Rank.Rank, o.Rank.Size, o.Rank.ID, o.Rank.Publish, 5*time.Minute)
		if err != nil {
			return err
		}
		defer c.Close()
		comm = &profiledComm{Comm: c, prof: prof}
	}
	t := &transformerBench{o: &o, run: run, d: d, prof: prof, comm: comm, log: log, in: hunyuan.SectionInputs(run.cfg, run.sec, o.Seed)}
	base := t.base()
	for _, mode := range run.modes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := t.mode(w, base, mode); err != nil {
			return err
		}
	}
	return nil
}

// transformerBench is one bench transformer run on an opened device.
type transformerBench struct {
	o     *TransformerOptions
	run   *transformerRun
	d     *device.Device
	prof  *eventProfile // nil on the CPU
	comm  tensor.Comm   // nil on one GPU
	log   *slog.Logger
	in    *hunyuan.Inputs
	flops float64 // the blocks' GEMMs and attention
	// residentOut is the resident mode's output, for --check.
	residentOut []float32
}

// base is what every line of the run says.
func (t *transformerBench) base() Result {
	cfg, sec := t.run.cfg, t.run.sec
	img, txt := cfg.Tokens(sec)
	gemmF, attnF := cfg.BlockFLOPs(img, txt)
	t.flops = gemmF + attnF
	r := Result{
		"bench": "transformer_forward", "impl": "framepack", "dtype": t.run.dt.String(), "weights": t.o.Weights, "device": t.d.Name,
		"fp8_compute":   t.o.Weights == "fp8" && t.run.fp8c.Enabled(t.d.Backend),
		"fp8_attention": t.o.FP8Attention,
		"latent":        []int{sec.Batch, cfg.InChannels, sec.WindowSize, sec.LatentH, sec.LatentW},
		"valid_text":    sec.ValidText,
		"tokens":        img + txt,
		"layers":        []int{cfg.NumLayers, cfg.NumSingleLayers},
		"gemm_tflop":    gemmF / 1e12,
		"attn_tflop":    attnF / 1e12,
		"fused":         !t.o.OpByOp,
		"gpus":          1,
	}
	if t.comm != nil {
		r["gpus"] = t.comm.Size()
	}
	return r
}

// mode times one mode under its budget (the device's for resident; the
// streamed mode's --vram-limit and --preserve) and prints its lines; a
// mode that fails prints a line with its error.
func (t *transformerBench) mode(w io.Writer, base Result, mode string) error {
	budget := t.d.Budget
	mopts := hunyuan.Options{DType: t.run.dt, FP8: t.o.Weights == "fp8"}
	mopts.FP8Compute, mopts.FP8Attention = base["fp8_compute"].(bool), t.o.FP8Attention
	if mode == "streamed" {
		var err error
		if budget, err = t.d.Budget.With(t.o.VRAMLimit, t.o.Preserve); err != nil {
			return err
		}
		mopts.HostBlocks, mopts.KeepBlockBytes = true, hunyuan.AutoKeep
	}
	t.d.Backend.SetBudget(budget)
	defer t.d.Backend.SetBudget(t.d.Budget)
	r, got, err := t.measure(mopts)
	if err != nil {
		return Print(w, merged(base, Result{"mode": mode, "error": err.Error()}))
	}
	r["mode"] = mode
	r["budget_cap_bytes"] = budget.Cap
	if mode == "streamed" {
		r["budget_preserve_bytes"] = budget.Preserve
	}
	r["tflops"] = t.flops / r["seconds"].(float64) / 1e12
	if t.o.Check {
		if mode == "resident" {
			t.residentOut = got
		} else if t.residentOut != nil {
			r["rel_l2_vs_resident"] = numcmp.RelL2(got, t.residentOut)
		}
	}
	lines := r["profile"]
	delete(r, "profile")
	if err := Print(w, merged(base, r)); err != nil {
		return err
	}
	if pl, ok := lines.([]Result); ok {
		for _, l := range pl {
			l["bench"], l["mode"] = "transformer_profile", mode
			if err := Print(w, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// measure makes the random model on the device, times its forwards and
// returns the measurements and the last output (host f32).
func (t *transformerBench) measure(opts hunyuan.Options) (Result, []float32, error) {
	mb := t.d.Backend
	t0 := time.Now()
	m, err := hunyuan.RandomModel(t.run.cfg, mb, opts, t.o.Seed)
	if err != nil {
		return nil, nil, err
	}
	if err := m.SetSequenceParallel(t.comm); err != nil {
		m.Close()
		return nil, nil, err
	}
	defer func() {
		m.Close()
		mb.Trim()
	}()
	build := time.Since(t0).Seconds()
	dev, host := m.WeightBytes()
	t.log.Info("bench transformer: model ready", "seconds", build, "device_weights", memory.FormatBytes(dev),
		"host_weights", memory.FormatBytes(host), "streamed_blocks", m.StreamedBlocks())

	ins := tensor.NewScope(mb)
	defer ins.Close()
	din, err := deviceInputs(ins, t.in)
	if err != nil {
		return nil, nil, err
	}
	f := &forwards{m: m, mb: mb, in: din}
	times, out, err := t.timeForwards(f)
	if err != nil {
		return nil, nil, err
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	r := Result{
		"seconds":             sorted[len(sorted)/2],
		"all":                 times,
		"peak_bytes":          mb.Stats().Peak,
		"device_weight_bytes": dev,
		"host_weight_bytes":   host,
		"streamed_blocks":     m.StreamedBlocks(),
		"build_seconds":       build,
	}
	if t.comm != nil && t.o.Check {
		// Every rank runs the forward alone once (no exchanges, so no rank
		// waits for another) to hold the shared output against it.
		if r["rel_l2_vs_one_gpu"], err = t.vsOneGPU(f, out); err != nil {
			return nil, nil, err
		}
	}
	if err := saveOrCompare(r, out, t.o); err != nil {
		return nil, nil, err
	}
	if g := t.d.GPU; g != nil {
		gs := g.Stats()
		r["gpu_peak_bytes"], r["gpu_pool_bytes"] = gs.Peak, gs.Reserved
	}
	if t.o.Profile && t.prof != nil {
		if err := t.profileForward(f, r); err != nil {
			return nil, nil, err
		}
	}
	return r, out, nil
}

// deviceInputs uploads the inputs to the device, as the pipeline keeps
// them (the mask stays on the host: the model reads it there).
func deviceInputs(s *tensor.Scope, in *hunyuan.Inputs) (hunyuan.Inputs, error) {
	din := *in
	err := tensor.Catch(func() {
		for _, p := range []**tensor.Tensor{&din.HiddenStates, &din.EncoderHiddenStates, &din.PooledProjections,
			&din.ImageEmbeddings, &din.CleanLatents, &din.CleanLatents2x, &din.CleanLatents4x} {
			if *p != nil {
				*p = s.To(*p)
			}
		}
	})
	return din, err
}

// forwards runs a model's forward on its inputs.
type forwards struct {
	m   *hunyuan.Model
	mb  *memory.Backend
	in  hunyuan.Inputs
	out []float32 // the last output kept
}

// run times one forward, to the device's end; keep copies its output to
// f.out.
func (f *forwards) run(keep bool) (float64, error) {
	s := tensor.NewScope(f.mb)
	defer s.Close()
	start := time.Now()
	err := tensor.Catch(func() {
		o := f.m.Forward(s, &f.in)
		if err := f.mb.Sync(); err != nil {
			panic(&tensor.OpError{Op: "sync", Err: err})
		}
		if keep {
			f.out = tensor.Float32s(o)
		}
	})
	return time.Since(start).Seconds(), err
}

// timeForwards runs the warm-up forwards, then the timed ones with the
// peaks reset; the last one's output is kept when a check, --save or
// --against needs it.
func (t *transformerBench) timeForwards(f *forwards) ([]float64, []float32, error) {
	for i := 0; i < t.o.Warmup; i++ {
		if _, err := f.run(false); err != nil {
			return nil, nil, err
		}
	}
	f.mb.ResetPeak()
	if t.d.GPU != nil {
		t.d.GPU.ResetPeak()
	}
	keep := t.o.Check || t.o.Save != "" || t.o.Against != ""
	var times []float64
	for i := 0; i < t.o.Iters; i++ {
		sec, err := f.run(i == t.o.Iters-1 && keep)
		if err != nil {
			return nil, nil, err
		}
		times = append(times, sec)
	}
	return times, f.out, nil
}

// vsOneGPU is the relative L2 of the shared forward's output against the
// same forward on this GPU alone.
func (t *transformerBench) vsOneGPU(f *forwards, shared []float32) (float64, error) {
	if err := f.m.SetSequenceParallel(nil); err != nil {
		return 0, err
	}
	if _, err := f.run(true); err != nil {
		return 0, err
	}
	rel := numcmp.RelL2(shared, f.out)
	f.out = shared // what --save and --against see is the shared forward's
	return rel, f.m.SetSequenceParallel(t.comm)
}

// profileForward times one more forward's kernels by class into r.
func (t *transformerBench) profileForward(f *forwards, r Result) error {
	t.prof.start()
	wall, err := f.run(false)
	lines, perr := t.prof.stop(wall)
	if err != nil {
		return err
	}
	if perr != nil {
		return perr
	}
	r["profile"] = lines
	r["profile_seconds"] = wall
	return nil
}

// saveOrCompare writes out to --save and reports its relative L2 against
// the output in --against.
func saveOrCompare(r Result, out []float32, o *TransformerOptions) error {
	if o.Save != "" && !o.follower() {
		if err := atomicfile.WriteFile(o.Save, tensor.BytesOf(out), 0o644); err != nil {
			return err
		}
	}
	if o.Against == "" {
		return nil
	}
	raw, err := os.ReadFile(o.Against)
	if err != nil {
		return err
	}
	if len(raw) != 4*len(out) {
		return fmt.Errorf("--against %s: %d bytes, want %d (%d f32 values)", o.Against, len(raw), 4*len(out), len(out))
	}
	want := make([]float32, len(out))
	for i := range want {
		want[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	r["rel_l2_vs_file"] = numcmp.RelL2(out, want)
	return nil
}
