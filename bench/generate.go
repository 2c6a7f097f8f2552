package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/weights"
)

// GenerateOptions are bench generate's: the job, and the memory modes,
// model variants and step caches to run it with, each in a fresh process.
type GenerateOptions struct {
	Models, Image, Prompt string
	Seconds               float64
	Resolution            int
	Steps, Window         int
	Seed                  uint64
	CFG                   float64
	Device                string
	Preserve              memory.Size // --preserve for every run (unset: the engine's)
	// Modes are memory modes, comma-separated: nocap (the device's default
	// budget) or --vram-limit values.
	Modes string
	// Caches are step caches, comma-separated (none, teacache, magcache);
	// "": as TeaCache says (on, off, comma-separated).
	Caches, TeaCache string
	// Variants are model variants, comma-separated: framepack, f1.
	Variants                          string
	CacheThreshold, MagCacheRetention float64
	MagCacheK                         int
	Weights, FP8Compute               string
	FP8Attention                      bool
	GPUs                              string // each run's --gpus
	// Out is the folder of the videos ("": a temporary folder, removed).
	Out string
	// ColdFiles drops the weight files from the page cache before each run;
	// ColdCache gives each run empty cache folders.
	ColdFiles, ColdCache bool
	// Verbose gives the runs -v.
	Verbose bool
	// Stderr receives the runs' logs.
	Stderr io.Writer
}

