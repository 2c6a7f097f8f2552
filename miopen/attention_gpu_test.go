package miopen

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/gputest"
	"github.com/framepack-go/framepack/tensor"
)

// attentionRef is softmax(scale·q·kᵀ)·v in float64 on (B, L, H, D) arrays;
// round as gputest.Attention's.
func attentionRef(d AttnDesc, q, k, v []float64, scale float64, round func(float64) float64) []float64 {
	return gputest.Attention(gputest.AttnShape{B: d.B, Lq: d.Lq, Lk: d.Lk, Hq: d.Hq, Hkv: d.Hkv, D: d.D}, q, k, v, scale, round)
}

// e4m3P rounds a probability term to E4M3 at ×448, as the FP8 attention does.
func e4m3P(p float64) float64 {
	return float64(tensor.F32FromF8E4M3(tensor.F8E4M3FromF32(float32(p*E4M3Max)))) / E4M3Max
}

// cuDNN's fused attention matches float64 math within one bf16/f16
// rounding of the output, for odd lengths, grouped heads and both head dims
// the engine serves; MIOpen and older cuDNN say ErrNoFusedAttention.
func TestFusedAttention(t *testing.T) {
	dev, h := openGPU(t)
	dev.Bind(t)
	probe := AttnDesc{B: 1, Lq: 64, Lk: 64, Hq: 2, Hkv: 2, D: 64, DType: BF16}
	if _, err := h.PlanAttention(probe); err != nil {
		if !errors.Is(err, ErrNoFusedAttention) {
			t.Fatalf("%v: %v does not wrap ErrNoFusedAttention", probe, err)
		}
		if h.Lib().HasFusedAttention() {
			t.Fatalf("%v has the SDPA operation but planned nothing: %v", h.Lib(), err)
		}
		t.Skipf("%v: %v", h.Lib(), err)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []AttnDesc{
		{B: 1, Lq: 64, Lk: 64, Hq: 2, Hkv: 2, D: 64},
		{B: 2, Lq: 77, Lk: 131, Hq: 4, Hkv: 2, D: 128},
		{B: 1, Lq: 300, Lk: 300, Hq: 3, Hkv: 3, D: 128},
		{B: 1, Lq: 1, Lk: 513, Hq: 8, Hkv: 1, D: 64},
	}
	for _, dt := range []DType{BF16, F16} {
		for _, d := range cases {
			d.DType = dt
			plan, err := h.PlanAttention(d)
			if err != nil {
				t.Errorf("%v: %v", d, err)
				continue
			}
			q, qb := gputest.Random(rng, dt, d.B*d.Lq*d.Hq*d.D)
			k, kb := gputest.Random(rng, dt, d.B*d.Lk*d.Hkv*d.D)
			v, vb := gputest.Random(rng, dt, d.B*d.Lk*d.Hkv*d.D)
			for i := range q { // spread the scores so the softmax is not flat
				q[i] *= 4
			}
			qb = gputest.Encode(dt, q)
			scale := 1 / math.Sqrt(float64(d.D))
			want := attentionRef(d, q, k, v, float64(float32(scale)), nil)
			oBytes := len(qb)
			qp, kp, vp := dev.Upload(t, qb), dev.Upload(t, kb), dev.Upload(t, vb)
			op := dev.Alloc(t, int64(oBytes))
			dev.Poison(t, op, int64(oBytes))
			var ws uintptr
			if plan.WorkspaceBytes > 0 {
				ws = dev.Alloc(t, plan.WorkspaceBytes)
			}
			if err := h.Attention(d, qp, kp, vp, op, float32(scale), ws); err != nil {
				t.Errorf("%v: %v", d, err)
				continue
			}
			got := gputest.Decode(dt, dev.Download(t, op, oBytes))
			e := gputest.RelL2(got, want)
			tol := 8e-3 // bf16: one rounding of P and of the output
			if dt == F16 {
				tol = 2e-3
			}
			t.Logf("%v: %s, workspace %d B: rel L2 %.3g", d, plan.Engine, plan.WorkspaceBytes, e)
			if !(e <= tol) {
				t.Errorf("%v: rel L2 %.3g > %.3g", d, e, tol)
			}
		}
	}
	// Plans are cached.
	n := len(h.attn)
	if _, err := h.PlanAttention(cases[0].withType(BF16)); err != nil || len(h.attn) != n {
		t.Errorf("second plan of %v: %v, %d plans cached before, %d after", cases[0], err, n, len(h.attn))
	}
	bad := AttnDesc{B: 1, Lq: 8, Lk: 8, Hq: 1, Hkv: 1, D: 64, DType: F32}
	if _, err := h.PlanAttention(bad); !errors.Is(err, ErrNoFusedAttention) {
		t.Errorf("f32 attention: %v, want ErrNoFusedAttention", err)
	}
}

func (d AttnDesc) withType(dt DType) AttnDesc { d.DType = dt; return d }

// quantizeE4M3 codes v per tensor at 448/amax: the codes, their values
// times the descale, and the descale.
func quantizeE4M3(v []float64) ([]byte, []float64, float64) {
	var amax float64
	for _, x := range v {
		amax = max(amax, math.Abs(x))
	}
	scale := float32(E4M3Max / amax)
	codes, vals := make([]byte, len(v)), make([]float64, len(v))
	for i, x := range v {
		codes[i] = tensor.F8E4M3FromF32(float32(x) * scale)
		vals[i] = float64(tensor.F32FromF8E4M3(codes[i])) / float64(scale)
	}
	return codes, vals, 1 / float64(scale)
}

// f32sOf decodes little-endian f32 bytes.
func f32sOf(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return v
}

// f32s is v as little-endian f32 bytes.
func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return b
}

