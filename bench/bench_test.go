package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestPrintLines: a line Print writes is one Lines reads back, and the
// lines of other tools (or no JSON) are left out.
func TestPrintLines(t *testing.T) {
	var out bytes.Buffer
	for _, r := range []Result{{"bench": "compare", "n": 1}, {"bench": "generate"}, {"bench": "compare", "n": 2}} {
		if err := Print(&out, r); err != nil {
			t.Fatal(err)
		}
	}
	out.WriteString("a log line\n")
	got := Lines(out.Bytes(), "bench", "compare")
	if len(got) != 2 || got[0]["n"] != 1.0 || got[1]["n"] != 2.0 {
		t.Errorf("lines %v", got)
	}
	if m := merged(Result{"a": 1, "b": 1}, Result{"b": 2}); m["a"] != 1 || m["b"] != 2 {
		t.Errorf("merged %v", m)
	}
}

// TestOptionsRefused: options that cannot run are refused before any
// device opens, naming the flag; the ones the command checks for usage
// are UsageErrors.
func TestOptionsRefused(t *testing.T) {
	tr := func(edit func(*TransformerOptions)) error {
		o := TransformerOptions{Modes: "resident", DType: "bf16", FP8Compute: "auto", Iters: 1, Layers: -1, SingleLayers: -1, LatentH: 68, LatentW: 88}
		edit(&o)
		_, err := o.plan()
		return err
	}
	for want, err := range map[string]error{
		"":                     tr(func(*TransformerOptions) {}),
		"--dtype":              tr(func(o *TransformerOptions) { o.DType = "int8" }),
		`--mode "fast"`:        tr(func(o *TransformerOptions) { o.Modes = "fast" }),
		`--weights "int4"`:     tr(func(o *TransformerOptions) { o.Weights = "int4" }),
		"--fp8-compute":        tr(func(o *TransformerOptions) { o.FP8Compute = "maybe" }),
		"--iters must be":      tr(func(o *TransformerOptions) { o.Iters = 0 }),
		"--jobs and --clients": Serve(context.Background(), nil, ServeOptions{}),
		"--models DIR":         Compare(context.Background(), nil, CompareOptions{Steps: "1", Variants: "framepack", DTypes: "f32"}),
	} {
		if (want == "") != (err == nil) || want != "" && !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one with %q", err, want)
		}
	}
	var ue *UsageError
	if err := Serve(context.Background(), nil, ServeOptions{}); !errors.As(err, &ue) {
		t.Errorf("bench serve without jobs: %v, want a UsageError", err)
	}
}

// TestVAEPlan: each class's default latent, the tiling and the dtype read
// as the command writes them.
func TestVAEPlan(t *testing.T) {
	for class, want := range map[string][]int{"hunyuan": {1, 16, 18, 68, 88}, "wan": {1, 16, 21, 60, 104}} {
		o := VAEOptions{Class: class, DType: "f16", Tiling: "auto", Iters: 1}
		j, err := o.plan()
		if err != nil || !slices.Equal(j.shape, want) || !j.auto {
			t.Errorf("%s: %v, auto %v, %v; want %v", class, j.shape, j.auto, err, want)
		}
	}
	for want, o := range map[string]VAEOptions{
		`--vae-class "sd"`: {Class: "sd", DType: "f16", Tiling: "none", Iters: 1},
		`--tiling "tiled"`: {Class: "hunyuan", DType: "f16", Tiling: "tiled", Iters: 1},
		"--latent":         {Class: "hunyuan", Latent: "1x16x2", DType: "f16", Tiling: "none", Iters: 1},
		"positive sizes":   {Class: "hunyuan", Latent: "1x16x0x8x8", DType: "f16", Tiling: "none", Iters: 1},
		"--iters 0":        {Class: "hunyuan", DType: "f16", Tiling: "none"},
		"--reference":      {Class: "hunyuan", DType: "f16", Tiling: "none", Iters: 1, Reference: "/nonexistent.safetensors"},
	} {
		if _, err := o.plan(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error with %q", o, err, want)
		}
	}
}

// TestServedJobLine: a served job's line splits its time from submission
// into the wait in the queue and the run, from the job's own times.
func TestServedJobLine(t *testing.T) {
	var j servedJob
	if err := json.Unmarshal([]byte(`{"id":"a","status":"done","created":"2026-01-01T00:00:00Z",
		"started":"2026-01-01T00:00:10Z","finished":"2026-01-01T00:01:00.5Z","attempts":1,"sections":4,
		"result":{"frames":145,"video_bytes":9,"generate_seconds":50.5,"sample_seconds":42.25,"decode_seconds":5.5}}`), &j); err != nil {
		t.Fatal(err)
	}
	l := j.line()
	for k, want := range map[string]any{"submit_to_end_s": 60.5, "queued_s": 10.0, "run_s": 50.5, "sample_s": 42.25, "decode_s": 5.5, "frames": 145} {
		if l[k] != want {
			t.Errorf("%s = %v, want %v", k, l[k], want)
		}
	}
	if l := (servedJob{ID: "b", Status: "queued"}).line(); l["run_s"] != nil || l["submit_to_end_s"] != nil {
		t.Errorf("an unfinished job's line has times: %v", l)
	}
}
