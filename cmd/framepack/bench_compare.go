package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/weights"
)

func init() { benchCommands = append(benchCommands, newBenchCompare) }

type benchCompareFlags struct {
	models, framepack, diffusers, python, worker string
	image, prompt                                string
	seconds                                      float64
	window, resolution                           int
	seed                                         uint64
	variants, dtypes, steps                      string
	workerMemory                                 string
	bin, work                                    string
	reuseReference, keep                         bool
}

func newBenchCompare() *cobra.Command {
	f := &benchCompareFlags{}
	cmd := &cobra.Command{
		Use:   "compare --models DIR --framepack PATH [--diffusers PATH]",
		Short: "Run FramePack's own worker and framepack on the same job and compare latents and frames",
		Long: `Run the same job through FramePack's worker (bench/reference/framepack_worker.py, FramePack's
demo loop headless, TeaCache off, its posterior sample seeded as framepack draws it) and through
framepack generate, on one model folder (e.g. one bench make-models wrote), for each variant,
dtype and step count, and print one JSON line per comparison:

  what "latents": each section's generated latents and history latents, relative L2 of
                  framepack's against FramePack's (per history frame too);
  what "frames":  PSNR of every frame of framepack's video against FramePack's (its pixels
                  converted to 8 bits as save_bcthw_as_mp4 does), with mean, min and where;
  what "time":    both sides' stage times.

Each dtype runs as one worker process (--steps-each: the models load once) and one
framepack generate --jobs process, one after the other, so only one holds the GPU.
f32 is FramePack's float32 golden path (TF32 off) against --dtype f32; bf16 is the released
dtypes on both sides (bf16 transformer, f16 VAE and encoders). Few steps keep the random
model's chaos small: at f32 and 1-2 steps the two should agree to about 1e-4 in the latents
and 45 dB or more in every frame.

--bin runs another framepack binary for framepack's side (e.g. a build before a fix), and
--reuse-reference with --work reads FramePack's records a previous run left there instead of
running the worker again: a before/after comparison runs FramePack once.`,
		Example: `  framepack bench make-models --out /tmp/fp
  framepack bench compare --models /tmp/fp --framepack ~/FramePack --diffusers ~/diffusers/src
  framepack bench compare --models /tmp/fp --framepack ~/FramePack --dtypes f32 --steps 1,2 --work /tmp/cmp --keep`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchCompare(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.models, "models", "", "model folder, read by both sides (required)")
	fl.StringVar(&f.framepack, "framepack", "", "FramePack checkout (lllyasviel/FramePack), whose diffusers_helper the worker imports (required unless --reuse-reference)")
	fl.StringVar(&f.diffusers, "diffusers", "", "diffusers' src folder, put first on the worker's PYTHONPATH (default: the installed diffusers)")
	fl.StringVar(&f.python, "python", "python3", "the Python that runs the worker (torch, transformers, safetensors)")
	fl.StringVar(&f.worker, "worker", filepath.Join("bench", "reference", "framepack_worker.py"), "FramePack's worker script")
	fl.StringVar(&f.image, "image", filepath.Join("testdata", "images", "scene.png"), "start image")
	fl.StringVar(&f.prompt, "prompt", "The girl dances gracefully, with clear movements, full of charm.", "prompt")
	fl.Float64Var(&f.seconds, "seconds", 1.1, "video length (1.1: one section of 37 frames at window 9)")
	fl.IntVar(&f.window, "window", 9, "latent window size")
	fl.IntVar(&f.resolution, "resolution", 640, "bucket resolution")
	fl.Uint64Var(&f.seed, "seed", 31337, "seed")
	fl.StringVar(&f.variants, "model", "framepack", "transformer variants, comma-separated: framepack, f1")
	fl.StringVar(&f.dtypes, "dtypes", "f32,bf16", "dtypes, comma-separated: f32 (float32 everywhere, TF32 off) and bf16 (the released dtypes)")
	fl.StringVar(&f.steps, "steps", "1,2,8", "sampler steps, comma-separated")
	fl.StringVar(&f.workerMemory, "worker-memory", "high", "the worker's memory mode: high (every model on the GPU) or low (FramePack's low-VRAM mode)")
	fl.StringVar(&f.bin, "bin", "", "framepack binary for framepack's side (default: this one)")
	fl.StringVar(&f.work, "work", "", "folder for both sides' outputs (default: a temporary folder, removed unless --keep)")
	fl.BoolVar(&f.reuseReference, "reuse-reference", false, "read FramePack's records from --work (a previous run's) instead of running the worker")
	fl.BoolVar(&f.keep, "keep", false, "keep the outputs in --work")
	return cmd
}

// compareRun is one variant and dtype: FramePack's worker once, framepack
// once, each for every step count.
type compareRun struct {
	variant, dtype string
	steps          []int
}

func (f *benchCompareFlags) runs() ([]compareRun, error) {
	var steps []int
	for _, s := range strings.Split(f.steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100 {
			return nil, fmt.Errorf("--steps %q: want step counts 1-100, comma-separated", f.steps)
		}
		steps = append(steps, n)
	}
	var out []compareRun
	for _, v := range strings.Split(f.variants, ",") {
		v = strings.TrimSpace(v)
		if v != "framepack" && v != "f1" {
			return nil, fmt.Errorf("--model %q: want framepack, f1 or both", f.variants)
		}
		for _, d := range strings.Split(f.dtypes, ",") {
			d = strings.TrimSpace(d)
			if d != "f32" && d != "bf16" {
				return nil, fmt.Errorf("--dtypes %q: want f32, bf16 or both", f.dtypes)
			}
			out = append(out, compareRun{variant: v, dtype: d, steps: steps})
		}
	}
	return out, nil
}

func runBenchCompare(ctx context.Context, cmd *cobra.Command, f *benchCompareFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	runs, err := f.runs()
	if err != nil {
		return usage(err)
	}
	if f.models == "" {
		return usagef("bench compare: --models DIR is required")
	}
	if f.workerMemory != "high" && f.workerMemory != "low" {
		return usagef("--worker-memory %q: want high or low", f.workerMemory)
	}
	if f.reuseReference && f.work == "" {
		return usagef("--reuse-reference reads a previous run's records: give its --work")
	}
	if !f.reuseReference {
		if f.framepack == "" {
			return usagef("bench compare: --framepack PATH (FramePack's checkout) is required")
		}
		for _, p := range []string{f.worker, filepath.Join(f.framepack, "diffusers_helper")} {
			if _, err := os.Stat(p); err != nil {
				return usagef("bench compare: %v", err)
			}
		}
	}
	for _, p := range []string{f.models, f.image} {
		if _, err := os.Stat(p); err != nil {
			return usagef("bench compare: %v", err)
		}
	}
	bin := f.bin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench compare: finding this program to run it again: %w", err)
		}
	}
	work := f.work
	if work == "" {
		if work, err = os.MkdirTemp("", "framepack-compare-"); err != nil {
			return err
		}
		if !f.keep {
			defer os.RemoveAll(work)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	for _, r := range runs {
		tag := r.variant + "_" + r.dtype
		refDir := filepath.Join(work, "ref_"+tag)
		var refLines []benchResult
		if !f.reuseReference {
			if refLines, err = f.runWorker(ctx, cmd, r, refDir); err != nil {
				return err
			}
		}
		ours, err := f.runOurs(ctx, cmd, bin, r, work, tag)
		if err != nil {
			return err
		}
		for i, steps := range r.steps {
			head := benchResult{"bench": "compare", "model": r.variant, "dtype": r.dtype, "steps": steps}
			rec := filepath.Join(refDir, fmt.Sprintf("steps_%d", steps), "record.safetensors")
			if len(r.steps) == 1 {
				rec = filepath.Join(refDir, "record.safetensors")
			}
			lat := filepath.Join(work, fmt.Sprintf("fp_%s_%d.safetensors", tag, steps))
			frames := filepath.Join(work, fmt.Sprintf("fp_%s_%d", tag, steps))
			lines, err := compareOutputs(head, rec, lat, frames)
			if err != nil {
				lines = []benchResult{with(head, benchResult{"error": err.Error()})}
			}
			t := with(head, benchResult{"what": "time"})
			if i < len(refLines) {
				t["reference"] = pick(refLines[i], "total_s", "startup_s", "load_s", "text_s", "image_s", "sample_s", "sample_s_per_step", "decode_s", "device_peak_gib", "device")
			}
			if i < len(ours) {
				t["framepack"] = ours[i]
			}
			for _, l := range append(lines, t) {
				if err := printResult(out, l); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// runWorker runs FramePack's worker for r, its records into dir/steps_N;
// it returns the worker's JSON lines.
func (f *benchCompareFlags) runWorker(ctx context.Context, cmd *cobra.Command, r compareRun, dir string) ([]benchResult, error) {
	dt := "float32"
	if r.dtype == "bf16" {
		dt = "released"
	}
	var steps []string
	for _, s := range r.steps {
		steps = append(steps, strconv.Itoa(s))
	}
	args := []string{f.worker, "--framepack", f.framepack, "--models", f.models, "--image", f.image, "--prompt", f.prompt,
		"--seconds", strconv.FormatFloat(f.seconds, 'g', -1, 64), "--latent-window-size", strconv.Itoa(f.window),
		"--resolution", strconv.Itoa(f.resolution), "--seed", strconv.FormatUint(f.seed, 10), "--teacache", "off",
		"--dtype", dt, "--memory", f.workerMemory, "--variant", r.variant, "--seed-vae-sample", "--record", dir,
		"--steps", steps[0]}
	if len(steps) > 1 {
		args = append(args, "--steps-each", strings.Join(steps, ","))
	}
	c := exec.CommandContext(ctx, f.python, args...)
	c.Env = os.Environ()
	if f.diffusers != "" {
		c.Env = append(c.Env, "PYTHONPATH="+joinPath(f.diffusers, os.Getenv("PYTHONPATH")))
	}
	var stdout bytes.Buffer
	c.Stdout, c.Stderr = &stdout, cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("bench compare: FramePack's worker (%s, %s): %w", r.variant, r.dtype, err)
	}
	return jsonLines(stdout.Bytes(), "bench", "generate"), nil
}

// runOurs runs framepack generate --jobs for r: one job per step count,
// each writing PNG frames into work/fp_TAG_N and its latents beside them.
// It returns each job's timings.
func (f *benchCompareFlags) runOurs(ctx context.Context, cmd *cobra.Command, bin string, r compareRun, work, tag string) ([]benchResult, error) {
	var jobs bytes.Buffer
	for _, s := range r.steps {
		j := map[string]any{"image": f.image, "prompt": f.prompt, "seconds": f.seconds, "window": f.window, "steps": s,
			"seed": strconv.FormatUint(f.seed, 10), "resolution": f.resolution, "teacache": false, "model": r.variant,
			"o":             filepath.Join(work, fmt.Sprintf("fp_%s_%d", tag, s)),
			"write-latents": filepath.Join(work, fmt.Sprintf("fp_%s_%d.safetensors", tag, s))}
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		jobs.Write(append(b, '\n'))
	}
	jf := filepath.Join(work, "jobs_"+tag+".jsonl")
	if err := os.WriteFile(jf, jobs.Bytes(), 0o644); err != nil {
		return nil, err
	}
	args := []string{"generate", "--jobs", jf, "--models", f.models, "--json", "--quiet"}
	if r.dtype == "f32" {
		args = append(args, "--dtype", "f32")
	}
	c := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	c.Stdout, c.Stderr = &stdout, cmd.ErrOrStderr()
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("bench compare: framepack generate (%s, %s): %w", r.variant, r.dtype, err)
	}
	var out []benchResult
	for _, l := range jsonLines(stdout.Bytes(), "event", "result") {
		t, _ := l["timings"].(map[string]any)
		out = append(out, benchResult(t))
	}
	return out, nil
}

// compareOutputs compares framepack's latents file and PNG frames with
// FramePack's record: one line per section's latents, one for the start
// latent, one for the frames.
func compareOutputs(head benchResult, record, latents, frames string) ([]benchResult, error) {
	ref, err := weights.OpenFile(record)
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	ours, err := weights.OpenFile(latents)
	if err != nil {
		return nil, err
	}
	defer ours.Close()
	read := func(ck *weights.Checkpoint, name string) ([]float32, []int, error) {
		t, err := ck.Host(name)
		if err != nil {
			return nil, nil, err
		}
		return t.ToFloat32(), t.Shape(), nil
	}
	var lines []benchResult
	for k := 1; ; k++ {
		gen, hist := fmt.Sprintf("generated_latents_section_%d", k), fmt.Sprintf("history_latents_section_%d", k)
		if !ref.Has(gen) {
			break
		}
		l := with(head, benchResult{"what": "latents", "section": k})
		for _, name := range []string{gen, hist} {
			want, ws, err := read(ref, name)
			if err != nil {
				return nil, err
			}
			got, gs, err := read(ours, name)
			if err != nil {
				return nil, err
			}
			key := strings.TrimSuffix(name, fmt.Sprintf("_section_%d", k))
			if !equalInts(ws, gs) {
				l[key] = fmt.Sprintf("shape %v against FramePack's %v", gs, ws)
				continue
			}
			l[key+"_rel_l2"] = sig3(relL2(got, want))
			if name == hist {
				l["history_frame_rel_l2"] = sig3s(frameRelL2(got, want, ws))
			}
		}
		lines = append(lines, l)
	}
	if want, ws, err := read(ref, "start_latent"); err == nil {
		if got, gs, err := read(ours, "start_latent"); err == nil && equalInts(ws, gs) {
			lines = append(lines, with(head, benchResult{"what": "start_latent", "rel_l2": sig3(relL2(got, want))}))
		}
	}
	px, shape, err := read(ref, "pixels")
	if err != nil {
		return nil, err
	}
	if len(shape) != 5 || shape[0] != 1 {
		return nil, fmt.Errorf("%s: pixels %v: want (1, C, T, H, W)", record, shape)
	}
	c, t, hw := shape[1], shape[2], shape[3]*shape[4]
	want := framesU8(px, c, t, hw)
	got, err := readPNGFrames(frames, shape[3], shape[4])
	if err != nil {
		return nil, err
	}
	if len(got) != t {
		return nil, fmt.Errorf("%s: %d frames, FramePack's video has %d", frames, len(got), t)
	}
	psnr := make([]float64, t)
	for i := range psnr {
		psnr[i] = psnrU8(got[i], want[i])
	}
	return append(lines, with(head, benchResult{"what": "frames", "frames": t, "psnr": psnrSummary(psnr), "frame_psnr": rounded(psnr)})), nil
}

// frameRelL2 is relL2 of each frame of (1, C, T, h, w) latents.
func frameRelL2(got, want []float32, shape []int) []float64 {
	c, t, hw := shape[1], shape[2], shape[3]*shape[4]
	out := make([]float64, t)
	for ti := range out {
		var g, w []float32
		for ci := 0; ci < c; ci++ {
			i := (ci*t + ti) * hw
			g = append(g, got[i:i+hw]...)
			w = append(w, want[i:i+hw]...)
		}
		out[ti] = relL2(g, w)
	}
	return out
}

// readPNGFrames reads dir's frame_*.png, each h×w, as C·H·W bytes (RGB
// planes), in name order.
func readPNGFrames(dir string, h, w int) ([][]uint8, error) {
	names, err := filepath.Glob(filepath.Join(dir, "frame_*.png"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no frame_*.png", dir)
	}
	sort.Strings(names)
	out := make([][]uint8, len(names))
	for i, name := range names {
		fh, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
			return nil, fmt.Errorf("%s: %dx%d, FramePack's frames are %dx%d", name, b.Dx(), b.Dy(), w, h)
		}
		out[i] = planes(img, h, w)
	}
	return out, nil
}

// planes is img's RGB as three h×w planes.
func planes(img image.Image, h, w int) []uint8 {
	p := make([]uint8, 3*h*w)
	b := img.Bounds()
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			r, g, bl, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
			i := y*w + x
			p[i], p[h*w+i], p[2*h*w+i] = uint8(r>>8), uint8(g>>8), uint8(bl>>8)
		}
	}
	return p
}

// jsonLines are the JSON objects among out's lines whose key is value.
func jsonLines(out []byte, key, value string) []benchResult {
	var lines []benchResult
	for _, l := range bytes.Split(out, []byte("\n")) {
		var r benchResult
		if json.Unmarshal(l, &r) == nil && r[key] == value {
			lines = append(lines, r)
		}
	}
	return lines
}

func with(a, b benchResult) benchResult {
	out := benchResult{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func pick(r benchResult, keys ...string) benchResult {
	out := benchResult{}
	for _, k := range keys {
		if v, ok := r[k]; ok {
			out[k] = v
		}
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// joinPath puts dir first in a PATH-like list.
func joinPath(dir, list string) string {
	if list == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + list
}
