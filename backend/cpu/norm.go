package cpu

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// meanVar is the mean and population variance of x, two-pass in float64,
// each pass in four running sums (independent additions, not one chain).
func meanVar(x []float32) (mean, variance float64) {
	n := len(x)
	if n == 0 {
		return 0, 0
	}
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += float64(x[i])
		s1 += float64(x[i+1])
		s2 += float64(x[i+2])
		s3 += float64(x[i+3])
	}
	for ; i < n; i++ {
		s0 += float64(x[i])
	}
	mean = (s0 + s1 + s2 + s3) / float64(n)
	var q0, q1, q2, q3 float64
	i = 0
	for ; i+4 <= n; i += 4 {
		d0, d1 := float64(x[i])-mean, float64(x[i+1])-mean
		d2, d3 := float64(x[i+2])-mean, float64(x[i+3])-mean
		q0 += d0 * d0
		q1 += d1 * d1
		q2 += d2 * d2
		q3 += d3 * d3
	}
	for ; i < n; i++ {
		d := float64(x[i]) - mean
		q0 += d * d
	}
	return mean, (q0 + q1 + q2 + q3) / float64(n)
}

func (be *Backend) GroupNorm(dst, x, w, b *tensor.Tensor, groups int, eps float32, silu bool) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt {
		return unsupported("group_norm", dt)
	}
	if err := tensor.CheckGroupNorm(dst, x, w, b, groups); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	B, C := x.Dim(0), x.Dim(1)
	S := 0
	if B*C > 0 {
		S = x.Numel() / (B * C)
	}
	round := tensor.Rounder(dt)
	cg := C / groups
	return be.inF32(dst, []*tensor.Tensor{x, w, b}, func(_ *temps, in [][]float32, out []float32) {
		xf, wf, bf := in[0], in[1], in[2]
		be.tasks(B*groups, func(_, i int) {
			bi, g := i/groups, i%groups
			lo := (bi*C + g*cg) * S
			hi := lo + cg*S
			mean, variance := meanVar(xf[lo:hi])
			rstd := 1 / math.Sqrt(variance+float64(eps))
			for c := g * cg; c < (g+1)*cg; c++ {
				// (x − mean) first: folding the mean into the shift would cancel
				// badly when the mean is large against the spread.
				scale, shift := rstd, 0.0
				if wf != nil {
					scale *= float64(wf[c])
				}
				if bf != nil {
					shift = float64(bf[c])
				}
				m32, s32, h32 := float32(mean), float32(scale), float32(shift)
				xs := xf[(bi*C+c)*S : (bi*C+c+1)*S]
				ys := out[(bi*C+c)*S : (bi*C+c+1)*S]
				if silu && dt == tensor.F32 { // nothing to round
					normSiLU(ys, xs, m32, s32, h32)
				} else if silu {
					for j, v := range xs {
						// The reference rounds the norm's output to its dtype
						// before the SiLU.
						ys[j] = siluf(round((v-m32)*s32 + h32))
					}
				} else {
					for j, v := range xs {
						ys[j] = (v-m32)*s32 + h32
					}
				}
			}
		})
	})
}

// rowsOf checks a last-axis op's dtype and shapes, and its per-channel
// parameters (nil: absent), and returns (rows, row length).
func rowsOf(op string, dst, x *tensor.Tensor, params ...*tensor.Tensor) (int, int, error) {
	dt := dst.DType()
	if !isCompute(dt) {
		return 0, 0, unsupported(op, dt)
	}
	n, d, err := tensor.Rows(op, dst, x, params...)
	if err != nil {
		return 0, 0, fmt.Errorf("cpu: %w", err)
	}
	return n, d, nil
}

func (be *Backend) LayerNorm(dst, x, w, b *tensor.Tensor, eps float32) error {
	n, d, err := rowsOf("layer_norm", dst, x, w, b)
	if err != nil {
		return err
	}
	return be.inF32(dst, []*tensor.Tensor{x, w, b}, func(_ *temps, in [][]float32, out []float32) {
		xf, wf, bf := in[0], in[1], in[2]
		be.eachRow(n, d, func(r int) {
			xs, ys := xf[r*d:(r+1)*d], out[r*d:(r+1)*d]
			mean, variance := meanVar(xs)
			rstd := float32(1 / math.Sqrt(variance+float64(eps)))
			m32 := float32(mean)
			for j, v := range xs {
				y := (v - m32) * rstd
				if wf != nil {
					y *= wf[j]
				}
				if bf != nil {
					y += bf[j]
				}
				ys[j] = y
			}
		})
	})
}

func (be *Backend) RMSNorm(dst, x, w *tensor.Tensor, eps float32) error {
	n, d, err := rowsOf("rms_norm", dst, x, w)
	if err != nil {
		return err
	}
	return be.inF32(dst, []*tensor.Tensor{x, w}, func(_ *temps, in [][]float32, out []float32) {
		xf, wf := in[0], in[1]
		round := tensor.Rounder(dst.DType())
		be.eachRow(n, d, func(r int) {
			xs, ys := xf[r*d:(r+1)*d], out[r*d:(r+1)*d]
			var q float64
			for _, v := range xs {
				q += float64(v) * float64(v)
			}
			rs := float32(1 / math.Sqrt(q/float64(d)+float64(eps)))
			if wf == nil {
				for j, v := range xs {
					ys[j] = v * rs
				}
				return
			}
			for j, v := range xs {
				ys[j] = round(v*rs) * wf[j]
			}
		})
	})
}

