package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

// vae decode refuses latents holding a NaN or an Inf, naming the file,
// and writes nothing (it used to write an all-black video).
func TestVAEDecodeRefusesNonFinite(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.mp4")
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		z := tensor.New(tensor.F32, 1, 16, 1, 2, 2)
		z.Float32s()[9] = bad
		path := filepath.Join(dir, "z.safetensors")
		if err := weights.Save(path, map[string]*tensor.Tensor{"latents": z}, nil); err != nil {
			t.Fatal(err)
		}
		_, err := runCLI(t, context.Background(), "vae", "decode", "--vae", goldenVAE, "--latents", path, "-o", out)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "NaN and") {
			t.Errorf("latents with %v: %v, want an error naming %s and counting NaN/Inf", bad, err, path)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Fatalf("latents with %v: %s written", bad, out)
		}
		if _, serr := os.Stat(video.PNGDir(out)); serr == nil {
			t.Fatalf("latents with %v: %s written", bad, video.PNGDir(out))
		}
	}
}
