package tiles

import (
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// Blender blends as diffusers does, a·(1−k/e) + b·(k/e), with torch's
// arithmetic in the compute dtype: each product rounded to it, then the sum.
type Blender struct{ dt tensor.DType }

// RoundTo is the blender of compute dtype dt.
func RoundTo(dt tensor.DType) Blender { return Blender{dt} }

// blendWeights of position k of an extent e: 1 − k/e and k/e (computed in
// double by Python, used as f32 by torch's kernels).
func blendWeights(e int) (wa, wb []float32) {
	wa, wb = make([]float32, e), make([]float32, e)
	for k := range wa {
		wa[k] = float32(1 - float64(k)/float64(e))
		wb[k] = float32(float64(k) / float64(e))
	}
	return
}

// mix sets b[i] = blend(a[i], b[i]) with weights wa, wb (one each, or one
// per element when the slices are as long as b).
func (r Blender) mix(a, b, wa, wb []float32) {
	per := len(wa) > 1
	ka, kb := wa[0], wb[0]
	switch r.dt {
	case tensor.F16:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = roundF16(roundF16(a[i]*ka) + roundF16(b[i]*kb))
		}
	case tensor.BF16:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = tensor.RoundBF16(tensor.RoundBF16(a[i]*ka) + tensor.RoundBF16(b[i]*kb))
		}
	default:
		for i := range b {
			if per {
				ka, kb = wa[i], wb[i]
			}
			b[i] = float32(a[i]*ka) + float32(b[i]*kb)
		}
	}
}

// roundF16 rounds to the nearest half (ties to even), as a float32.
func roundF16(f float32) float32 {
	u := math.Float32bits(f)
	if e := u >> 23 & 0xff; e-113 < 29 { // 2⁻¹⁴ ≤ |f| < 2¹⁵: stays a normal half
		u += 0xfff + (u>>13)&1
		return math.Float32frombits(u &^ 0x1fff)
	}
	return tensor.RoundF16(f)
}

// BlendT, BlendV and BlendH are diffusers' blend_t / blend_v / blend_h: the
// last e frames (rows, columns) of a fade into the first e of b, in place on
// b, for e = min(a's, b's, extent).
func (r Blender) BlendT(a, b *Video, extent int) {
	e := min(a.T, b.T, extent)
	if e <= 0 {
		return
	}
	wa, wb := blendWeights(e)
	forPlanes(&Video{B: b.B, C: b.C, T: e}, b.H*b.W, func(bi, c, k int) {
		r.mix(a.Frame(bi, c, a.T-e+k), b.Frame(bi, c, k), wa[k:k+1], wb[k:k+1])
	})
}

func (r Blender) BlendV(a, b *Video, extent int) {
	e := min(a.H, b.H, extent)
	if e <= 0 {
		return
	}
	wa, wb := blendWeights(e)
	forPlanes(b, e*b.W, func(bi, c, t int) {
		fa, fb := a.Frame(bi, c, t), b.Frame(bi, c, t)
		for k := 0; k < e; k++ {
			ra := (a.H - e + k) * a.W
			r.mix(fa[ra:ra+b.W], fb[k*b.W:(k+1)*b.W], wa[k:k+1], wb[k:k+1])
		}
	})
}

func (r Blender) BlendH(a, b *Video, extent int) {
	e := min(a.W, b.W, extent)
	if e <= 0 {
		return
	}
	wa, wb := blendWeights(e)
	forPlanes(b, b.H*e, func(bi, c, t int) {
		fa, fb := a.Frame(bi, c, t), b.Frame(bi, c, t)
		for y := 0; y < b.H; y++ {
			ra := y*a.W + a.W - e
			r.mix(fa[ra:ra+e], fb[y*b.W:y*b.W+e], wa, wb)
		}
	})
}
