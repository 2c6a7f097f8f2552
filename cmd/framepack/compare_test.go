package main

import (
	"context"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/bench"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/weights"
)

// latentsByFrame is (1, 2, T, 1, 2) latents whose frame t holds t.
func latentsByFrame(T int) *tensor.Tensor {
	x := tensor.New(tensor.F32, 1, 2, T, 1, 2)
	v := x.Float32s()
	for c := 0; c < 2; c++ {
		for t := 0; t < T; t++ {
			v[(c*T+t)*2], v[(c*T+t)*2+1] = float32(t), float32(t)
		}
	}
	return x
}

// framesOf is the frame numbers a (1, C, n, 1, 2) tensor holds.
func framesOf(x *tensor.Tensor) []int {
	v := x.Float32s()
	var out []int
	for t := 0; t < x.Dim(2); t++ {
		out = append(out, int(v[t*2]))
	}
	return out
}

// TestSectionLatents checks the per-section names against what FramePack's
// worker records: backward sections go before the history (the last one
// with the start latent first), F1's after it.
func TestSectionLatents(t *testing.T) {
	// FramePack, 3 sections of window 2: in time order start, s3 (2), s2, s1.
	res := &framepack.Result{Latents: latentsByFrame(7),
		Sections: []framepack.SectionStats{{LatentFrames: 2}, {LatentFrames: 2}, {LatentFrames: 3}}}
	got, err := sectionLatents(res, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"generated_latents_section_1": "[5 6]", "history_latents_section_1": "[5 6]",
		"generated_latents_section_2": "[3 4]", "history_latents_section_2": "[3 4 5 6]",
		"generated_latents_section_3": "[0 1 2]", "history_latents_section_3": "[0 1 2 3 4 5 6]",
		"latents": "[0 1 2 3 4 5 6]", "start_latent": "[0]",
	}
	check := func(got map[string]*tensor.Tensor, want map[string]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%d tensors, want %d", len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok {
				t.Errorf("no %s", k)
			} else if s := fmt.Sprint(framesOf(g)); s != w {
				t.Errorf("%s holds frames %s, want %s", k, s, w)
			}
		}
	}
	check(got, want)

	// F1, 2 sections of window 3: start, s1, s2, the history from the start.
	res = &framepack.Result{Latents: latentsByFrame(7), Sections: []framepack.SectionStats{{LatentFrames: 3}, {LatentFrames: 3}}}
	if got, err = sectionLatents(res, true); err != nil {
		t.Fatal(err)
	}
	check(got, map[string]string{
		"generated_latents_section_1": "[1 2 3]", "history_latents_section_1": "[0 1 2 3]",
		"generated_latents_section_2": "[4 5 6]", "history_latents_section_2": "[0 1 2 3 4 5 6]",
		"latents": "[0 1 2 3 4 5 6]", "start_latent": "[0]",
	})

	res.Sections = append(res.Sections, framepack.SectionStats{LatentFrames: 3})
	if _, err := sectionLatents(res, true); err == nil {
		t.Error("sections longer than the latents were accepted")
	}
}

// TestWriteLatents runs the tiny model with --write-latents and checks the
// file's names, and that bad paths are refused before any work.
func TestWriteLatents(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	lat := filepath.Join(dir, "lat.safetensors")
	args := append([]string{"generate", "--image", stripImage(t), "-o", filepath.Join(dir, "clip"), "--write-latents", lat, "--quiet"}, quick...)
	if _, err := runCLI(t, context.Background(), args...); err != nil {
		t.Fatal(err)
	}
	ck, err := weights.OpenFile(lat)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, name := range []string{"latents", "start_latent", "generated_latents_section_1", "history_latents_section_1"} {
		if !ck.Has(name) {
			t.Errorf("%s has no %s: %v", lat, name, ck.Names())
		}
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "lat.bin"), "want a .safetensors file"},
		{filepath.Join(dir, "missing", "lat.safetensors"), "does not exist"},
		{dir, "want a .safetensors file"},
	} {
		args := append([]string{"generate", "--image", sceneImage, "-o", filepath.Join(dir, "clip2"), "--write-latents", c.path, "--quiet"}, quick...)
		_, err := runCLI(t, context.Background(), args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--write-latents %s: %v, want %q", c.path, err, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "clip2")); err == nil {
			t.Errorf("--write-latents %s: the video was written", c.path)
		}
	}
}

