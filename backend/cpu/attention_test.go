package cpu

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// attnRef is softmax(q·kᵀ·scale + mask)·v in float64, one query row at a
// time, with zeros for a row that sees no key; scale is Σ p·|v| per output.
func attnRef(q, k, v []float32, B, Lq, Lk, Hq, Hkv, D int, p tensor.AttnParams, keyMask, mask []float32, maskB int) (want, scale []float64) {
	want, scale = make([]float64, B*Lq*Hq*D), make([]float64, B*Lq*Hq*D)
	sc := float64(p.Scale)
	if sc == 0 {
		sc = 1 / math.Sqrt(float64(D))
	}
	s := make([]float64, Lk)
	for b := 0; b < B; b++ {
		for h := 0; h < Hq; h++ {
			hk := h / (Hq / Hkv)
			for i := 0; i < Lq; i++ {
				m := math.Inf(-1)
				for j := 0; j < Lk; j++ {
					var dot float64
					for d := 0; d < D; d++ {
						dot += float64(q[((b*Lq+i)*Hq+h)*D+d]) * float64(k[((b*Lk+j)*Hkv+hk)*D+d])
					}
					x := dot * sc
					if mask != nil {
						x += float64(mask[(b%maskB*Lq+i)*Lk+j])
					}
					if (p.Causal && j > i) || (p.FrameLen > 0 && j/p.FrameLen > i/p.FrameLen) || (keyMask != nil && keyMask[b*Lk+j] == 0) {
						x = math.Inf(-1)
					}
					s[j] = x
					m = math.Max(m, x)
				}
				o := want[((b*Lq+i)*Hq+h)*D:][:D]
				if math.IsInf(m, -1) {
					continue // zeros
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				for j := range s {
					w := s[j] / sum
					for d := 0; d < D; d++ {
						x := float64(v[((b*Lk+j)*Hkv+hk)*D+d])
						o[d] += w * x
						scale[((b*Lq+i)*Hq+h)*D+d] += w * math.Abs(x)
					}
				}
			}
		}
	}
	return want, scale
}

func TestAttention(t *testing.T) {
	_, s := scope(t)
	r := rng(30)
	type cfg struct {
		B, Lq, Lk, Hq, Hkv, D int
		kind                  string
	}
	cases := []cfg{
		{1, 1, 1, 1, 1, 1, "none"},
		{2, 7, 17, 3, 3, 8, "none"},
		{1, 33, 33, 4, 2, 16, "causal"}, // GQA
		{2, 12, 12, 2, 1, 4, "frame"},   // frame-causal, frames of 4
		{2, 7, 9, 2, 2, 8, "keymask"},
		{2, 5, 6, 6, 2, 8, "mask"},  // per-batch additive mask, GQA
		{3, 5, 6, 1, 1, 8, "mask1"}, // one mask for every batch
		{1, 300, 40, 2, 1, 8, "causal"},
		{1, 300, 300, 1, 1, 4, "frame"}, // several query blocks
		{1, 5, 4, 1, 1, 4, "scale"},
	}
	for _, c := range cases {
		for _, dt := range floatTypes {
			qv := randVals(r, dt, c.B*c.Lq*c.Hq*c.D, -2, 2)
			kv := randVals(r, dt, c.B*c.Lk*c.Hkv*c.D, -2, 2)
			vv := randVals(r, dt, c.B*c.Lk*c.Hkv*c.D, -1, 1)
			var p tensor.AttnParams
			var keyMask, mask []float32
			maskB := 1
			switch c.kind {
			case "causal":
				p.Causal = true
			case "frame":
				p.FrameLen = 4
			case "keymask":
				keyMask = make([]float32, c.B*c.Lk)
				for i := range keyMask {
					if r.IntN(3) > 0 {
						keyMask[i] = 1
					}
				}
				keyMask[0], keyMask[1] = 0, 0 // and some row of keys fully visible
				p.KeyMask = s.To(tensor.FromFloat32(keyMask, c.B, c.Lk))
			case "mask", "mask1":
				if c.kind == "mask" {
					maskB = c.B
				}
				mask = make([]float32, maskB*c.Lq*c.Lk)
				for i := range mask {
					switch r.IntN(4) {
					case 0:
						mask[i] = float32(math.Inf(-1))
					case 1:
						mask[i] = -0.5
					}
				}
				p.Mask = s.To(tensor.FromFloat32(mask, maskB, c.Lq, c.Lk))
			case "scale":
				p.Scale = 0.3
			}
			var y *tensor.Tensor
			must(t, func() {
				y = s.Attention(input(s, dt, qv, c.B, c.Lq, c.Hq, c.D), input(s, dt, kv, c.B, c.Lk, c.Hkv, c.D),
					input(s, dt, vv, c.B, c.Lk, c.Hkv, c.D), p)
			})
			want, scale := attnRef(qv, kv, vv, c.B, c.Lq, c.Lk, c.Hq, c.Hkv, c.D, p, keyMask, mask, maskB)
			tl := within(dt, scale)
			if dt != tensor.F32 {
				tl.rel *= 2 // half-precision q·k changes the weights slightly too
			}
			compare(t, name("attention ", dt, " ", c), values(s, y), want, tl)
		}
	}
}

// TestAttentionFullyMasked: a query that sees no key gets zeros (never NaN).
func TestAttentionFullyMasked(t *testing.T) {
	_, s := scope(t)
	q := s.Full(tensor.F32, 1, 1, 2, 1, 4)
	k := s.Full(tensor.F32, 1, 1, 3, 1, 4)
	v := s.Full(tensor.F32, 2, 1, 3, 1, 4)
	km := s.To(tensor.FromFloat32([]float32{0, 0, 0}, 1, 3))
	y := s.Attention(q, k, v, tensor.AttnParams{KeyMask: km})
	compare(t, "fully masked", y.Float32s(), make([]float64, 8), exact)
}

func TestRoPE(t *testing.T) {
	_, s := scope(t)
	r := rng(31)
	B, L, H, D := 2, 5, 3, 8
	for _, dt := range floatTypes {
		xv := randVals(r, dt, B*L*H*D, -2, 2)
		cv, sv := make([]float32, L*D), make([]float32, L*D)
		for i := range cv {
			a := r.Float64() * 6
			cv[i], sv[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		var y *tensor.Tensor
		must(t, func() {
			y = s.RoPE(input(s, dt, xv, B, L, H, D), s.To(tensor.FromFloat32(cv, L, D)), s.To(tensor.FromFloat32(sv, L, D)))
		})
		want, scale := make([]float64, len(xv)), make([]float64, len(xv))
		for i := 0; i < len(xv); i += 2 {
			l := (i / (H * D)) % L
			d := i % D
			a, b := float64(xv[i]), float64(xv[i+1])
			c0, s0, c1, s1 := float64(cv[l*D+d]), float64(sv[l*D+d]), float64(cv[l*D+d+1]), float64(sv[l*D+d+1])
			want[i], want[i+1] = a*c0-b*s0, b*c1+a*s1
			scale[i], scale[i+1] = math.Abs(a*c0)+math.Abs(b*s0), math.Abs(b*c1)+math.Abs(a*s1)
		}
		compare(t, name("rope ", dt), values(s, y), want, within(dt, scale))
	}
}