func (be *Backend) Softmax(dst, x *tensor.Tensor) error {
	n, d, err := rowsOf("softmax", dst, x)
	if err != nil {
		return err
	}
	return be.inF32(dst, []*tensor.Tensor{x}, func(_ *temps, in [][]float32, out []float32) {
		be.eachRow(n, d, func(r int) { softmaxRow(out[r*d:(r+1)*d], in[0][r*d:(r+1)*d]) })
	})
}

// softmaxRow is a max-subtracted softmax with a float64 sum. A row of -Inf
// gives NaN, as torch does.
func softmaxRow(y, x []float32) { softmaxFrom(y, x, rowMax(x)) }

// rowMax is x's largest value, NaN when x holds one, −Inf when x is empty.
func rowMax(x []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range x {
		if v > m || v != v {
			m = v
		}
	}
	return m
}

// softmaxFrom writes the softmax of x into y, shifted by x's maximum m,
// summed in float64.
func softmaxFrom(y, x []float32, m float32) {
	var s float64
	for j, v := range x {
		e := expf(v - m)
		y[j] = float32(e)
		s += e
	}
	inv := 1 / s
	for j := range y {
		y[j] = float32(float64(y[j]) * inv)
	}
}

func (be *Backend) Reduce(op tensor.ReduceOp, dst, src *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || src.DType() != dt {
		return unsupported("reduce", dt)
	}
	if op > tensor.ReduceAbsMean {
		return fmt.Errorf("cpu: reduce %d: %w", op, tensor.ErrUnsupported)
	}
	if src.Rank() != 2 || dst.Numel() != src.Dim(0) {
		return fmt.Errorf("cpu: reduce of %v into %v", src, dst)
	}
	n, k := src.Dim(0), src.Dim(1)
	return be.inF32(dst, []*tensor.Tensor{src}, func(_ *temps, in [][]float32, out []float32) {
		be.eachRow(n, k, func(r int) { out[r] = float32(reduceRow(op, in[0][r*k:(r+1)*k])) })
	})
}

func reduceRow(op tensor.ReduceOp, x []float32) float64 {
	k := float64(len(x))
	switch op {
	case tensor.ReduceSum, tensor.ReduceMean:
		var s float64
		for _, v := range x {
			s += float64(v)
		}
		if op == tensor.ReduceMean {
			s /= k
		}
		return s
	case tensor.ReduceMax:
		m := math.Inf(-1)
		for _, v := range x {
			f := float64(v)
			if f != f {
				return f
			}
			m = max(m, f)
		}
		return m
	case tensor.ReduceVar, tensor.ReduceVarU:
		_, variance := meanVar(x)
		if op == tensor.ReduceVarU {
			return variance * k / (k - 1) // k = 1 gives NaN, as torch
		}
		return variance
	default: // ReduceAbsMean
		var s float64
		for _, v := range x {
			s += math.Abs(float64(v))
		}
		return s / k
	}
}

// normSiLU is ys[j] = siluf((xs[j]−m)·s + h): the f32 GroupNorm's output,
// with expf's steps written out in the loop (normSiLUGo: a call per value
// costs as much as the rest of the work), eight values at a time where the
// CPU has AVX2 (normSiLU8).
func normSiLU(ys, xs []float32, m, s, h float32) {
	if !haveAVX2 {
		normSiLUGo(ys, xs, m, s, h)
		return
	}
	ys = ys[:len(xs)]
	for i := 0; i < len(xs); {
		i += normSiLU8(ys[i:], xs[i:], m, s, h, &expTable)
		end := min(len(xs), i+8) // the vector loop's tail, or a block it left
		normSiLUGo(ys[i:end], xs[i:end], m, s, h)
		i = end
	}
}

// normSiLUGo is normSiLU one value at a time.
func normSiLUGo(ys, xs []float32, m, s, h float32) {
	const (
		toK   = 64 / math.Ln2
		fromK = math.Ln2 / 64
		round = 0x1.8p52
	)
	ys = ys[:len(xs)]
	for j, v := range xs {
		y := float32((v-m)*s) + h
		x := -y
		var e float64
		if x >= -104 && x <= 89 {
			f := float64(x)
			kf := (float64(f*toK) + round) - round
			k := int64(kf)
			r := f - float64(kf*fromK)
			p := 1 + float64(r*(1+float64(r*(0.5+float64(r*(1.0/6))))))
			e = math.Float64frombits(math.Float64bits(expTable[k&63]*p) + uint64(k>>6)<<52)
		} else {
			e = expf(x) // NaN, or beyond float32's range
		}
		ys[j] = float32(float64(y) / (1 + e))
	}
}