// run is one (mode, model, cache) run.
type run struct {
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

// modes are the memory modes, each nocap or a size.
func (o *GenerateOptions) modes() ([]string, error) {
	var modes []string
	for _, m := range strings.Split(o.Modes, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if m != "nocap" {
			if _, err := memory.ParseSize(m); err != nil {
				return nil, fmt.Errorf("--modes %q: %w", m, err)
			}
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// caches are the step caches, the uncached run first (the others are
// compared with it).
func (o *GenerateOptions) caches() ([]string, error) {
	var caches []string
	if o.Caches != "" {
		var err error
		if caches, err = list("--cache", o.Caches, framepack.Caches...); err != nil {
			return nil, err
		}
	} else {
		for _, s := range strings.Split(o.TeaCache, ",") {
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
	if i := slices.Index(caches, framepack.CacheNone); i > 0 {
		caches = append([]string{framepack.CacheNone}, slices.Delete(caches, i, i+1)...)
	}
	return caches, nil
}

// runs are every mode × model × cache, the uncached run of each mode and
// model first.
func (o *GenerateOptions) runs() ([]run, error) {
	modes, err := o.modes()
	if err != nil {
		return nil, err
	}
	caches, err := o.caches()
	if err != nil {
		return nil, err
	}
	models, err := list("--model", o.Variants, framepack.ModelFramePack, framepack.ModelF1)
	if err != nil {
		return nil, err
	}
	switch th := o.CacheThreshold; {
	case !(th >= 0 && th <= 1):
		return nil, fmt.Errorf("--cache-threshold %v: want (0, 1], or 0 for each cache's default", th)
	case o.MagCacheK < 1 || o.MagCacheK > framepack.MaxMagCacheK:
		return nil, fmt.Errorf("--magcache-k %d: want 1–%d", o.MagCacheK, framepack.MaxMagCacheK)
	case !(o.MagCacheRetention >= 0 && o.MagCacheRetention <= 1):
		return nil, fmt.Errorf("--magcache-retention %v: want 0–1", o.MagCacheRetention)
	}
	if len(modes) == 0 || len(caches) == 0 {
		return nil, errors.New("--modes and --cache (or --teacache) each need at least one value")
	}
	var out []run
	for _, m := range modes {
		for _, model := range models {
			for _, c := range caches {
				out = append(out, run{m, model, c})
			}
		}
	}
	return out, nil
}

// check refuses options that cannot run, before any run.
func (o *GenerateOptions) check() ([]run, error) {
	if o.Models == "" {
		return nil, errors.New("bench generate: --models DIR is required (bench make-models writes one)")
	}
	if st, err := os.Stat(o.Models); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("bench generate: --models %s is not a folder", o.Models)
	}
	if _, err := os.Stat(o.Image); err != nil {
		return nil, fmt.Errorf("bench generate: --image: %w", err)
	}
	runs, err := o.runs()
	if err != nil {
		return nil, fmt.Errorf("bench generate: %w", err)
	}
	return runs, nil
}

// Generate runs the job once per mode, model and cache, each run a child
// process (this program again, `bench generate --child`: GenerateChild),
// and prints the child's line, or a line with "error" when it failed. The
// runs with a step cache are compared with the uncached run of their mode
// and model.
func Generate(ctx context.Context, w io.Writer, o GenerateOptions) error {
	runs, err := o.check()
	if err != nil {
		return err
	}
	p := &parent{o: &o, w: w}
	if p.self, err = os.Executable(); err != nil {
		return fmt.Errorf("bench generate: finding this program to run it again: %w", err)
	}
	done, err := p.prepare()
	if err != nil {
		return fmt.Errorf("bench generate: %w", err)
	}
	defer done()
	failed := 0
	for _, r := range runs {
		ok, err := p.run(ctx, r, slices.Contains(runs, run{r.mode, r.model, framepack.CacheNone}))
		if err != nil {
			return err
		}
		if !ok {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("bench generate: %d of %d runs failed", failed, len(runs))
	}
	return nil
}

// parent is bench generate's own process: it runs the children.
type parent struct {
	o           *GenerateOptions
	w           io.Writer
	self        string   // this program
	out         string   // the videos' folder
	weightFiles []string // with ColdFiles, evicted before each run
	diskGBps    float64
	ref         string // the dump of the uncached run of the current mode and model
}

// prepare makes the videos' folder and, with ColdFiles, measures the
// disk; done removes what prepare made and the last dump.
func (p *parent) prepare() (done func(), err error) {
	rm := func() {}
	if p.out = p.o.Out; p.out == "" {
		if p.out, err = os.MkdirTemp("", "framepack-bench-"); err != nil {
			return nil, err
		}
		rm = func() { os.RemoveAll(p.out) }
	} else if err := os.MkdirAll(p.out, 0o755); err != nil {
		return nil, err
	}
	done = func() {
		if p.ref != "" {
			removeDump(p.ref)
		}
		rm()
	}
	if p.o.ColdFiles {
		if p.weightFiles, err = modelWeightFiles(p.o.Models); err == nil {
			p.diskGBps, err = diskSequentialRead(p.weightFiles)
		}
		if err != nil {
			done()
			return nil, fmt.Errorf("--cold-files: %w", err)
		}
	}
	return done, nil
}

// childArgs is the command line of r's child; dump is where it writes its
// latents and frames ("" none).
func (p *parent) childArgs(r run, dump, video string) []string {
	o := p.o
	args := []string{"bench", "generate", "--child", "--mode", r.mode, "--run-cache", r.cache, "--run-model", r.model,
		"--dump", dump, "--video", video,
		"--models", o.Models, "--image", o.Image, "--prompt", o.Prompt,
		"--seconds", strconv.FormatFloat(o.Seconds, 'g', -1, 64), "--resolution", strconv.Itoa(o.Resolution),
		"--steps", strconv.Itoa(o.Steps), "--window", strconv.Itoa(o.Window), "--seed", strconv.FormatUint(o.Seed, 10),
		"--device", o.Device, "--cfg", strconv.FormatFloat(o.CFG, 'g', -1, 64),
		"--weights", o.Weights, "--fp8-compute", o.FP8Compute, "--fp8-attention=" + strconv.FormatBool(o.FP8Attention),
		"--cache-threshold", strconv.FormatFloat(o.CacheThreshold, 'g', -1, 64), "--magcache-k", strconv.Itoa(o.MagCacheK),
		"--magcache-retention", strconv.FormatFloat(o.MagCacheRetention, 'g', -1, 64)}
	if o.GPUs != "" {
		args = append(args, "--gpus", o.GPUs)
	}
	if o.Preserve.IsSet() {
		args = append(args, "--preserve", o.Preserve.String())
	}
	if o.Verbose {
		args = append(args, "-v")
	}
	return args
}

// run runs r in a child and prints its line; ok is false when the run
// failed (its line says why). compared says the uncached run of r's mode
// and model is among the runs: their dumps are compared.
func (p *parent) run(ctx context.Context, r run, compared bool) (ok bool, err error) {
	name := fmt.Sprintf("bench-%s-%s-%s", r.mode, r.model, r.cache)
	dump := ""
	if r.cache == framepack.CacheNone {
		if p.ref != "" {
			removeDump(p.ref)
		}
		p.ref = ""
	}
	if compared {
		dump = filepath.Join(p.out, name)
	}
	line, runErr, err := p.child(ctx, p.childArgs(r, dump, filepath.Join(p.out, name+".mp4")))
	if err != nil {
		return false, err
	}
	if runErr != nil || line == nil {
		why := "the child printed no result"
		if runErr != nil {
			why = runErr.Error()
		}
		if dump != "" {
			removeDump(dump)
		}
		if err := Print(p.w, Result{"bench": "generate", "impl": "framepack", "mode": r.mode,
			"model": r.model, "cache": r.cache, "teacache": r.cache == framepack.CacheTeaCache, "error": why}); err != nil {
			return false, err
		}
		return false, ctx.Err()
	}
	var res Result
	if err := json.Unmarshal(line, &res); err != nil {
		return false, fmt.Errorf("bench generate: the child's line %s: %w", line, err)
	}
	res["cold_cache"], res["cold_files"] = p.o.ColdCache, p.o.ColdFiles
	if p.o.ColdFiles {
		res["disk_seq_gbps"] = p.diskGBps
	}
	if err := p.compare(res, r, dump); err != nil {
		return false, err
	}
	return true, Print(p.w, res)
}

// child runs one child with args and returns its result line and how it
// ended (runErr); err is a failure to start it.
func (p *parent) child(ctx context.Context, args []string) (line []byte, runErr, err error) {
	c := exec.CommandContext(ctx, p.self, args...)
	if p.o.ColdCache {
		cache, err := os.MkdirTemp("", "framepack-bench-cache-")
		if err != nil {
			return nil, nil, fmt.Errorf("bench generate: %w", err)
		}
		defer os.RemoveAll(cache)
		// The NVIDIA driver keeps its own cache of PTX compiled for the
		// device (CUDA_CACHE_PATH, default ~/.nv/ComputeCache).
		c.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache, "CUDA_CACHE_PATH="+filepath.Join(cache, "nv"))
	}
	for _, w := range p.weightFiles {
		if err := weights.EvictFile(w); err != nil {
			return nil, nil, fmt.Errorf("bench generate: --cold-files: %s: %w", w, err)
		}
	}
	var stdout bytes.Buffer
	c.Stdout, c.Stderr = &stdout, p.o.Stderr
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	runErr = c.Run()
	return lastResultLine(stdout.Bytes()), runErr, nil
}

// compare puts into res how far r's video is from the uncached run of its
// mode and model, whose dump is kept until the next uncached run.
func (p *parent) compare(res Result, r run, dump string) error {
	switch {
	case dump == "":
	case r.cache == framepack.CacheNone:
		p.ref = dump
	case p.ref != "":
		rel, psnr, same, err := compareDumps(p.ref, dump)
		if err != nil {
			return fmt.Errorf("bench generate: comparing with the uncached run: %w", err)
		}
		res["vs_none_latents_rel_l2"] = rel
		if same {
			res["vs_none_identical_frames"] = true // PSNR infinite
		} else {
			res["vs_none_psnr_db"] = psnr
		}
		removeDump(dump)
	default:
		removeDump(dump) // the uncached run failed
	}
	return nil
}

// lastResultLine is the last line of out that is a bench generate result.
func lastResultLine(out []byte) []byte {
	var last []byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		var r struct{ Bench string }
		if json.Unmarshal(l, &r) == nil && r.Bench == "generate" {
			last = l
		}
	}
	return last
}
