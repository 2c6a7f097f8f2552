package miopen

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/rocblas/gputest"
)

// attentionRef is softmax(scale·q·kᵀ)·v in float64 on (B, L, H, D) arrays.
func attentionRef(d AttnDesc, q, k, v []float64, scale float64) []float64 {
	out := make([]float64, d.B*d.Lq*d.Hq*d.D)
	s := make([]float64, d.Lk)
	group := d.Hq / d.Hkv
	for b := range d.B {
		for h := range d.Hq {
			hk := h / group
			for i := range d.Lq {
				qr := q[((b*d.Lq+i)*d.Hq+h)*d.D:][:d.D]
				m := math.Inf(-1)
				for j := range d.Lk {
					kr := k[((b*d.Lk+j)*d.Hkv+hk)*d.D:][:d.D]
					var dot float64
					for x := range d.D {
						dot += qr[x] * kr[x]
					}
					s[j] = dot * scale
					m = max(m, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				or := out[((b*d.Lq+i)*d.Hq+h)*d.D:][:d.D]
				for j := range d.Lk {
					vr := v[((b*d.Lk+j)*d.Hkv+hk)*d.D:][:d.D]
					for x := range d.D {
						or[x] += s[j] / sum * vr[x]
					}
				}
			}
		}
	}
	return out
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
			want := attentionRef(d, q, k, v, float64(float32(scale)))
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