// cuDNN's FP8 attention (Hopper and newer) matches the same math in
// float64 — per-tensor E4M3 q, k, v, the probabilities rounded to E4M3, o
// coded in E4M3 at 448/amax(v) (|o| ≤ amax(v): o averages rows of v) —
// within one E4M3 step of o; it says how far that is from the attention of
// the unquantized inputs.
func TestFusedAttentionFP8(t *testing.T) {
	dev, h := openGPU(t)
	dev.Bind(t)
	probe := AttnDesc{B: 1, Lq: 64, Lk: 64, Hq: 2, Hkv: 2, D: 64, FP8: true}
	if _, err := h.PlanAttention(probe); err != nil {
		if !errors.Is(err, ErrNoFusedAttention) {
			t.Fatalf("%v: %v does not wrap ErrNoFusedAttention", probe, err)
		}
		t.Skipf("%v: %v", h.Lib(), err)
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for _, d := range []AttnDesc{
		{B: 1, Lq: 64, Lk: 64, Hq: 2, Hkv: 2, D: 64},
		{B: 2, Lq: 77, Lk: 131, Hq: 3, Hkv: 3, D: 128},
		{B: 1, Lq: 300, Lk: 1000, Hq: 2, Hkv: 2, D: 128},
	} {
		d.FP8 = true
		plan, err := h.PlanAttention(d)
		if err != nil {
			t.Errorf("%v: %v", d, err)
			continue
		}
		nq, nk := d.B*d.Lq*d.Hq*d.D, d.B*d.Lk*d.Hkv*d.D
		q, k, v := make([]float64, nq), make([]float64, nk), make([]float64, nk)
		for i := range q {
			q[i] = rng.NormFloat64() * 2
		}
		for i := range k {
			k[i], v[i] = rng.NormFloat64(), rng.NormFloat64()
		}
		qc, qv, dq := quantizeE4M3(q)
		kc, kv, dk := quantizeE4M3(k)
		vc, vv, dv := quantizeE4M3(v)
		scale := float32(1 / math.Sqrt(float64(d.D)))
		want := attentionRef(d, qv, kv, vv, float64(scale), e4m3P)
		exact := attentionRef(d, q, k, v, float64(scale), nil)
		so := float32(1 / dv)
		consts := dev.Upload(t, f32s(float32(dq), float32(dk), float32(dv), 1.0/E4M3Max, E4M3Max, so, -1, -1))
		sc := FP8Scales{DescaleQ: consts, DescaleK: consts + 4, DescaleV: consts + 8, DescaleS: consts + 12,
			ScaleS: consts + 16, ScaleO: consts + 20, AmaxS: consts + 24, AmaxO: consts + 28}
		op := dev.Alloc(t, int64(nq))
		dev.Poison(t, op, int64(nq))
		var ws uintptr
		if plan.WorkspaceBytes > 0 {
			ws = dev.Alloc(t, plan.WorkspaceBytes)
		}
		if err := h.AttentionFP8(d, dev.Upload(t, qc), dev.Upload(t, kc), dev.Upload(t, vc), op, scale, sc, ws); err != nil {
			t.Errorf("%v: %v", d, err)
			continue
		}
		codes := dev.Download(t, op, nq)
		got := make([]float64, nq)
		for i, c := range codes {
			got[i] = float64(tensor.F32FromF8E4M3(c)) / float64(so)
		}
		e, ex := gputest.RelL2(got, want), gputest.RelL2(got, exact)
		amax := f32sOf(dev.Download(t, consts+24, 8))
		t.Logf("%v: %s, workspace %d B: rel L2 %.3g against the FP8 math, %.3g against unquantized attention; amax P %.3g, o %.3g",
			d, plan.Engine, plan.WorkspaceBytes, e, ex, amax[0], amax[1])
		// One E4M3 rounding of o (≤ 2⁻⁴ relative) and the probabilities'
		// ties, which may round either way.
		if !(e <= 0.05) {
			t.Errorf("%v: rel L2 %.3g against the FP8 math > 0.05", d, e)
		}
	}
}

// BenchmarkFusedAttention times cuDNN's bf16 and FP8 attention at
// HunyuanVideo's shape (18 055 tokens of 24 heads × 128 at 544×704).
func BenchmarkFusedAttention(b *testing.B) {
	dev, h := openGPU(b)
	dev.Bind(b)
	for _, fp8 := range []bool{false, true} {
		d := AttnDesc{B: 1, Lq: 18055, Lk: 18055, Hq: 24, Hkv: 24, D: 128, DType: BF16, FP8: fp8}
		b.Run(map[bool]string{false: "bf16", true: "fp8"}[fp8], func(b *testing.B) {
			dev.Bind(b) // a sub-benchmark runs on its own goroutine
			plan, err := h.PlanAttention(d)
			if err != nil {
				b.Skipf("%v: %v", d, err)
			}
			n := int64(d.B * d.Lq * d.Hq * d.D)
			es := int64(2)
			if fp8 {
				es = 1
			}
			fill := make([]byte, n*es) // 0x3C bytes: 0.0115 in bf16, 1.5 in E4M3
			for i := range fill {
				fill[i] = 0x3C
			}
			q, k, v, o := dev.Upload(b, fill), dev.Upload(b, fill), dev.Upload(b, fill), dev.Alloc(b, n*es)
			consts := dev.Upload(b, f32s(1.0/64, 1.0/64, 1.0/64, 1.0/E4M3Max, E4M3Max, 1, 0, 0))
			sc := FP8Scales{DescaleQ: consts, DescaleK: consts + 4, DescaleV: consts + 8, DescaleS: consts + 12,
				ScaleS: consts + 16, ScaleO: consts + 20, AmaxS: consts + 24, AmaxO: consts + 28}
			var ws uintptr
			if plan.WorkspaceBytes > 0 {
				ws = dev.Alloc(b, plan.WorkspaceBytes)
			}
			run := func() error {
				if fp8 {
					return h.AttentionFP8(d, q, k, v, o, 0.088, sc, ws)
				}
				return h.Attention(d, q, k, v, o, 0.088, ws)
			}
			for range 3 {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			dev.Sync(b)
			b.ResetTimer()
			for range b.N {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			dev.Sync(b)
			b.ReportMetric(d.FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e12, "TFLOP/s")
			b.Logf("%v: %s", d, plan.Engine)
		})
	}
}
