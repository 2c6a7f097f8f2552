package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

func init() { benchCommands = append(benchCommands, newBenchGenerate) }

type benchGenFlags struct {
	models, image, prompt, out, device, preserve string
	modes, teacache, caches, models_             string
	coldCache, coldFiles                         bool
	seconds                                      float64
	resolution, steps, window                    int
	seed                                         uint64
	gpus                                         string
	cfg                                          float64
	weightsMode, fp8Compute                      string
	fp8Attention                                 bool
	cacheThreshold, magCacheRetention            float64
	magCacheK                                    int

	// The child's run (hidden flags): one mode, model and cache.
	child    bool
	mode     string
	tcOn     bool
	runCache string
	runModel string
	outFile  string
	dump     string
}

func newBenchGenerate() *cobra.Command {
	f := &benchGenFlags{}
	def := framepack.DefaultRequest()
	cmd := &cobra.Command{
		Use:   "generate --models DIR [--modes nocap,20G,6G] [--cache none,teacache,magcache] [--model framepack,f1]",
		Short: "Time the whole job, from process start to the written video, per memory mode",
		Long: `Run the whole job as a user runs it — a fresh process loads the models, encodes the prompt
and the image, samples every section, decodes and writes the video — once per memory mode, model
variant (--model) and step cache (--cache; --teacache on,off is --cache teacache,none), and print
one JSON line per run. Each run is a child process (this program
again), so nothing is warm from an earlier run; its total_s counts from the child's process
start (/proc/self/stat) to the written file.

Modes: nocap (no --vram-limit: the device's default budget), or a --vram-limit value such as
20G or 6G. The stages are disjoint: load_s (framepack.Load and every model's weights, the
transformer's and VAE decoder's reloads included), text_s, image_s (VAE encode and SigLIP),
sample_s (every section's sampling; sample_s_per_step divides by sections × steps), decode_s
(the decodes run in line, and the waits for those run beside the next sampling), write_s;
other_s is the rest of total_s (process start-up, reading the image, unloading); before_load_s,
pipeline_load_s (framepack.Load, model loads included) and generate_s (Generate's wall time) help place it.
decode_overlapped_sections and decode_overlapped_s are the decodes that ran beside a sampling
and the time of the part that did (on a GPU the soft append; the decode itself runs in line and
counts in decode_s); loop_idle_share is the section loop's share of time without sampling (its
decodes, joins and loads). sample_device_idle_s is how long the device's queue stood empty
during the sampling because the host waited on it (GPU: timed by events on the stream; launch
gaps within queued work are bench transformer --profile's "idle"), sample_device_idle_share
its share of sample_s.
compile_s is the GPU kernel compile time the backend logged, summed over modules, part of the
stage that first needed them; kernels are cached on disk, so only a first run compiles
(--cold-cache gives every run an empty cache). device_peak_gib is the engine allocator's peak during the job,
rss_peak_gib the process's peak resident memory (VmHWM). load_gbps is each model's bytes
placed (on the device and in host memory) over its load time, summed over its loads;
load_models has the same per model with its bytes, seconds (s), number of loads and
overlapped_s, the part of a load that ran beside other stages (the transformer loading while
the encoders run): load_s counts only what the job waited for. --cold-files makes the loads
read the disk and adds disk_seq_gbps, the disk's sequential read to compare them with. latents_nonfinite counts NaN
and ±Inf in the generated latents (0 unless the weights or the engine misbehave).

transformer_calls counts the transformer's calls over every section, transformer_computed those
that ran its blocks, cache_skipped_calls the rest (the step cache reused its residual).
With none among --cache, the runs of each mode and model start with it, and every other cache's
line says how far its video is from the uncached one made with the same model and seed:
vs_none_latents_rel_l2 (‖z − z₀‖/‖z₀‖ over the final latents) and vs_none_psnr_db (the PSNR
of the 8-bit frames, all frames together; vs_none_identical_frames instead when they are equal).`,
		Example: `  framepack bench make-models --out /tmp/fp
  framepack bench generate --models /tmp/fp --modes nocap,20G,6G --teacache on,off
  framepack bench generate --models /tmp/fp --model framepack,f1 --cache none,teacache,magcache`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.child {
				return runBenchGenChild(cmd.Context(), cmd, f)
			}
			return runBenchGenParent(cmd.Context(), cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.models, "models", "", "model folder (required; e.g. one bench make-models wrote)")
	fl.StringVar(&f.image, "image", filepath.Join("testdata", "images", "scene.png"), "start image")
	fl.StringVar(&f.prompt, "prompt", "The girl dances gracefully, with clear movements, full of charm.", "prompt")
	fl.Float64Var(&f.seconds, "seconds", def.Seconds, "video length in seconds")
	fl.IntVar(&f.resolution, "resolution", def.Resolution, "bucket resolution (640: the test image's bucket is 544×704)")
	fl.IntVar(&f.steps, "steps", def.Steps, "sampler steps per section")
	fl.IntVar(&f.window, "window", def.LatentWindowSize, "latent window size")
	fl.Uint64Var(&f.seed, "seed", def.Seed, "seed")
	fl.StringVar(&f.modes, "modes", "nocap", "comma-separated memory modes: nocap, or --vram-limit values such as 20G, 6G")
	fl.StringVar(&f.teacache, "teacache", "on", "comma-separated TeaCache settings: on, off (--cache teacache, none)")
	fl.StringVar(&f.caches, "cache", "", "comma-separated step caches: none, teacache, magcache (default: as --teacache says)")
	fl.StringVar(&f.models_, "model", framepack.ModelFramePack, "comma-separated model variants: framepack, f1 (random weights stand in for either)")
	fl.Float64Var(&f.cacheThreshold, "cache-threshold", 0, "the step caches' threshold (as generate --cache-threshold; 0: each cache's default)")
	fl.IntVar(&f.magCacheK, "magcache-k", def.MagCacheK, "MagCache's K (as generate --magcache-k)")
	fl.Float64Var(&f.magCacheRetention, "magcache-retention", def.MagCacheRetention, "MagCache's retention ratio (as generate --magcache-retention)")
	fl.StringVar(&f.device, "device", framepack.DeviceAuto, "auto, cpu or gpu")
	fl.StringVar(&f.preserve, "preserve", "", "--preserve for every run (default: the engine's)")
	fl.StringVarP(&f.out, "out", "o", "", "folder for the videos (default: a temporary folder, removed after)")
	fl.StringVar(&f.gpus, "gpus", "", gpusUsage)
	fl.Float64Var(&f.cfg, "cfg", def.CFG, "real classifier-free guidance scale (> 1 runs the negative prompt too)")
	fl.StringVar(&f.weightsMode, "weights", "", "transformer block weights: empty for the compute dtype, or fp8 (as generate --weights)")
	fl.StringVar(&f.fp8Compute, "fp8-compute", "auto", "with --weights fp8: auto, on or off (as generate --fp8-compute)")
	fl.BoolVar(&f.fp8Attention, "fp8-attention", false, "the transformer's attention in FP8 where the GPU has an engine for it (as generate --fp8-attention)")
	fl.BoolVar(&f.coldFiles, "cold-files", false, "drop the model's weight files from the page cache before each run (posix_fadvise, no root needed), so that its loads read the disk; the lines then carry disk_seq_gbps, one reader's sequential read of the largest weight file from the disk, the reference for the loads' rates")
	fl.BoolVar(&f.coldCache, "cold-cache", false, "give each run empty cache folders (XDG_CACHE_HOME, and CUDA_CACHE_PATH for the NVIDIA driver's compiled PTX): GPU kernels compiled and conv3d algorithms chosen afresh, as on a machine's first run")
	fl.BoolVar(&f.child, "child", false, "run one job in this process (what the parent runs)")
	fl.StringVar(&f.mode, "mode", "nocap", "the child's memory mode")
	fl.BoolVar(&f.tcOn, "tc", true, "the child's TeaCache (without --run-cache)")
	fl.StringVar(&f.runCache, "run-cache", "", "the child's step cache")
	fl.StringVar(&f.runModel, "run-model", framepack.ModelFramePack, "the child's model variant")
	fl.StringVar(&f.outFile, "video", "", "the child's output video")
	fl.StringVar(&f.dump, "dump", "", "the child writes its final latents and frames to this path + .latents, .frames")
	for _, h := range []string{"child", "mode", "tc", "run-cache", "run-model", "video", "dump"} {
		fl.MarkHidden(h)
	}
	return cmd
}

// benchRun is one (mode, model, cache) run.
type benchRun struct {
	mode, model, cache string
}

// list splits a comma-separated flag value, each value one of allowed.
func list(flag, v string, allowed ...string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(allowed, s) {
			return nil, fmt.Errorf("%s %q: want %s", flag, s, strings.Join(allowed, ", "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s needs at least one value", flag)
	}
	return out, nil
}

func (f *benchGenFlags) runs() ([]benchRun, error) {
	var modes []string
	for _, m := range strings.Split(f.modes, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if m != "nocap" {
			if _, err := memory.ParseSize(m, 1<<40); err != nil {
				return nil, fmt.Errorf("--modes %q: %w", m, err)
			}
		}
		modes = append(modes, m)
	}
	var caches []string
	if f.caches != "" {
		var err error
		if caches, err = list("--cache", f.caches, framepack.Caches...); err != nil {
			return nil, err
		}
	} else {
		for _, s := range strings.Split(f.teacache, ",") {
			switch strings.TrimSpace(s) {
			case "on":
				caches = append(caches, framepack.CacheTeaCache)
			case "off":
				caches = append(caches, framepack.CacheNone)
			case "":
			default:
				return nil, fmt.Errorf("--teacache %q: want on, off or on,off", s)
			}
		}
	}
	models, err := list("--model", f.models_, framepack.ModelFramePack, framepack.ModelF1)
	if err != nil {
		return nil, err
	}
	switch th := f.cacheThreshold; {
	case !(th >= 0 && th <= 1):
		return nil, fmt.Errorf("--cache-threshold %v: want (0, 1], or 0 for each cache's default", th)
	case f.magCacheK < 1 || f.magCacheK > framepack.MaxMagCacheK:
		return nil, fmt.Errorf("--magcache-k %d: want 1–%d", f.magCacheK, framepack.MaxMagCacheK)
	case !(f.magCacheRetention >= 0 && f.magCacheRetention <= 1):
		return nil, fmt.Errorf("--magcache-retention %v: want 0–1", f.magCacheRetention)
	}
	if len(modes) == 0 || len(caches) == 0 {
		return nil, errors.New("--modes and --cache (or --teacache) each need at least one value")
	}
	// The uncached run first: the others are compared with it.
	if i := slices.Index(caches, framepack.CacheNone); i > 0 {
		caches = append([]string{framepack.CacheNone}, slices.Delete(caches, i, i+1)...)
	}
	var out []benchRun
	for _, m := range modes {
		for _, model := range models {
			for _, c := range caches {
				out = append(out, benchRun{m, model, c})
			}
		}
	}
	return out, nil
}

// runBenchGenParent runs each (mode, TeaCache) pair in a child process and
// prints the child's JSON line, or a line with "error" when it failed.
func runBenchGenParent(ctx context.Context, cmd *cobra.Command, f *benchGenFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.models == "" {
		return errors.New("bench generate: --models DIR is required (bench make-models writes one)")
	}
	if st, err := os.Stat(f.models); err != nil || !st.IsDir() {
		return fmt.Errorf("bench generate: --models %s is not a folder", f.models)
	}
	if _, err := os.Stat(f.image); err != nil {
		return fmt.Errorf("bench generate: --image: %w", err)
	}
	runs, err := f.runs()
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench generate: finding this program to run it again: %w", err)
	}
	out := f.out
	if out == "" {
		if out, err = os.MkdirTemp("", "framepack-bench-"); err != nil {
			return fmt.Errorf("bench generate: %w", err)
		}
		defer os.RemoveAll(out)
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	var weightFiles []string
	diskGBps := 0.0
	if f.coldFiles {
		if weightFiles, err = modelWeightFiles(f.models); err != nil {
			return fmt.Errorf("bench generate: --cold-files: %w", err)
		}
		if diskGBps, err = diskSequentialRead(weightFiles); err != nil {
			return fmt.Errorf("bench generate: --cold-files: %w", err)
		}
	}
	failed := 0
	ref := "" // the dump of the uncached run of the current mode and model
	defer func() {
		if ref != "" {
			removeDump(ref)
		}
	}()
	for _, run := range runs {
		name := fmt.Sprintf("bench-%s-%s-%s", run.mode, run.model, run.cache)
		dump := ""
		if run.cache == framepack.CacheNone {
			if ref != "" {
				removeDump(ref)
			}
			ref = ""
		}
		if slices.Contains(runs, benchRun{run.mode, run.model, framepack.CacheNone}) {
			dump = filepath.Join(out, name)
		}
		args := []string{"bench", "generate", "--child", "--mode", run.mode, "--run-cache", run.cache, "--run-model", run.model,
			"--dump", dump, "--video", filepath.Join(out, name+".mp4"),
			"--models", f.models, "--image", f.image, "--prompt", f.prompt,
			"--seconds", strconv.FormatFloat(f.seconds, 'g', -1, 64), "--resolution", strconv.Itoa(f.resolution),
			"--steps", strconv.Itoa(f.steps), "--window", strconv.Itoa(f.window), "--seed", strconv.FormatUint(f.seed, 10),
			"--device", f.device, "--cfg", strconv.FormatFloat(f.cfg, 'g', -1, 64),
			"--weights", f.weightsMode, "--fp8-compute", f.fp8Compute, "--fp8-attention=" + strconv.FormatBool(f.fp8Attention),
			"--cache-threshold", strconv.FormatFloat(f.cacheThreshold, 'g', -1, 64), "--magcache-k", strconv.Itoa(f.magCacheK),
			"--magcache-retention", strconv.FormatFloat(f.magCacheRetention, 'g', -1, 64)}
		if f.gpus != "" {
			args = append(args, "--gpus", f.gpus)
		}
		if f.preserve != "" {
			args = append(args, "--preserve", f.preserve)
		}
		if v, _ := cmd.Flags().GetBool("verbose"); v {
			args = append(args, "-v")
		}
		c := exec.CommandContext(ctx, self, args...)
		cache := ""
		if f.coldCache {
			if cache, err = os.MkdirTemp("", "framepack-bench-cache-"); err != nil {
				return fmt.Errorf("bench generate: %w", err)
			}
			// The NVIDIA driver keeps its own cache of PTX compiled for the
			// device (CUDA_CACHE_PATH, default ~/.nv/ComputeCache).
			c.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, "CUDA_CACHE_PATH="+filepath.Join(cache, "nv"))
		}
		for _, w := range weightFiles {
			if err := weights.EvictFile(w); err != nil {
				return fmt.Errorf("bench generate: --cold-files: %s: %w", w, err)
			}
		}
		var stdout bytes.Buffer
		c.Stdout, c.Stderr = &stdout, cmd.ErrOrStderr()
		runErr := c.Run()
		if cache != "" {
			os.RemoveAll(cache)
		}
		line := lastJSONLine(stdout.Bytes())
		if runErr != nil || line == nil {
			failed++
			why := "the child printed no result"
			if runErr != nil {
				why = runErr.Error()
			}
			if dump != "" {
				removeDump(dump)
			}
			if err := printResult(cmd.OutOrStdout(), benchResult{"bench": "generate", "impl": "framepack", "mode": run.mode,
				"model": run.model, "cache": run.cache, "teacache": run.cache == framepack.CacheTeaCache, "error": why}); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		var r benchResult
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("bench generate: the child's line %s: %w", line, err)
		}
		r["cold_cache"], r["cold_files"] = f.coldCache, f.coldFiles
		if f.coldFiles {
			r["disk_seq_gbps"] = diskGBps
		}
		switch {
		case dump == "":
		case run.cache == framepack.CacheNone:
			ref = dump
		case ref != "":
			rel, psnr, same, err := compareDumps(ref, dump)
			if err != nil {
				return fmt.Errorf("bench generate: comparing with the uncached run: %w", err)
			}
			r["vs_none_latents_rel_l2"] = rel
			if same {
				r["vs_none_identical_frames"] = true // PSNR infinite
			} else {
				r["vs_none_psnr_db"] = psnr
			}
			removeDump(dump)
		default:
			removeDump(dump) // the uncached run failed
		}
		if err := printResult(cmd.OutOrStdout(), r); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("bench generate: %d of %d runs failed", failed, len(runs))
	}
	return nil
}

// lastJSONLine is the last line of out that is a bench generate result.
func lastJSONLine(out []byte) []byte {
	var last []byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		var r struct{ Bench string }
		if json.Unmarshal(l, &r) == nil && r.Bench == "generate" {
			last = l
		}
	}
	return last
}

// compileTimer passes log records on, adding up the seconds of the GPU
// backend's "compiled kernels" lines (the backend reports compile time
// only there).
type compileTimer struct {
	slog.Handler
	mu   *sync.Mutex
	secs *float64
}

func (h compileTimer) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "gpu: compiled kernels") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "seconds" {
				h.mu.Lock()
				switch a.Value.Kind() {
				case slog.KindFloat64:
					*h.secs += a.Value.Float64()
				case slog.KindInt64:
					*h.secs += float64(a.Value.Int64())
				}
				h.mu.Unlock()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func (h compileTimer) WithAttrs(as []slog.Attr) slog.Handler {
	return compileTimer{h.Handler.WithAttrs(as), h.mu, h.secs}
}

func (h compileTimer) WithGroup(name string) slog.Handler {
	return compileTimer{h.Handler.WithGroup(name), h.mu, h.secs}
}

// runBenchGenChild runs one job in this process and prints its JSON line.
func runBenchGenChild(ctx context.Context, cmd *cobra.Command, f *benchGenFlags) error {
	w := cmd.OutOrStdout()
	if ctx == nil {
		ctx = context.Background()
	}
	start, err := processStart()
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	if f.outFile == "" {
		return errors.New("bench generate --child: no --video path")
	}
	var compileMu sync.Mutex
	var compileSecs float64
	log := slog.New(compileTimer{slog.Default().Handler(), &compileMu, &compileSecs})

	img, err := section.LoadImage(f.image)
	if err != nil {
		return err
	}
	if supervised, err := superviseGPUs(ctx, cmd, f.gpus); supervised {
		return err
	}
	opts := framepack.Options{Device: f.device, Preserve: f.preserve, Logger: log, FP8Weights: f.weightsMode == "fp8",
		FP8Attention: f.fp8Attention}
	if opts.FP8Compute, err = framepack.ParseFP8Compute(f.fp8Compute); err != nil {
		return fmt.Errorf("bench generate: --fp8-compute: %w", err)
	}
	if f.weightsMode != "" && f.weightsMode != "fp8" {
		return fmt.Errorf("bench generate: --weights %q: want fp8 or nothing", f.weightsMode)
	}
	if f.mode != "nocap" {
		opts.VRAMLimit = f.mode
	}
	if err := rankOptions(&opts); err != nil {
		return err
	}
	t := time.Now()
	beforeLoad := t.Sub(start)
	p, err := framepack.Load(f.models, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	loadPipeline := time.Since(t)

	req := framepack.DefaultRequest()
	req.RGB = img
	req.Prompt = f.prompt
	req.Seconds, req.Resolution, req.Steps, req.LatentWindowSize, req.Seed = f.seconds, f.resolution, f.steps, f.window, f.seed
	req.TeaCache = f.tcOn
	req.Cache, req.Model = f.runCache, f.runModel
	req.CacheThreshold, req.MagCacheK, req.MagCacheRetention = f.cacheThreshold, f.magCacheK, f.magCacheRetention
	req.CFG = f.cfg
	if err := req.Validate(); err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	res, err := p.Generate(ctx, req)
	if err != nil {
		return err
	}
	if isFollower() { // rank 0 decodes, writes and reports
		return nil
	}
	t = time.Now()
	wrote, err := video.Write(ctx, f.outFile, res.Frames, video.Options{FPS: res.FPS, Log: log})
	if err != nil {
		return err
	}
	end := time.Now()
	write := end.Sub(t)

	if f.dump != "" {
		if err := writeDump(f.dump, res); err != nil {
			return fmt.Errorf("bench generate: %w", err)
		}
	}
	r := benchGenResult(res, f.steps, loadPipeline, write)
	r["mode"], r["teacache"], r["cfg"] = f.mode, req.CacheChoice() == framepack.CacheTeaCache, f.cfg
	r["cache"], r["model"] = req.CacheChoice(), req.Model
	if req.CacheChoice() != framepack.CacheNone {
		r["cache_threshold"] = req.CacheThreshold // 0: the cache's default
	}
	if req.CacheChoice() == framepack.CacheMagCache {
		r["magcache_k"], r["magcache_retention"] = req.MagCacheK, req.MagCacheRetention
	}
	r["weights"], r["fp8_compute"], r["fp8_attention"] = f.weightsMode, p.FP8Compute(), f.fp8Attention
	r["seconds"], r["steps"] = f.seconds, f.steps
	r["total_s"] = end.Sub(start).Seconds()
	stages := 0.0
	for _, k := range []string{"load_s", "text_s", "image_s", "sample_s", "decode_s", "write_s"} {
		stages += r[k].(float64)
	}
	r["other_s"] = r["total_s"].(float64) - stages
	// Where other_s lies: before framepack.Load (process start, the image),
	// Load itself (device, libraries, configs; its model loads are in
	// load_s), and Generate's time outside its stages.
	r["before_load_s"] = beforeLoad.Seconds()
	r["pipeline_load_s"] = loadPipeline.Seconds()
	r["generate_s"] = res.Total.Seconds()
	compileMu.Lock()
	r["compile_s"] = compileSecs
	compileMu.Unlock()
	r["device"] = p.Device()
	r["pid"] = os.Getpid()
	r["budget_cap_gib"] = gib(p.Budget().Cap)
	r["rss_peak_gib"] = gib(peakRSS()) // 0 where /proc/self/status has no VmHWM
	if filepath.Ext(wrote) != ".mp4" {
		r["output"] = "png" // no ffmpeg: PNG frames (video.Write's fallback)
	} else {
		r["output"] = "mp4"
	}
	return printResult(w, r)
}

func gib(b int64) float64 { return float64(b) / (1 << 30) }

// benchGenResult splits a job's times into disjoint stages: the model
// loads are taken out of the stage times that include them (Result.Loads)
// and, with framepack.Load's time, make load_s.
func benchGenResult(res *framepack.Result, steps int, loadPipeline, write time.Duration) benchResult {
	loads := map[string]time.Duration{}
	type partLoads struct {
		bytes            int64
		took, overlapped time.Duration
		n                int
	}
	byPart := map[string]*partLoads{}
	load := loadPipeline
	for _, l := range res.Loads {
		loads[l.Stage] += l.Time
		load += l.Waited()
		b := byPart[l.Part]
		if b == nil {
			b = &partLoads{}
			byPart[l.Part] = b
		}
		b.bytes += l.Bytes
		b.took += l.Time
		b.n++
		if l.Overlapped {
			b.overlapped += l.Time - l.Wait
		}
	}
	gbps := map[string]float64{}
	models := map[string]map[string]any{}
	for part, b := range byPart {
		m := map[string]any{"bytes": b.bytes, "s": b.took.Seconds(), "loads": b.n, "overlapped_s": b.overlapped.Seconds()}
		if b.took > 0 {
			gbps[part] = float64(b.bytes) / 1e9 / b.took.Seconds()
			m["gbps"] = gbps[part]
		}
		models[part] = m
	}
	var sample, sampleIdle, decode, overlappedDecode time.Duration
	var sectionSample []float64
	skipped, overlapped, calls, cacheSkipped := 0, 0, 0, 0
	for _, s := range res.Sections {
		sample += s.Sample
		sampleIdle += s.SampleIdle
		if s.DecodeOverlapped {
			// What ran in line (on a GPU the decode itself) and the wait
			// for the rest add to the wall time; the rest ran beside the
			// next sampling.
			overlapped++
			decode += s.DecodeInline + s.DecodeWait
			overlappedDecode += s.Decode - s.DecodeInline
		} else {
			decode += s.Decode
		}
		sectionSample = append(sectionSample, s.Sample.Seconds())
		skipped += s.TeaCacheSkipped
		calls += s.TransformerCalls
		cacheSkipped += len(s.CacheSkipped)
	}
	text := res.TextEncode - loads[framepack.StageTextEncode]
	image := res.VAEEncode + res.ImageEncode - loads[framepack.StageVAEEncode] - loads[framepack.StageImageEncode]
	decode -= loads[framepack.StageDecode]
	r := benchResult{
		"bench": "generate", "impl": "framepack",
		"width": res.Width, "height": res.Height, "frames": res.T, "sections": len(res.Sections),
		"load_s": load.Seconds(), "text_s": text.Seconds(), "image_s": image.Seconds(),
		"sample_s": sample.Seconds(), "decode_s": decode.Seconds(), "write_s": write.Seconds(),
		"section_sample_s": sectionSample, "teacache_skipped_steps": skipped,
		"transformer_calls": calls, "transformer_computed": calls - cacheSkipped, "cache_skipped_calls": cacheSkipped,
		"device_peak_gib": gib(res.PeakBytes), "load_gbps": gbps, "load_models": models, "gpus": 1,
	}
	if rk, _ := thisRank(); rk != nil {
		r["gpus"] = rk.Size // device_peak_gib and rss_peak_gib are rank 0's
	}
	// Random weights must still compute numbers: a NaN would give a
	// video of black frames and a timing that means nothing.
	nonFinite := 0
	if res.Latents != nil {
		for _, v := range tensor.Float32s(res.Latents) {
			if v != v || v > math.MaxFloat32 || v < -math.MaxFloat32 {
				nonFinite++
			}
		}
	}
	r["latents_nonfinite"] = nonFinite
	// The section loop's share of time with the transformer not sampling
	// (its loads, decodes that did not run beside a sampling, joins).
	r["decode_overlapped_sections"] = overlapped
	r["decode_overlapped_s"] = overlappedDecode.Seconds()
	if loop := res.Total - res.TextEncode - res.VAEEncode - res.ImageEncode - transformerLoad(res); loop > 0 {
		r["loop_idle_share"] = max(0, 1-sample.Seconds()/loop.Seconds())
	}
	if sample > 0 {
		r["sample_device_idle_s"] = sampleIdle.Seconds()
		r["sample_device_idle_share"] = sampleIdle.Seconds() / sample.Seconds()
	}
	if n := len(res.Sections) * steps; n > 0 {
		r["sample_s_per_step"] = sample.Seconds() / float64(n)
	}
	return r
}

// processStart is when this process started: its start time in clock
// ticks after boot (/proc/self/stat, field 22), against the time since
// boot now (/proc/uptime). Linux's user-visible tick is fixed at 100 Hz
// (USER_HZ), so the start is known to 10 ms.
func processStart() (time.Time, error) {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start past the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	fields := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(fields) < 20 {
		return time.Time{}, errors.New("the process start time: /proc/self/stat has too few fields")
	}
	ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22: starttime
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: /proc/self/stat starttime %q: %w", fields[19], err)
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: %w", err)
	}
	f := strings.Fields(string(up))
	if len(f) == 0 {
		return time.Time{}, errors.New("the process start time: /proc/uptime is empty")
	}
	uptime, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("the process start time: /proc/uptime: %w", err)
	}
	age := uptime - float64(ticks)/100
	return now.Add(-time.Duration(age * float64(time.Second))), nil
}

