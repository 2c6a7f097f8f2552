package main

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/tensor"
)

// TestPreviewWriter: every sampler step replaces the PNG with that step's
// preview, through a temporary renamed over it (none left behind); other
// stages write nothing; a failed write is logged once and ends the
// previews.
func TestPreviewWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.png")
	var logs bytes.Buffer
	w := newPreviewWriter(path, slog.New(slog.NewTextHandler(&logs, nil)))
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 1; step <= 3; step++ {
		v := make([]float32, 16*3*4*6)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 3
		}
		pr := framepack.Progress{Stage: framepack.StageSample, Section: 1, Sections: 1, Step: step, Steps: 3,
			Denoised: tensor.FromFloat32(v, 1, 16, 3, 4, 6)}
		w.report(pr)
		want, err := pr.PreviewRGB()
		if err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if b := img.Bounds(); b.Dx() != 18 || b.Dy() != 4 {
			t.Fatalf("step %d: %v, want 18×4 (3 frames of 6×4 side by side)", step, b)
		}
		for y := 0; y < 4; y++ {
			for x := 0; x < 18; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				i := 3 * (y*18 + x)
				if uint8(r>>8) != want.Pix[i] || uint8(g>>8) != want.Pix[i+1] || uint8(b>>8) != want.Pix[i+2] {
					t.Fatalf("step %d: pixel (%d, %d) differs from the step's preview", step, x, y)
				}
			}
		}
	}
	w.report(framepack.Progress{Stage: framepack.StageDecode})
	if w.writes != 3 || w.err != nil {
		t.Errorf("%d writes, error %v; want 3, none", w.writes, w.err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want the preview alone", len(ents))
	}

	// The folder gone: one warning, then nothing more is tried.
	gone := filepath.Join(t.TempDir(), "gone")
	w = newPreviewWriter(filepath.Join(gone, "p.png"), slog.New(slog.NewTextHandler(&logs, nil)))
	pr := framepack.Progress{Stage: framepack.StageSample, Step: 1, Denoised: tensor.FromFloat32(make([]float32, 16*4*6), 1, 16, 1, 4, 6)}
	w.report(pr)
	w.report(pr)
	if w.writes != 0 || w.err == nil || strings.Count(logs.String(), "--preview") != 1 {
		t.Errorf("writes %d, err %v, log:\n%s", w.writes, w.err, logs.String())
	}
}

// TestGeneratePreview runs the tiny model with --preview: the PNG is the
// last step's preview (3 latent frames of 12×4 side by side), and nothing
// else is left in its folder.
func TestGeneratePreview(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	preview := filepath.Join(dir, "live.png")
	out := filepath.Join(t.TempDir(), "frames")
	if _, err := runCLI(t, context.Background(), append([]string{"generate", "--image", stripImage(t), "-o", out, "--preview", preview}, quick...)...); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(preview)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	cfg, err := png.DecodeConfig(io.Reader(fh))
	if err != nil || cfg.Width != 36 || cfg.Height != 4 {
		t.Errorf("preview %d×%d (%v), want 36×4", cfg.Width, cfg.Height, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the preview's folder holds %d entries, want 1", len(ents))
	}
}
