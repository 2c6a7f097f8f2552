package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/weights"
)

// CompareOptions are bench compare's: one job run through FramePack's own
// worker and through framepack, for each variant, dtype and step count.
type CompareOptions struct {
	Models       string // the model folder both sides read
	FramePack    string // FramePack's checkout, whose diffusers_helper the worker imports
	Diffusers    string // diffusers' src folder, first on the worker's PYTHONPATH ("": the installed one)
	Python       string // the Python that runs the worker
	Worker       string // FramePack's worker script
	Image        string
	Prompt       string
	Seconds      float64
	Window       int
	Resolution   int
	Seed         uint64
	Variants     string // framepack, f1, comma-separated
	DTypes       string // f32, bf16, comma-separated
	Steps        string // step counts, comma-separated
	WorkerMemory string // high or low
	// Bin is the framepack binary for framepack's side ("": this program).
	Bin string
	// Work holds both sides' outputs ("": a temporary folder, removed
	// unless Keep).
	Work string
	// ReuseReference reads FramePack's records a previous run left in
	// Work instead of running the worker.
	ReuseReference, Keep bool
	// Stderr receives both sides' logs.
	Stderr io.Writer
}

// compareRun is one variant and dtype: FramePack's worker once, framepack
// once, each for every step count.
type compareRun struct {
	variant, dtype string
	steps          []int
}

func (o *CompareOptions) runs() ([]compareRun, error) {
	var steps []int
	for _, s := range strings.Split(o.Steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 100 {
			return nil, fmt.Errorf("--steps %q: want step counts 1-100, comma-separated", o.Steps)
		}
		steps = append(steps, n)
	}
	var out []compareRun
	for _, v := range strings.Split(o.Variants, ",") {
		v = strings.TrimSpace(v)
		if v != "framepack" && v != "f1" {
			return nil, fmt.Errorf("--model %q: want framepack, f1 or both", o.Variants)
		}
		for _, d := range strings.Split(o.DTypes, ",") {
			d = strings.TrimSpace(d)
			if d != "f32" && d != "bf16" {
				return nil, fmt.Errorf("--dtypes %q: want f32, bf16 or both", o.DTypes)
			}
			out = append(out, compareRun{variant: v, dtype: d, steps: steps})
		}
	}
	return out, nil
}

// check refuses options that cannot run, before anything does.
func (o *CompareOptions) check() ([]compareRun, error) {
	runs, err := o.runs()
	if err != nil {
		return nil, usage(err)
	}
	if o.Models == "" {
		return nil, usagef("bench compare: --models DIR is required")
	}
	if o.WorkerMemory != "high" && o.WorkerMemory != "low" {
		return nil, usagef("--worker-memory %q: want high or low", o.WorkerMemory)
	}
	if o.ReuseReference && o.Work == "" {
		return nil, usagef("--reuse-reference reads a previous run's records: give its --work")
	}
	if !o.ReuseReference {
		if o.FramePack == "" {
			return nil, usagef("bench compare: --framepack PATH (FramePack's checkout) is required")
		}
		for _, p := range []string{o.Worker, filepath.Join(o.FramePack, "diffusers_helper")} {
			if _, err := os.Stat(p); err != nil {
				return nil, usagef("bench compare: %v", err)
			}
		}
	}
	for _, p := range []string{o.Models, o.Image} {
		if _, err := os.Stat(p); err != nil {
			return nil, usagef("bench compare: %v", err)
		}
	}
	return runs, nil
}

// workDir is Work, made, or a temporary folder; done removes a temporary
// one unless Keep.
func (o *CompareOptions) workDir() (work string, done func(), err error) {
	if o.Work != "" {
		return o.Work, func() {}, os.MkdirAll(o.Work, 0o755)
	}
	if work, err = os.MkdirTemp("", "framepack-compare-"); err != nil {
		return "", nil, err
	}
	if o.Keep {
		return work, func() {}, nil
	}
	return work, func() { os.RemoveAll(work) }, nil
}

// Compare runs each variant and dtype through FramePack's worker and
// through framepack, and prints one line per section's latents, one for
// the start latent, one for the frames and one for both sides' times.
func Compare(ctx context.Context, w io.Writer, o CompareOptions) error {
	runs, err := o.check()
	if err != nil {
		return err
	}
	bin := o.Bin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("bench compare: finding this program to run it again: %w", err)
		}
	}
	work, done, err := o.workDir()
	if err != nil {
		return err
	}
	defer done()
	for _, r := range runs {
		if err := o.compare(ctx, w, bin, work, r); err != nil {
			return err
		}
	}
	return nil
}