// TestBenchCompareReuse runs bench compare on the tiny model against a
// record made from framepack's own run (--reuse-reference): the latents
// agree exactly and every frame is equal.
func TestBenchCompareReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tiny model twice")
	}
	bin := cliBinary(t)
	models, temporary, err := tinymodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	if temporary {
		defer os.RemoveAll(models)
	}
	work := t.TempDir()
	img := stripImage(t)
	job := []string{"--image", img, "--resolution", "64", "--seconds", "0.2", "--window", "3", "--steps", "1", "--seed", "31337",
		"--teacache=false", "--dtype", "f32", "--models", models, "--prompt", "The girl dances gracefully, with clear movements, full of charm."}
	own := filepath.Join(work, "own")
	if r := runBinary(t, work, append([]string{"generate", "-o", own, "--write-latents", own + ".safetensors", "--quiet"}, job...)...); r.code != 0 {
		t.Fatalf("generate: %d: %s", r.code, r.stderr)
	}
	// FramePack's record, as the worker writes it: the latents under the
	// same names, the pixels (1, 3, T, H, W) that convert back to the frames.
	ck, err := weights.OpenFile(own + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string]*tensor.Tensor{}
	for _, name := range ck.Names() {
		if rec[name], err = ck.Host(name); err != nil {
			t.Fatal(err)
		}
	}
	frames, err := filepath.Glob(filepath.Join(own, "frame_*.png"))
	if err != nil || len(frames) == 0 {
		t.Fatal(frames, err)
	}
	fh, err := os.Open(frames[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	H, W := cfg.Height, cfg.Width
	first, err := bench.ReadPNGFrames(own, H, W)
	if err != nil {
		t.Fatal(err)
	}
	T, hw := len(first), H*W
	px := tensor.New(tensor.F32, 1, 3, T, H, W)
	pv := px.Float32s()
	for ti, f := range first {
		for c := 0; c < 3; c++ {
			for i := 0; i < hw; i++ {
				pv[(c*T+ti)*hw+i] = (float32(f[c*hw+i]) + 0.5 - 127.5) / 127.5
			}
		}
	}
	rec["pixels"] = px
	refDir := filepath.Join(work, "ref_framepack_f32")
	os.MkdirAll(refDir, 0o755)
	if err := weights.Save(filepath.Join(refDir, "record.safetensors"), rec, nil); err != nil {
		t.Fatal(err)
	}
	ck.Close()

	out, err := runCLI(t, context.Background(), "bench", "compare", "--models", models, "--reuse-reference", "--work", work,
		"--bin", bin, "--image", img, "--resolution", "64", "--seconds", "0.2", "--window", "3", "--dtypes", "f32", "--steps", "1")
	if err != nil {
		t.Fatal(err)
	}
	var sawLatents, sawFrames, sawTime bool
	for _, l := range bench.Lines([]byte(out), "bench", "compare") {
		switch l["what"] {
		case "latents":
			sawLatents = true
			if l["generated_latents_rel_l2"] != 0.0 || l["history_latents_rel_l2"] != 0.0 {
				t.Errorf("latents differ: %v", l)
			}
		case "frames":
			sawFrames = true
			if s := l["psnr"].(map[string]any); s["min"] != 99.0 {
				t.Errorf("frames differ: %v", l)
			}
		case "time":
			sawTime = true
			if fp, _ := l["framepack"].(map[string]any); fp["sampling"] == nil {
				t.Errorf("no framepack timings: %v", l)
			}
		}
	}
	if !sawLatents || !sawFrames || !sawTime {
		t.Errorf("missing lines in:\n%s", out)
	}
}
