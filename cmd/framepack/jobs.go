package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// loadFlags choose the models, the device and the memory: they apply to
// every job of --jobs and are refused in a job line.
var loadFlags = []string{"models", "device", "dtype", "vram-limit", "preserve", "ram-limit", "vae-tile", "json", "jobs", "lora", "weights", "fp8-compute",
	"transformer", "vae", "text-encoder", "text-encoder-2", "tokenizer", "tokenizer-2", "image-encoder", "feature-extractor"}

// jobSpec is one line of a jobs file, checked.
type jobSpec struct {
	line int
	f    *generateFlags
	err  error
}

// runJobs is generate --jobs: every line's job checked first, the models
// loaded once, then the jobs run in order, each reported on one line; a bad
// line fails only its own job.
func runJobs(ctx context.Context, cmd *cobra.Command, f *generateFlags, ev *events) error {
	log := slog.Default()
	specs, err := checkJobs(cmd, f)
	if err != nil {
		return err
	}
	dir := modelFolder(f)
	tiny := dir == ""
	if supervised, err := superviseGPUs(ctx, cmd, f.gpus); supervised {
		return err
	}
	if tiny {
		tdir, cleanup, err := tinyModel(log, "")
		if err != nil {
			return err
		}
		defer cleanup()
		dir = tdir
	}

	out := cmd.OutOrStdout()
	quiet, _ := cmd.Flags().GetBool("quiet")
	quiet = quiet || isFollower()
	failed, done := 0, 0
	fail := func(js *jobSpec, err error) {
		failed++
		ev.emit("error", map[string]any{"line": js.line, "error": errorText(err)})
		if !f.json {
			fmt.Fprintf(out, "%s line %d: failed: %s\n", f.jobs, js.line, strings.TrimPrefix(errorText(err), fmt.Sprintf("%s line %d: ", f.jobs, js.line)))
		}
	}
	var p *framepack.Pipeline
	var load time.Duration
	for _, js := range specs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped before %s line %d: %w", f.jobs, js.line, err)
		}
		if js.err != nil {
			fail(js, js.err)
			continue
		}
		began := time.Now()
		if p == nil {
			var err error
			if p, err = f.loadPipeline(dir, log); err != nil {
				return err
			}
			defer p.Close()
			load = time.Since(began)
		}
		res, set, err := runJobLine(ctx, cmd, p, js, dir, tiny, began, load, ev)
		if err == nil {
			done++
			load = 0
			if !f.json && !quiet {
				fmt.Fprintf(out, "%s line %d: wrote %s: %d frames (%.2f s), %d×%d, seed %d, in %s, %d model loads\n",
					f.jobs, js.line, js.f.output.path, res.T, float64(res.T)/float64(res.FPS), res.W, res.H, set.Seed,
					time.Since(began).Round(time.Millisecond), len(res.Loads))
			}
			continue
		}
		if errors.Is(err, context.Canceled) {
			return err
		}
		fail(js, fmt.Errorf("%s line %d: %w", f.jobs, js.line, err))
	}
	notice(log, fmt.Sprintf("jobs: %d done, %d failed", done, failed))
	if failed > 0 {
		return fmt.Errorf("%d of %d jobs in %s failed", failed, len(specs), f.jobs)
	}
	return nil
}

// loadPipeline loads the models once for every job (this process's GPU
// and communicator when it is one rank of several).
func (f *generateFlags) loadPipeline(dir string, log *slog.Logger) (*framepack.Pipeline, error) {
	opts := f.loadOptions(log)
	if err := rankOptions(&opts); err != nil {
		return nil, err
	}
	p, err := framepack.Load(dir, opts)
	if err != nil {
		return nil, err
	}
	if !isFollower() {
		notice(log, "device: "+p.Device())
	}
	return p, nil
}

// runJobLine runs one checked line's job on p: its images decoded and
// checked, its settings made, its video written.
func runJobLine(ctx context.Context, cmd *cobra.Command, p *framepack.Pipeline, js *jobSpec, dir string, tiny bool,
	began time.Time, load time.Duration, ev *events) (*framepack.Result, *settings, error) {
	img, err := js.f.loadImages()
	if err == nil {
		err = js.f.validate(img)
	}
	if err != nil {
		return nil, nil, err
	}
	set, err := js.f.settings(dir, tiny)
	if err != nil {
		return nil, nil, err
	}
	ev.emit("start", map[string]any{"line": js.line, "settings": set})
	res, err := generateOne(ctx, cmd, p, js.f, img, set, began, load, ev, map[string]any{"line": js.line})
	return res, set, err
}

