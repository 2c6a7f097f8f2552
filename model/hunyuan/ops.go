package hunyuan

import (
	"os"

	"github.com/framepack-go/framepack/tensor"
)

// fusedKernels are the backend's fused elementwise kernels (backend/gpu
// has them). Without them the same work runs op by op, which is also the
// reference the fused kernels are tested against.
type fusedKernels interface {
	// LayerNormModulate: dst = LayerNorm(x)·(1 + scale) + shift, x (B, L, D),
	// shift and scale B·D values.
	LayerNormModulate(dst, x, shift, scale *tensor.Tensor, eps float32) error
	// GatedAdd: dst = x + (y + bias)·gate, x and y (B, L, D), bias (D) or
	// nil, gate B·D values.
	GatedAdd(dst, x, y, bias, gate *tensor.Tensor) error
	// QKNormRoPE writes the q, k, v columns of src (B, Ls, S) at cols, plus
	// bias (S) or nil, to rows [rowOff, rowOff+Ls) of q, k, v (B, Lj, H,
	// Dh), q and k through the per-head RMSNorms and, when cos is set, RoPE.
	QKNormRoPE(q, k, v, src, bias *tensor.Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *tensor.Tensor, eps float32) error
	// ActivateColumns applies op to columns of src (plus bias, one value a
	// column of src, or nil) into columns of dst.
	ActivateColumns(op tensor.UnaryOp, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, cols int) error
}

// viewer makes a buffer of part of another without a copy (backend/gpu).
type viewer interface {
	View(buf tensor.Buffer, off, n int64) (tensor.Buffer, error)
}

// pinnedUploader has page-locked host memory and uploads that overlap
// compute (backend/gpu): what weight streaming needs.
type pinnedUploader interface {
	AllocPinned(n int64) (*tensor.HostBuffer, error)
	FreePinned(*tensor.HostBuffer) error
	UploadAsync(dst tensor.Buffer, off int64, src []byte) (wait func() error, err error)
}

// find returns the first backend in be's wrapper chain (memory.Backend
// and the like expose Unwrap) that implements T.
func find[T any](be tensor.Backend) (T, bool) {
	for be != nil {
		if f, ok := be.(T); ok {
			return f, true
		}
		u, ok := be.(interface{ Unwrap() tensor.Backend })
		if !ok {
			break
		}
		be = u.Unwrap()
	}
	var zero T
	return zero, false
}

// EnvOpByOp names the environment variable that, set to 1, turns the fused
// kernels off (every op runs as its own kernel; for comparisons).
const EnvOpByOp = "FRAMEPACK_OP_BY_OP"

// kernels runs the elementwise work around the GEMMs: fused when the
// backend has the kernels, op by op otherwise.
type kernels struct{ f fusedKernels }

func kernelsFor(be tensor.Backend) kernels {
	if os.Getenv(EnvOpByOp) == "1" {
		return kernels{}
	}
	f, _ := find[fusedKernels](be)
	return kernels{f}
}

func must(op string, err error) {
	if err != nil {
		panic(&tensor.OpError{Op: op, Err: err})
	}
}

// lnModulate is LayerNorm(x)·(1 + scale) + shift (no affine, eps 1e-6);
// op by op each step rounds to the compute dtype, as the reference.
func (ops kernels) lnModulate(s *tensor.Scope, x, shift, scale *tensor.Tensor) *tensor.Tensor {
	if ops.f == nil || x.Rank() != 3 {
		return modulate(s, s.LayerNorm(x, nil, nil, normEps), shift, scale)
	}
	out := s.Empty(x.DType(), x.Shape()...)
	must("layer_norm_modulate", ops.f.LayerNormModulate(out, x, shift, scale, normEps))
	return out
}

// project is l applied to x. With fused kernels the bias is left out of
// the GEMM and returned, for the kernel that reads the result to add (the
// GEMM then neither writes the bias first nor reads it back); op by op the
// result has it and the returned bias is nil.
func (ops kernels) project(s *tensor.Scope, l *linear, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	if ops.f == nil {
		return l.forward(s, x), nil
	}
	return s.Linear(x, l.Weight, nil), l.Bias
}

// gatedAdd is x + (y + bias)·gate with gate (B, 1, D) broadcast over the
// rows; bias (from project) may be nil.
func (ops kernels) gatedAdd(s *tensor.Scope, x, y, bias, gate *tensor.Tensor) *tensor.Tensor {
	if ops.f == nil || x.Rank() != 3 {
		if bias != nil {
			y = s.Add(y, bias)
		}
		return s.Add(x, s.Mul(y, gate))
	}
	out := s.Empty(x.DType(), x.Shape()...)
	must("gated_add", ops.f.GatedAdd(out, x, y, bias, gate))
	return out
}

// geluInPlace is GELU (tanh approximation) of x + bias, into x when fused.
func (ops kernels) geluInPlace(s *tensor.Scope, x, bias *tensor.Tensor) *tensor.Tensor {
	if ops.f == nil {
		if bias != nil {
			x = s.Add(x, bias)
		}
		return s.GELUTanh(x)
	}
	n := x.Dim(-1)
	must("gelu", ops.f.ActivateColumns(tensor.OpGELUTanh, x, 0, x, bias, 0, n))
	return x
}

