package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
	"github.com/framepack-go/framepack/tensor"
)

// e4m3Tensor codes v per tensor as the GPU does (tensor.QuantizeF8E4M3Rows
// with one row) and returns the coded values and the descale.
func e4m3Tensor(v []float32) ([]float64, float32) {
	codes, scale := make([]uint8, len(v)), make([]float32, 1)
	tensor.QuantizeF8E4M3Rows(codes, scale, v, 1, len(v))
	out := make([]float64, len(v))
	for i, c := range codes {
		out[i] = float64(tensor.F32FromF8E4M3(c) * scale[0])
	}
	return out, scale[0]
}

// fp8AttentionRef is the FP8 attention in float64 on (B, L, H, D) q, k, v
// already coded, the way a flash kernel rounds (gputest.Attention): each
// exp(s − max) rounded to E4M3 at ×448, o coded in E4M3 at 1/dv. (cuDNN
// takes the max so far, block by block, which rounds some terms at another
// scale.)
func fp8AttentionRef(b, l, h, d int, q, k, v []float64, scale float64, dv float32) []float64 {
	round := func(p float64) float64 {
		return float64(tensor.F32FromF8E4M3(tensor.F8E4M3FromF32(float32(p*448)))) / 448
	}
	out := gputest.Attention(gputest.AttnShape{B: b, Lq: l, Lk: l, Hq: h, Hkv: h, D: d}, q, k, v, scale, round)
	for i, x := range out {
		out[i] = float64(tensor.F32FromF8E4M3(tensor.F8E4M3Sat(float32(x)/dv)) * dv)
	}
	return out
}

func relL2(got []float32, want []float64) float64 {
	var d, n float64
	for i, w := range want {
		d += (float64(got[i]) - w) * (float64(got[i]) - w)
		n += w * w
	}
	return math.Sqrt(d / n)
}

// With AttnParams.FP8 on an FP8 GPU the attention runs through cuDNN's FP8
// engine: q, k, v coded per tensor by the backend's kernels, o widened from
// its E4M3 codes. It lies near the same math in float64 (the roundings at
// other scales are cuDNN's running max) and within FP8's error of the exact
// attention; a wrong scale anywhere would be off by far more.
func TestAttentionFP8(t *testing.T) {
	b := newGPU(t, Options{})
	if !b.NativeFP8() {
		t.Skipf("%s has no FP8", b.Name())
	}
	const B, L, H, D = 1, 300, 2, 128
	rng := rand.New(rand.NewPCG(21, 22))
	gen := func(amp float64) []float32 {
		v := make([]float32, B*L*H*D)
		for i := range v {
			v[i] = tensor.Rounder(tensor.BF16)(float32(rng.NormFloat64() * amp))
		}
		return v
	}
	qv, kv, vv := gen(2), gen(1), gen(1)
	s := tensor.NewScope(b)
	defer s.Close()
	up := func(v []float32) *tensor.Tensor {
		return s.Cast(s.To(tensor.FromFloat32(v, B, L, H, D)), tensor.BF16)
	}
	q, k, v := up(qv), up(kv), up(vv)
	before := b.FP8AttentionCalls()
	got := tensor.Float32s(s.Cast(s.Attention(q, k, v, tensor.AttnParams{FP8: true}), tensor.F32))
	if b.FP8AttentionCalls() != before+1 {
		// Hopper with cuDNN's graph API must take it; elsewhere the bf16
		// attention ran, which is the documented fallback.
		if b.dev.ComputeMajor >= 9 && b.FusedAttentionCalls() > 0 {
			t.Fatalf("%s: cuDNN's FP8 attention did not take the call on sm_%d%d", b.Name(), b.dev.ComputeMajor, b.dev.ComputeMinor)
		}
		t.Skipf("%s: no FP8 attention engine (Hopper or newer with cuDNN's graph API)", b.Name())
	}
	exact := tensor.Float32s(s.Cast(s.Attention(q, k, v, tensor.AttnParams{}), tensor.F32))
	qc, _ := e4m3Tensor(qv)
	kc, _ := e4m3Tensor(kv)
	vc, dv := e4m3Tensor(vv)
	want := fp8AttentionRef(B, L, H, D, qc, kc, vc, 1/math.Sqrt(D), dv)
	e := relL2(got, want)
	ex := make([]float64, len(exact))
	for i, x := range exact {
		ex[i] = float64(x)
	}
	t.Logf("FP8 attention: rel L2 %.3g against the same math in float64, %.3g against the bf16 attention", e, relL2(got, ex))
	if !(e <= 0.05) {
		t.Errorf("rel L2 %.3g against the FP8 math > 0.05", e)
	}
	if ee := relL2(got, ex); !(ee <= 0.15) {
		t.Errorf("rel L2 %.3g against the bf16 attention > 0.15", ee)
	}
}
