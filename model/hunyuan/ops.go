package hunyuan

import "github.com/framepack-go/framepack/tensor"

// kernels runs the elementwise work around the GEMMs through the Scope's
// optional fused ops; fused says whether they run fused, which decides
// where the projections' biases are added.
type kernels struct{ fused bool }

func kernelsFor(s *tensor.Scope) kernels { return kernels{s.Fused()} }

func must(op string, err error) {
	if err != nil {
		panic(&tensor.OpError{Op: op, Err: err})
	}
}

// lnModulate is LayerNorm(x)·(1 + scale) + shift (no affine, eps 1e-6).
func (ops kernels) lnModulate(s *tensor.Scope, x, shift, scale *tensor.Tensor) *tensor.Tensor {
	return s.LayerNormModulate(x, shift, scale, normEps)
}

// project is l applied to x. With fused kernels the bias is left out of
// the GEMM and returned, for the kernel that reads the result to add (the
// GEMM then neither writes the bias first nor reads it back); op by op the
// result has it and the returned bias is nil.
func (ops kernels) project(s *tensor.Scope, l *linear, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	if !ops.fused {
		return l.forward(s, x), nil
	}
	return l.apply(s, x, nil), l.Bias
}

// gatedAdd is x + (y + bias)·gate with gate (B, 1, D) broadcast over the
// rows; bias (from project) may be nil.
func (ops kernels) gatedAdd(s *tensor.Scope, x, y, bias, gate *tensor.Tensor) *tensor.Tensor {
	return s.GatedAdd(x, y, bias, gate)
}

// geluInPlace is GELU (tanh approximation) of x + bias, into x when fused.
func (ops kernels) geluInPlace(s *tensor.Scope, x, bias *tensor.Tensor) *tensor.Tensor {
	if !ops.fused {
		// A new tensor rather than the columns written back into x.
		if bias != nil {
			x = s.Add(x, bias)
		}
		return s.GELUTanh(x)
	}
	s.ActivateColumns(tensor.OpGELUTanh, x, 0, x, bias, 0, x.Dim(-1))
	return x
}

// geluInto writes GELU(src[..., srcCol:srcCol+n] + bias[srcCol:srcCol+n])
// to dst[..., dstCol:]; bias (one value a column of src) may be nil.
func (ops kernels) geluInto(s *tensor.Scope, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, n int) {
	s.ActivateColumns(tensor.OpGELUTanh, dst, dstCol, src, bias, srcCol, n)
}

// qkvInto takes the q, k, v columns ([0, d), [d, 2d), [2d, 3d)) of the
// projection y (B, Ls, ≥3d) plus bias (one value a column of y, or nil),
// normalises q and k per head, rotates them with the rows [off, off+Ls) of
// the joint RoPE tables cos, sin (R, L, Dh) when cos is not nil, and writes
// all three to rows [off, off+Ls) of the joint q, k, v (B, L, H, Dh).
func (ops kernels) qkvInto(s *tensor.Scope, q, k, v, y, bias *tensor.Tensor, off int, nq, nk *rmsNorm, cos, sin *tensor.Tensor) {
	d := q.Dim(2) * q.Dim(3)
	s.QKNormRoPE(q, k, v, y, bias, off, [3]int{0, d, 2 * d}, nq.Weight, nk.Weight, cos, sin, normEps)
}

// rowRange is rows [start, end) of t (B, L, ...): a view of t's storage for
// batch 1 when the backend can make one (valid while t is), else a copy.
func rowRange(s *tensor.Scope, t *tensor.Tensor, start, end int) *tensor.Tensor {
	if v, ok := rowView(s, t, start, end); ok {
		return v
	}
	return s.Slice(t, 1, start, end)
}

// rowView is rows [start, end) of t (B, L, ...) as a view of t's storage
// (writes land in t), when t has batch 1 and the backend makes views.
func rowView(s *tensor.Scope, t *tensor.Tensor, start, end int) (*tensor.Tensor, bool) {
	return s.ViewRows(t, start, end)
}