// geluInto writes GELU(src[..., srcCol:srcCol+n] + bias[srcCol:srcCol+n])
// to dst[..., dstCol:]; bias (one value a column of src) may be nil.
func (ops kernels) geluInto(s *tensor.Scope, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, n int) {
	if ops.f != nil {
		must("gelu", ops.f.ActivateColumns(tensor.OpGELUTanh, dst, dstCol, src, bias, srcCol, n))
		return
	}
	x := s.Slice(src, -1, srcCol, srcCol+n)
	if bias != nil {
		x = s.Add(x, s.Slice(bias, 0, srcCol, srcCol+n))
	}
	g := s.GELUTanh(x)
	placeColumns(s, dst, dstCol, g)
	s.Free(g)
}

// qkvInto takes the q, k, v columns ([0, d), [d, 2d), [2d, 3d)) of the
// projection y (B, Ls, ≥3d) plus bias (one value a column of y, or nil),
// normalises q and k per head, rotates them with the rows [off, off+Ls) of
// the joint RoPE tables cos, sin (R, L, Dh) when cos is not nil, and writes
// all three to rows [off, off+Ls) of the joint q, k, v (B, L, H, Dh).
func (ops kernels) qkvInto(s *tensor.Scope, q, k, v, y, bias *tensor.Tensor, off int, nq, nk *rmsNorm, cos, sin *tensor.Tensor) {
	d := q.Dim(2) * q.Dim(3)
	if ops.f != nil {
		must("qk_norm_rope", ops.f.QKNormRoPE(q, k, v, y, bias, off, [3]int{0, d, 2 * d}, nq.Weight, nk.Weight, cos, sin, normEps))
		return
	}
	if bias != nil {
		y = s.Add(y, bias)
	}
	b, ls, h := y.Dim(0), y.Dim(1), q.Dim(2)
	part := func(i int) *tensor.Tensor { return s.Slice(y, 2, i*d, (i+1)*d).Reshape(b, ls, h, -1) }
	for i, dst := range []*tensor.Tensor{q, k} {
		x := []*rmsNorm{nq, nk}[i].forward(s, part(i))
		if cos != nil {
			x = ropeRows(s, x, cos, sin, off)
		}
		placeRows(s, dst, off, x)
	}
	placeRows(s, v, off, part(2))
}

// ropeRows rotates x (B, Ls, H, Dh) with rows [off, off+Ls) of the tables
// (R, L, Dh), R 1 or B.
func ropeRows(s *tensor.Scope, x, cos, sin *tensor.Tensor, off int) *tensor.Tensor {
	ls := x.Dim(1)
	rows := func(t *tensor.Tensor, r int) *tensor.Tensor {
		return s.Slice(s.Slice(t, 0, r, r+1), 1, off, off+ls).Reshape(ls, -1)
	}
	if cos.Dim(0) == 1 {
		return s.RoPE(x, rows(cos, 0), rows(sin, 0))
	}
	parts := make([]*tensor.Tensor, x.Dim(0))
	for b := range parts {
		parts[b] = s.RoPE(s.Slice(x, 0, b, b+1), rows(cos, b), rows(sin, b))
	}
	return s.Concat(0, parts...)
}

// placeRows copies src (B, Ls, ...) into rows [off, off+Ls) of dst (B, L,
// ...), the trailing axes the same.
func placeRows(s *tensor.Scope, dst *tensor.Tensor, off int, src *tensor.Tensor) {
	b, l, ls := dst.Dim(0), dst.Dim(1), src.Dim(1)
	inner := dst.Numel() / max(b*l, 1)
	shape := []int{b, ls, inner}
	must("copy", s.Backend().Copy(dst, off*inner, []int{l * inner, inner, 1}, src, 0, []int{ls * inner, inner, 1}, shape))
}

// placeColumns copies src (…, n) into columns [col, col+n) of dst (…, W),
// both with the same rows.
func placeColumns(s *tensor.Scope, dst *tensor.Tensor, col int, src *tensor.Tensor) {
	w, n := dst.Dim(-1), src.Dim(-1)
	rows := src.Numel() / max(n, 1)
	must("copy", s.Backend().Copy(dst, col, []int{w, 1}, src, 0, []int{n, 1}, []int{rows, n}))
}

// rowRange is rows [start, end) of t (B, L, ...): a view of t's storage for
// batch 1 when the backend can make one (valid while t is), else a copy.
func rowRange(s *tensor.Scope, t *tensor.Tensor, start, end int) *tensor.Tensor {
	if t.Dim(0) == 1 {
		inner := int64(t.Numel()/max(t.Dim(1), 1)) * int64(t.DType().Size())
		if buf, ok := viewOf(s.Backend(), t.Buffer(), int64(start)*inner, int64(end-start)*inner); ok {
			shape := t.Shape()
			shape[1] = end - start
			return tensor.Wrap(s.Backend(), buf, t.DType(), shape...)
		}
	}
	return s.Slice(t, 1, start, end)
}

// viewOf is n bytes of buf at off without a copy, when possible.
func viewOf(be tensor.Backend, buf tensor.Buffer, off, n int64) (tensor.Buffer, bool) {
	if hb, ok := buf.(*tensor.HostBuffer); ok {
		return tensor.HostBufferOf(hb.Data()[off : off+n]), true
	}
	if v, ok := find[viewer](be); ok {
		if b, err := v.View(buf, off, n); err == nil {
			return b, true
		}
	}
	return nil, false
}
