package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

const goldenVAE = "../../testdata/golden/models/vae"

// wroteFrames counts the frames of what video.Write made at path: the
// MP4's frames through ffprobe when ffmpeg was there, else the PNGs.
func wroteFrames(t *testing.T, path string) int {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		n := probeFrames(t, path)
		if n < 0 {
			t.Skipf("%s written, but no ffprobe to count its frames", path)
		}
		return n
	}
	ents, err := os.ReadDir(video.PNGDir(path))
	if err != nil {
		t.Fatalf("neither %s nor its PNG folder: %v", path, err)
	}
	return len(ents)
}

// TestVAERoundTrip encodes an image, decodes its latents and, to check
// the frame count of a longer decode, a three-frame latent built from it.
func TestVAERoundTrip(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	z := encodeScene(t, dir, goldenVAE, 16)
	if n := decodeFrames(t, dir, goldenVAE, "latents", z); n != 1 {
		t.Errorf("one latent frame decoded to %d frames", n)
	}
	// Three latent frames (the same one repeated) → 4·3−3 = 9 frames.
	if n := decodeFrames(t, dir, goldenVAE, "z", repeatFrame(z, 3), "--tiling", "framewise"); n != 9 {
		t.Errorf("three latent frames decoded to %d frames, want 9", n)
	}
}

// encodeScene runs `vae encode` of the scene image at --resolution 64 with
// the VAE in vdir, writing into dir, and returns the latents, checked to be
// (1, channels, 1, h, w).
func encodeScene(t *testing.T, dir, vdir string, channels int) *tensor.Tensor {
	t.Helper()
	lat := filepath.Join(dir, "encoded.safetensors")
	if _, err := runCLI(t, context.Background(), "vae", "encode", "--vae", vdir, "--image", sceneImage,
		"--resolution", "64", "-o", lat); err != nil {
		t.Fatal(err)
	}
	z, err := readLatents(lat, "latents")
	if err != nil {
		t.Fatal(err)
	}
	if sh := z.Shape(); len(sh) != 5 || sh[0] != 1 || sh[1] != channels || sh[2] != 1 {
		t.Fatalf("latents %v, want (1, %d, 1, h, w)", sh, channels)
	}
	return z
}

// decodeFrames saves z into dir as the tensor name, runs `vae decode` on it
// with the VAE in vdir (and args) and returns the frames written.
func decodeFrames(t *testing.T, dir, vdir, name string, z *tensor.Tensor, args ...string) int {
	t.Helper()
	lat := filepath.Join(dir, "decode.safetensors")
	if err := weights.Save(lat, map[string]*tensor.Tensor{name: z}, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, fmt.Sprintf("decoded%d.mp4", z.Dim(2)))
	args = append([]string{"vae", "decode", "--vae", vdir, "--latents", lat, "-o", out}, args...)
	if _, err := runCLI(t, context.Background(), args...); err != nil {
		t.Fatal(err)
	}
	return wroteFrames(t, out)
}