// transformerLoad is the time the job waited for the transformer's loads
// (no stage time includes them; one beside the encoders counts only its
// wait).
func transformerLoad(res *framepack.Result) time.Duration {
	var d time.Duration
	for _, l := range res.Loads {
		if l.Part == framepack.PartTransformer {
			d += l.Waited()
		}
	}
	return d
}

// modelWeightFiles lists the safetensors files of a model folder's parts
// (one level of folders, symbolic links followed).
func modelWeightFiles(dir string) ([]string, error) {
	parts, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range parts {
		sub := filepath.Join(dir, p.Name())
		if st, err := os.Stat(sub); err != nil || !st.IsDir() {
			continue
		}
		files, err := os.ReadDir(sub)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".safetensors") {
				out = append(out, filepath.Join(sub, f.Name()))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no .safetensors files in the folders of %s", dir)
	}
	return out, nil
}

// diskSequentialRead drops the largest of files from the page cache and
// reads it front to back with one reader in 16 MiB reads (as dd bs=16M
// would): the disk's sequential read in GB/s, the reference for cold loads.
func diskSequentialRead(files []string) (float64, error) {
	var big string
	var size int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() > size {
			big, size = f, st.Size()
		}
	}
	if err := weights.EvictFile(big); err != nil {
		return 0, fmt.Errorf("%s: %w", big, err)
	}
	fh, err := os.Open(big)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	buf := make([]byte, 16<<20)
	t := time.Now()
	var n int64
	for {
		k, err := fh.Read(buf)
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", big, err)
		}
	}
	secs := time.Since(t).Seconds()
	return float64(n) / 1e9 / max(secs, 1e-9), weights.EvictFile(big)
}
