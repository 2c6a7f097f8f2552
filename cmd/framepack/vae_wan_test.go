package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/wan"
	"github.com/framepack-go/framepack/weights"
)

// writeWanVAE writes a tiny AutoencoderKLWan folder with random weights
// (config.json with its _class_name, diffusion_pytorch_model.safetensors)
// and returns it.
func writeWanVAE(t *testing.T, class string) string {
	t.Helper()
	cfg := wan.DefaultConfig()
	cfg.BaseDim, cfg.ZDim, cfg.DimMult, cfg.NumResBlocks = 8, 4, []int{1, 2, 2, 2}, 1
	cfg.LatentsMean, cfg.LatentsStd = []float32{0.1, -0.2, 0.3, 0}, []float32{2, 1, 0.5, 1.5}
	specs, err := wan.Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ts := map[string]*tensor.Tensor{}
	for _, sp := range specs {
		v := make([]float32, tensor.Numel(sp.Shape))
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.1)
		}
		ts[sp.Name] = tensor.FromFloat32(v, sp.Shape...)
	}
	dir := t.TempDir()
	if err := weights.Save(filepath.Join(dir, "diffusion_pytorch_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cfg)
	var js map[string]any
	json.Unmarshal(raw, &js)
	js["_class_name"] = class
	raw, _ = json.MarshalIndent(js, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWanVAERoundTrip: `vae encode` and `vae decode` pick the Wan VAE from
// config.json's _class_name; three latent frames decode to 9 frames.
func TestWanVAERoundTrip(t *testing.T) {
	tinyEnv(t)
	vdir := writeWanVAE(t, wan.ClassName)
	dir := t.TempDir()
	z := encodeScene(t, dir, vdir, 4)
	if n := decodeFrames(t, dir, vdir, "latents", repeatFrame(z, 3)); n != 9 {
		t.Errorf("three latent frames decoded to %d frames, want 9", n)
	}
}

// TestVAEUnknownClass: a VAE of another class is refused, naming it.
func TestVAEUnknownClass(t *testing.T) {
	tinyEnv(t)
	vdir := writeWanVAE(t, "AutoencoderKLCogVideoX")
	_, err := runCLI(t, context.Background(), "vae", "encode", "--vae", vdir, "--image", sceneImage,
		"--resolution", "64", "-o", filepath.Join(t.TempDir(), "lat.safetensors"))
	if err == nil || !strings.Contains(err.Error(), "AutoencoderKLCogVideoX") {
		t.Fatalf("err = %v, want one naming the class", err)
	}
}