// checkJobs reads the jobs file of f and checks the flags that apply to
// every job, then each line's job as a single job's are, but for its
// images only their headers (each job decodes its images when it runs, so
// a long file holds one image at a time), and that no two jobs have one
// output. A line that fails gets its error in its jobSpec.
func checkJobs(cmd *cobra.Command, f *generateFlags) ([]*jobSpec, error) {
	if err := f.checkLoad(); err != nil {
		return nil, usage(err)
	}
	specs, err := readJobs(cmd, f.jobs)
	if err != nil {
		return nil, usage(err)
	}
	dir := modelFolder(f)
	tiny := dir == ""
	if !tiny && framepack.IsHubCache(dir) {
		if err := f.useHubCache(slog.Default(), dir); err != nil {
			return nil, err
		}
	}
	res := f.modelResolution(dir)
	outputs := map[string]int{} // resolved output → its line
	var existing []existingOutput
	for _, js := range specs {
		if js.err != nil {
			continue
		}
		if !js.f.changedResolution {
			js.f.resolution = res
		}
		js.f.loraFiles, js.f.parts = f.loraFiles, f.parts // for the settings file
		if _, js.err = js.f.checkJob(f, f.jobs, false); js.err == nil && tiny {
			js.err = js.f.checkTinyPrompts()
		}
		if js.err == nil && js.f.seedRandom && f.gpus != "" {
			// Each rank reads the file: a seed drawn by each would differ.
			js.err = errors.New("a random seed cannot be shared by the processes of --gpus: give the seed")
		}
		if js.err == nil {
			js.err = outputClash(js, outputs, &existing)
		}
		if js.err != nil {
			js.err = fmt.Errorf("%s line %d: %s", f.jobs, js.line, errorText(js.err))
		}
	}
	return specs, nil
}

// existingOutput is a checked job's output that exists already.
type existingOutput struct {
	st   os.FileInfo
	line int
	path string
}

// outputClash refuses a job whose output is an earlier line's: the later
// job would replace the earlier one's video. Outputs are the same when
// their resolved paths are, or, when they exist, their files.
func outputClash(js *jobSpec, outputs map[string]int, existing *[]existingOutput) error {
	out := js.f.output.path
	key := resolvePath(out)
	if line, ok := outputs[key]; ok {
		return usagef("-o %s is line %d's output too: each job needs its own", out, line)
	}
	if st, err := os.Stat(out); err == nil {
		for _, o := range *existing {
			if os.SameFile(st, o.st) {
				return usagef("-o %s is line %d's output (%s) too: each job needs its own", out, o.line, o.path)
			}
		}
		*existing = append(*existing, existingOutput{st, js.line, out})
	}
	outputs[key] = js.line
	return nil
}

// readJobs reads a jobs file: one JSON object a line (blank lines and
// lines starting with # skipped), each a job's flags on top of the command
// line's. A line that cannot be a job gets its error in its jobSpec; an
// unreadable or empty file is an error.
func readJobs(cmd *cobra.Command, path string) ([]*jobSpec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--jobs: %w", unwrapPath(err))
	}
	var specs []*jobSpec
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		js := &jobSpec{line: n}
		js.f, js.err = jobFlags(cmd, line)
		if js.err != nil {
			js.err = fmt.Errorf("%s line %d: %w", path, n, js.err)
		}
		specs = append(specs, js)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--jobs %s: %w", path, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("--jobs %s: no jobs in the file", path)
	}
	return specs, nil
}

// jobFlags are one job line's flags: the command line's flags (but --jobs,
// and --lora, whose files runJobs gives each job), then the line's keys (long flag names, or a one-letter shorthand such as
// "o").
func jobFlags(cmd *cobra.Command, line string) (*generateFlags, error) {
	var kv map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&kv); err != nil {
		return nil, fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value on the line")
	}
	jc, jf := newGenerateCmd()
	fs := jc.Flags()
	var err error
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		// The load flags too, so that the job's settings file records them.
		if err == nil && fl.Name != "jobs" && fl.Name != "lora" && fs.Lookup(fl.Name) != nil {
			err = fs.Set(fl.Name, fl.Value.String())
		}
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fl := fs.Lookup(k)
		if fl == nil && len(k) == 1 {
			fl = fs.ShorthandLookup(k)
		}
		if fl == nil {
			return nil, fmt.Errorf("unknown key %q (keys are generate's long flag names)", k)
		}
		if slices.Contains(loadFlags, fl.Name) {
			return nil, fmt.Errorf("%q applies to every job: give it on the command line", k)
		}
		v, err := jsonScalar(kv[k])
		if err != nil {
			return nil, fmt.Errorf("%q: %v", k, err)
		}
		if err := fs.Set(fl.Name, v); err != nil {
			return nil, fmt.Errorf("%q: %v", k, err)
		}
	}
	jf.changedResolution = fs.Changed("resolution")
	return jf, nil
}

// jsonScalar is a JSON string, number or boolean as a flag value.
func jsonScalar(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", fmt.Errorf("want a string, a number or a boolean, have %s", raw)
}