func TestVAEBadInput(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.safetensors")
	if err := weights.Save(bad, map[string]*tensor.Tensor{"latents": tensor.New(tensor.F32, 1, 8, 1, 2, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	two := filepath.Join(dir, "two.safetensors")
	if err := weights.Save(two, map[string]*tensor.Tensor{"a": tensor.New(tensor.F32, 1), "b": tensor.New(tensor.F32, 1)}, nil); err != nil {
		t.Fatal(err)
	}
	flat := filepath.Join(dir, "flat.safetensors")
	if err := weights.Save(flat, map[string]*tensor.Tensor{"latents": tensor.New(tensor.F32, 16, 2, 2)}, nil); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.safetensors")
	big := tensor.New(tensor.F32, 1, 16, 1, 8, 8)
	for i := range big.Float32s() {
		big.Float32s()[i] = 1e30
	}
	if err := weights.Save(huge, map[string]*tensor.Tensor{"latents": big}, nil); err != nil {
		t.Fatal(err)
	}
	scene := filepath.Join(dir, "scene.png")
	copyFile(t, sceneImage, scene)
	latentsMP4 := filepath.Join(dir, "latents.mp4") // latents, whatever the name says
	if err := weights.Save(latentsMP4, map[string]*tensor.Tensor{"latents": tensor.New(tensor.F32, 1, 16, 1, 8, 8)}, nil); err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{}
	for _, p := range []string{scene, latentsMP4} {
		b, _ := os.ReadFile(p)
		inputs[p] = b
	}
	garbage := filepath.Join(dir, "garbage.png")
	os.WriteFile(garbage, []byte("not an image"), 0o644)
	out := filepath.Join(dir, "out.mp4")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vae", "decode", "--latents", bad, "-o", out}, "--vae is required"},
		{[]string{"vae", "decode", "--vae", dir + "/none", "--latents", bad, "-o", out}, "not a folder"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "-o", out}, "--latents is required"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", bad}, "-o is required"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", dir + "/missing.safetensors", "-o", out}, "missing.safetensors"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", bad, "-o", out}, "takes 16 channels"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", two, "-o", out}, "2 tensors to choose from"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", flat, "-o", out}, "want (1, channels, frames, height, width)"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", bad, "--tiling", "spatial:9", "-o", out}, "spatial:TILE:STRIDE"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", bad, "--dtype", "f8", "-o", out}, "--dtype"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", bad, "-o", dir + "/no/such/out.mp4"}, "does not exist"},
		{[]string{"vae", "encode", "--vae", goldenVAE, "-o", out}, "--image is required"},
		{[]string{"vae", "encode", "--vae", goldenVAE, "--image", garbage, "-o", out}, "garbage.png"},
		{[]string{"vae", "encode", "--vae", goldenVAE, "--image", sceneImage, "--resolution", "-5", "-o", out}, "--resolution"},
		// An output that would replace an input.
		{[]string{"vae", "encode", "--vae", goldenVAE, "--image", scene, "-o", scene}, "is the --image input"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", latentsMP4, "-o", latentsMP4}, "is the --latents input"},
		// Latents far beyond any VAE's range decode to a flat grey video.
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", huge, "-o", out}, huge + ": the latents reach 2.1e+30 divided by the scaling factor"},
		{[]string{"vae", "decode", "--vae", goldenVAE, "--latents", huge, "--unscaled", "-o", out}, "reach 1e+30 as the file holds them"},
	} {
		_, err := runCLI(t, context.Background(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.want)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Fatalf("%v wrote %s", tc.args, out)
		}
		if _, serr := os.Stat(video.PNGDir(out)); serr == nil {
			t.Fatalf("%v wrote %s", tc.args, video.PNGDir(out))
		}
	}
	for p, b := range inputs {
		if now, _ := os.ReadFile(p); string(now) != string(b) {
			t.Errorf("the input %s was replaced", p)
		}
	}
}

// TestVAEEncodeNonFinite: an encoder whose weights hold NaN makes NaN
// latents; vae encode refuses them, naming the VAE folder, and writes
// nothing.
func TestVAEEncodeNonFinite(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	vdir := filepath.Join(dir, "vae")
	if err := os.Mkdir(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(goldenVAE, "config.json"), filepath.Join(vdir, "config.json"))
	ck, err := weights.Open(goldenVAE)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]*tensor.Tensor{}
	for _, n := range ck.Names() {
		h, err := ck.Host(n)
		if err != nil {
			t.Fatal(err)
		}
		c := tensor.New(tensor.F32, h.Shape()...)
		copy(c.Float32s(), h.ToFloat32())
		if n == "encoder.conv_in.conv.weight" {
			for i := range c.Float32s() {
				c.Float32s()[i] = float32(math.NaN())
			}
		}
		ts[n] = c
	}
	ck.Close()
	if err := weights.Save(filepath.Join(vdir, "diffusion_pytorch_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "lat.safetensors")
	_, err = runCLI(t, context.Background(), "vae", "encode", "--vae", vdir, "--image", sceneImage, "--resolution", "64", "-o", out)
	if err == nil || !strings.Contains(err.Error(), "non-finite latents") || !strings.Contains(err.Error(), vdir) {
		t.Errorf("error %v, want one saying the latents are not finite and naming %s", err, vdir)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written", out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// repeatFrame is the one-frame latents z (1, C, 1, h, w) repeated n times.
func repeatFrame(z *tensor.Tensor, n int) *tensor.Tensor {
	sh := z.Shape()
	out := tensor.New(tensor.F32, 1, sh[1], n, sh[3], sh[4])
	src, dst := z.Float32s(), out.Float32s()
	plane := sh[3] * sh[4]
	for c := 0; c < sh[1]; c++ {
		for f := 0; f < n; f++ {
			copy(dst[(c*n+f)*plane:(c*n+f+1)*plane], src[c*plane:(c+1)*plane])
		}
	}
	return out
}
