package bench

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
	"github.com/framepack-go/framepack/weights"
)

// TestCompareOutputs compares a record with itself, then with one frame
// and one section changed: the frame's PSNR and the section's error show
// them and nothing else.
func TestCompareOutputs(t *testing.T) {
	dir := t.TempDir()
	// Two sections' latents under the names FramePack's worker records.
	lat := map[string]*tensor.Tensor{}
	for name, frames := range map[string]int{"generated_latents_section_1": 2, "history_latents_section_1": 2,
		"generated_latents_section_2": 3, "history_latents_section_2": 5, "start_latent": 1, "latents": 5} {
		x := tensor.New(tensor.F32, 1, 2, frames, 1, 2)
		for i, v := 0, x.Float32s(); i < len(v); i++ {
			v[i] = float32(i%7) + 1
		}
		lat[name] = x
	}
	const T, H, W = 4, 2, 3
	px := tensor.New(tensor.F32, 1, 3, T, H, W)
	pv := px.Float32s()
	for i := range pv {
		pv[i] = float32(math.Sin(float64(i))) * 0.9
	}
	rec := map[string]*tensor.Tensor{"pixels": px}
	for k, v := range lat {
		rec[k] = v
	}
	recPath, latPath, frames := filepath.Join(dir, "record.safetensors"), filepath.Join(dir, "fp.safetensors"), filepath.Join(dir, "fp")
	if err := weights.Save(recPath, rec, nil); err != nil {
		t.Fatal(err)
	}
	if err := weights.Save(latPath, lat, nil); err != nil {
		t.Fatal(err)
	}
	f, err := video.FromPixels(px)
	if err != nil {
		t.Fatal(err)
	}
	if err := video.WritePNGs(context.Background(), frames, f); err != nil {
		t.Fatal(err)
	}
	head := Result{"bench": "compare"}
	lines, err := compareOutputs(head, recPath, latPath, frames)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 4 { // 2 sections, the start latent, the frames
		t.Fatalf("%d lines: %v", len(lines), lines)
	}
	for _, l := range lines[:2] {
		if l["generated_latents_rel_l2"] != 0.0 || l["history_latents_rel_l2"] != 0.0 {
			t.Errorf("identical latents differ: %v", l)
		}
	}
	if s := lines[3]["psnr"].(map[string]any); s["min"] != 99.0 {
		t.Errorf("identical frames: %v", s)
	}

	// Frame 2 brighter, section 1's latents off.
	for i := range f.Pix[2*H*W*3 : 3*H*W*3] {
		f.Pix[2*H*W*3+i] = min(f.Pix[2*H*W*3+i]+20, 255)
	}
	if err := video.WritePNGs(context.Background(), frames, f); err != nil {
		t.Fatal(err)
	}
	lat["generated_latents_section_1"].Float32s()[0] += 1
	lat["history_latents_section_1"].Float32s()[0] += 1
	if err := weights.Save(latPath, lat, nil); err != nil {
		t.Fatal(err)
	}
	if lines, err = compareOutputs(head, recPath, latPath, frames); err != nil {
		t.Fatal(err)
	}
	if lines[0]["generated_latents_rel_l2"] == 0.0 || lines[1]["generated_latents_rel_l2"] != 0.0 {
		t.Errorf("section 1 changed: %v / %v", lines[0], lines[1])
	}
	s := lines[3]["psnr"].(map[string]any)
	if s["min_frame"] != 2 || s["max"] != 99.0 || s["min"].(float64) > 30 {
		t.Errorf("frame 2 changed: %v", lines[3])
	}
}