// compare runs one variant and dtype on both sides and prints its lines.
func (o *CompareOptions) compare(ctx context.Context, w io.Writer, bin, work string, r compareRun) error {
	tag := r.variant + "_" + r.dtype
	refDir := filepath.Join(work, "ref_"+tag)
	var refLines []Result
	var err error
	if !o.ReuseReference {
		if refLines, err = o.runWorker(ctx, r, refDir); err != nil {
			return err
		}
	}
	ours, err := o.runOurs(ctx, bin, r, work, tag)
	if err != nil {
		return err
	}
	for i, steps := range r.steps {
		head := Result{"bench": "compare", "model": r.variant, "dtype": r.dtype, "steps": steps}
		rec := filepath.Join(refDir, fmt.Sprintf("steps_%d", steps), "record.safetensors")
		if len(r.steps) == 1 {
			rec = filepath.Join(refDir, "record.safetensors")
		}
		lat := filepath.Join(work, fmt.Sprintf("fp_%s_%d.safetensors", tag, steps))
		frames := filepath.Join(work, fmt.Sprintf("fp_%s_%d", tag, steps))
		lines, err := compareOutputs(head, rec, lat, frames)
		if err != nil {
			lines = []Result{merged(head, Result{"error": err.Error()})}
		}
		t := merged(head, Result{"what": "time"})
		if i < len(refLines) {
			t["reference"] = pick(refLines[i], "total_s", "startup_s", "load_s", "text_s", "image_s", "sample_s", "sample_s_per_step", "decode_s", "device_peak_gib", "device")
		}
		if i < len(ours) {
			t["framepack"] = ours[i]
		}
		for _, l := range append(lines, t) {
			if err := Print(w, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// stderr is where the sides' logs go.
func (o *CompareOptions) stderr() io.Writer {
	if o.Stderr == nil {
		return io.Discard
	}
	return o.Stderr
}

// runWorker runs FramePack's worker for r, its records into dir/steps_N;
// it returns the worker's JSON lines.
func (o *CompareOptions) runWorker(ctx context.Context, r compareRun, dir string) ([]Result, error) {
	dt := "float32"
	if r.dtype == "bf16" {
		dt = "released"
	}
	var steps []string
	for _, s := range r.steps {
		steps = append(steps, strconv.Itoa(s))
	}
	args := []string{o.Worker, "--framepack", o.FramePack, "--models", o.Models, "--image", o.Image, "--prompt", o.Prompt,
		"--seconds", strconv.FormatFloat(o.Seconds, 'g', -1, 64), "--latent-window-size", strconv.Itoa(o.Window),
		"--resolution", strconv.Itoa(o.Resolution), "--seed", strconv.FormatUint(o.Seed, 10), "--teacache", "off",
		"--dtype", dt, "--memory", o.WorkerMemory, "--variant", r.variant, "--seed-vae-sample", "--record", dir,
		"--steps", steps[0]}
	if len(steps) > 1 {
		args = append(args, "--steps-each", strings.Join(steps, ","))
	}
	c := exec.CommandContext(ctx, o.Python, args...)
	c.Env = os.Environ()
	if o.Diffusers != "" {
		c.Env = append(c.Env, "PYTHONPATH="+joinPath(o.Diffusers, os.Getenv("PYTHONPATH")))
	}
	var stdout bytes.Buffer
	c.Stdout, c.Stderr = &stdout, o.stderr()
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("bench compare: FramePack's worker (%s, %s): %w", r.variant, r.dtype, err)
	}
	return Lines(stdout.Bytes(), "bench", "generate"), nil
}

// runOurs runs framepack generate --jobs for r: one job per step count,
// each writing PNG frames into work/fp_TAG_N and its latents beside them.
// It returns each job's timings.
func (o *CompareOptions) runOurs(ctx context.Context, bin string, r compareRun, work, tag string) ([]Result, error) {
	var jobs bytes.Buffer
	for _, s := range r.steps {
		j := map[string]any{"image": o.Image, "prompt": o.Prompt, "seconds": o.Seconds, "window": o.Window, "steps": s,
			"seed": strconv.FormatUint(o.Seed, 10), "resolution": o.Resolution, "teacache": false, "model": r.variant,
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
	args := []string{"generate", "--jobs", jf, "--models", o.Models, "--json", "--quiet"}
	if r.dtype == "f32" {
		args = append(args, "--dtype", "f32")
	}
	c := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	c.Stdout, c.Stderr = &stdout, o.stderr()
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("bench compare: framepack generate (%s, %s): %w", r.variant, r.dtype, err)
	}
	var out []Result
	for _, l := range Lines(stdout.Bytes(), "event", "result") {
		t, _ := l["timings"].(map[string]any)
		out = append(out, Result(t))
	}
	return out, nil
}

// compareOutputs compares framepack's latents file and PNG frames with
// FramePack's record: one line per section's latents, one for the start
// latent, one for the frames.
func compareOutputs(head Result, record, latents, frames string) ([]Result, error) {
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
	var lines []Result
	for k := 1; ; k++ {
		gen, hist := fmt.Sprintf("generated_latents_section_%d", k), fmt.Sprintf("history_latents_section_%d", k)
		if !ref.Has(gen) {
			break
		}
		l := merged(head, Result{"what": "latents", "section": k})
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
			lines = append(lines, merged(head, Result{"what": "start_latent", "rel_l2": sig3(relL2(got, want))}))
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
	got, err := ReadPNGFrames(frames, shape[3], shape[4])
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
	return append(lines, merged(head, Result{"what": "frames", "frames": t, "psnr": psnrSummary(psnr), "frame_psnr": rounded(psnr)})), nil
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

// ReadPNGFrames reads dir's frame_*.png, each h×w, as C·H·W bytes (RGB
// planes), in name order.
func ReadPNGFrames(dir string, h, w int) ([][]uint8, error) {
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

// Lines are the JSON objects among a tool's output lines whose key is
// value.
func Lines(out []byte, key, value string) []Result {
	var lines []Result
	for _, l := range bytes.Split(out, []byte("\n")) {
		var r Result
		if json.Unmarshal(l, &r) == nil && r[key] == value {
			lines = append(lines, r)
		}
	}
	return lines
}

func pick(r Result, keys ...string) Result {
	out := Result{}
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
