package framepack

import (
	"context"
	"errors"
	"testing"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/tensor"
)

// The tiny model on a GPU: in f32 it makes the CPU's video (two sections,
// so the history, the soft append and the VAE tiling plan all run), and in
// the GPU's default dtypes (bf16 transformer, f16 others) it runs end to
// end; nothing stays allocated after either.
func TestGenerateGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("GPU end-to-end test")
	}
	gp, err := Load(tinyDir(t), Options{Device: DeviceGPU, Logger: quietLogger(t)})
	if errors.Is(err, hip.ErrNoGPU) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device %s; %s", gp.Device(), gp.Budget())
	gp.Close()

	req := smallRequest(testImage(t))
	req.Seconds = 0.8 // two sections
	want := generate(t, Options{Device: DeviceCPU, DType: tensor.F32}, req)
	got := generate(t, Options{Device: DeviceGPU, DType: tensor.F32}, req)
	if got.T != want.T || got.W != want.W || got.H != want.H {
		t.Fatalf("GPU video %d frames of %d×%d, CPU %d of %d×%d", got.T, got.W, got.H, want.T, want.W, want.H)
	}
	rel := numcmp.RelL2(tensor.Float32s(got.Latents), tensor.Float32s(want.Latents))
	mean, worst := pixelDiff(got.Pix, want.Pix)
	t.Logf("f32 GPU vs CPU: latents rel_l2 %.2e; pixels mean |diff| %.4f, max %d (of 255), %d frames; GPU peak %d KiB",
		rel, mean, worst, got.T, got.PeakBytes>>10)
	// f32 on both: only summation order differs.
	if !(rel < 1e-3) || mean > 0.5 {
		t.Errorf("GPU and CPU disagree: latents rel_l2 %.2e (want < 1e-3), mean pixel diff %.3f (want ≤ 0.5)", rel, mean)
	}

	// bf16 everywhere on both: the tiny model's random weights make it
	// sensitive to bf16 rounding (bf16 vs f32 on the CPU alone differ by
	// rel_l2 0.29), so this is looser than f32 but far below that.
	gb := generate(t, Options{Device: DeviceGPU, DType: tensor.BF16}, req)
	cb := generate(t, Options{Device: DeviceCPU, DType: tensor.BF16}, req)
	rel = numcmp.RelL2(tensor.Float32s(gb.Latents), tensor.Float32s(cb.Latents))
	mean, worst = pixelDiff(gb.Pix, cb.Pix)
	t.Logf("bf16 GPU vs CPU: latents rel_l2 %.2e; pixels mean |diff| %.4f, max %d", rel, mean, worst)
	if gb.T != cb.T || !(rel < 0.05) {
		t.Errorf("bf16 GPU and CPU disagree: %d and %d frames, latents rel_l2 %.2e (want < 0.05)", gb.T, cb.T, rel)
	}

	// The GPU's own dtypes (bf16 transformer, f16 the rest) run end to end.
	half := generate(t, Options{Device: DeviceGPU}, req)
	rel = numcmp.RelL2(tensor.Float32s(half.Latents), tensor.Float32s(cb.Latents))
	t.Logf("default GPU dtypes vs bf16 CPU: latents rel_l2 %.2e", rel)
	if half.T != want.T || !(rel < 0.5) {
		t.Errorf("GPU in its default dtypes: %d frames (want %d), latents rel_l2 %.2e from the bf16 CPU run", half.T, want.T, rel)
	}
}

// generate runs req on the tiny model with o and checks that nothing stays
// allocated after it and Unload.
func generate(t *testing.T, o Options, req Request) *Result {
	t.Helper()
	o.Logger = quietLogger(t)
	p, err := Load(tinyDir(t), o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Unload(); err != nil {
		t.Fatal(err)
	}
	if in := p.MemoryStats().InUse; in != 0 {
		t.Errorf("%s: %d bytes still allocated after the job and Unload", p.Device(), in)
	}
	return res
}

func pixelDiff(a, b []uint8) (mean float64, worst int) {
	var sum int
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d < 0 {
			d = -d
		}
		sum += d
		worst = max(worst, d)
	}
	return float64(sum) / float64(len(a)), worst
}
