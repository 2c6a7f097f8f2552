package tensor

import (
	"fmt"
	"math"
	"slices"
)

// ---- casts and copies ----

// Cast converts t to dt (t itself when it already is dt).
func (s *Scope) Cast(t *Tensor, dt DType) *Tensor {
	s.check("cast", Invalid, t)
	if t.dtype == dt {
		return t
	}
	out := s.Empty(dt, t.shape...)
	if t.Numel() > 0 {
		s.run("cast", nil, func() error { return s.be.Cast(out, t) })
	}
	return out
}

// Clone copies t.
func (s *Scope) Clone(t *Tensor) *Tensor {
	s.check("clone", Invalid, t)
	out := s.Empty(t.dtype, t.shape...)
	s.copyView(out, 0, ContiguousStrides(out.shape), t, 0, ContiguousStrides(t.shape), t.shape)
	return out
}

func (s *Scope) copyView(dst *Tensor, dOff int, dSt []int, src *Tensor, sOff int, sSt []int, shape []int) {
	if Numel(shape) == 0 {
		return
	}
	s.run("copy", nil, func() error { return s.be.Copy(dst, dOff, dSt, src, sOff, sSt, shape) })
}

// Permute reorders the axes of t (a copy): out axis i is t's axis perm[i].
func (s *Scope) Permute(t *Tensor, perm ...int) *Tensor {
	s.check("permute", Invalid, t)
	if len(perm) != len(t.shape) {
		s.failf("permute", "permutation %v for rank %d", perm, len(t.shape))
	}
	seen := make([]bool, len(perm))
	for _, p := range perm {
		if p < 0 || p >= len(perm) || seen[p] {
			s.failf("permute", "bad permutation %v", perm)
		}
		seen[p] = true
	}
	st, shape := PermutedStrides(t.shape, perm)
	out := s.Empty(t.dtype, shape...)
	s.copyView(out, 0, ContiguousStrides(shape), t, 0, st, shape)
	return out
}

// Transpose swaps two axes (a copy).
func (s *Scope) Transpose(t *Tensor, a, b int) *Tensor {
	r := len(t.shape)
	a, b = axis(a, r), axis(b, r)
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[a], perm[b] = perm[b], perm[a]
	return s.Permute(t, perm...)
}

// Slice takes [start, end) of one axis (a copy). Negative values count from
// the end, as in Python.
func (s *Scope) Slice(t *Tensor, ax, start, end int) *Tensor {
	s.check("slice", Invalid, t)
	ax = axis(ax, len(t.shape))
	n := t.shape[ax]
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	if start < 0 || end > n || start > end {
		s.failf("slice", "[%d:%d] of axis %d with size %d", start, end, ax, n)
	}
	shape := cloneInts(t.shape)
	shape[ax] = end - start
	st := ContiguousStrides(t.shape)
	out := s.Empty(t.dtype, shape...)
	s.copyView(out, 0, ContiguousStrides(shape), t, start*st[ax], st, shape)
	return out
}

// Concat joins tensors along an axis.
func (s *Scope) Concat(ax int, ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		s.failf("concat", "nothing to concatenate")
	}
	s.check("concat", ts[0].dtype, ts...)
	r := len(ts[0].shape)
	ax = axis(ax, r)
	shape := cloneInts(ts[0].shape)
	shape[ax] = 0
	for _, t := range ts {
		if len(t.shape) != r {
			s.failf("concat", "rank %d and %d", r, len(t.shape))
		}
		for i := range t.shape {
			if i != ax && t.shape[i] != ts[0].shape[i] {
				s.failf("concat", "shapes %v and %v differ outside axis %d", ts[0].shape, t.shape, ax)
			}
		}
		shape[ax] += t.shape[ax]
	}
	out := s.Empty(ts[0].dtype, shape...)
	ost := ContiguousStrides(shape)
	off := 0
	for _, t := range ts {
		s.copyView(out, off*ost[ax], ost, t, 0, ContiguousStrides(t.shape), t.shape)
		off += t.shape[ax]
	}
	return out
}

// Split cuts t along an axis into pieces of the given sizes.
func (s *Scope) Split(t *Tensor, ax int, sizes ...int) []*Tensor {
	ax = axis(ax, len(t.shape))
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != t.shape[ax] {
		s.failf("split", "sizes %v do not add up to %d", sizes, t.shape[ax])
	}
	out := make([]*Tensor, len(sizes))
	off := 0
	for i, n := range sizes {
		out[i] = s.Slice(t, ax, off, off+n)
		off += n
	}
	return out
}

// Chunk splits t into n equal pieces along an axis (torch.chunk for
// divisible sizes).
func (s *Scope) Chunk(t *Tensor, n, ax int) []*Tensor {
	ax = axis(ax, len(t.shape))
	if n <= 0 || t.shape[ax]%n != 0 {
		s.failf("chunk", "axis %d of size %d into %d", ax, t.shape[ax], n)
	}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = t.shape[ax] / n
	}
	return s.Split(t, ax, sizes...)
}

// Expand broadcasts size-1 axes of t to shape (a copy).
func (s *Scope) Expand(t *Tensor, shape ...int) *Tensor {
	s.check("expand", Invalid, t)
	st := broadcastStrides("expand", t.shape, shape)
	out := s.Empty(t.dtype, shape...)
	s.copyView(out, 0, ContiguousStrides(shape), t, 0, st, shape)
	return out
}

// ---- elementwise ----

// BroadcastShape is the numpy broadcast of two shapes.
func BroadcastShape(a, b []int) ([]int, error) {
	r := max(len(a), len(b))
	out := make([]int, r)
	for i := 0; i < r; i++ {
		da, db := 1, 1
		if j := len(a) - r + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - r + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %v and %v do not broadcast", a, b)
		}
	}
	return out, nil
}

// broadcastStrides reads a tensor of shape from through out's index space.
func broadcastStrides(op string, from, out []int) []int {
	if len(from) > len(out) {
		panic(&OpError{Op: op, Err: fmt.Errorf("cannot broadcast %v to %v", from, out)})
	}
	st := make([]int, len(out))
	cs := ContiguousStrides(from)
	off := len(out) - len(from)
	for i := range from {
		switch from[i] {
		case out[off+i]:
			st[off+i] = cs[i]
		case 1:
			st[off+i] = 0
		default:
			panic(&OpError{Op: op, Err: fmt.Errorf("cannot broadcast %v to %v", from, out)})
		}
	}
	return st
}

func (s *Scope) binary(op BinaryOp, a, b *Tensor) *Tensor {
	name := op.String()
	s.check(name, a.dtype, a, b)
	shape, err := BroadcastShape(a.shape, b.shape)
	if err != nil {
		s.fail(name, err)
	}
	out := s.Empty(a.dtype, shape...)
	if out.Numel() > 0 {
		as, bs := broadcastStrides(name, a.shape, shape), broadcastStrides(name, b.shape, shape)
		s.run(name, func() Op { return Op{Class: "binary " + name} }, func() error { return s.be.Binary(op, out, a, as, b, bs) })
	}
	return out
}

func (s *Scope) Add(a, b *Tensor) *Tensor     { return s.binary(OpAdd, a, b) }
func (s *Scope) Sub(a, b *Tensor) *Tensor     { return s.binary(OpSub, a, b) }
func (s *Scope) Mul(a, b *Tensor) *Tensor     { return s.binary(OpMul, a, b) }
func (s *Scope) Div(a, b *Tensor) *Tensor     { return s.binary(OpDiv, a, b) }
func (s *Scope) Maximum(a, b *Tensor) *Tensor { return s.binary(OpMax, a, b) }
func (s *Scope) Minimum(a, b *Tensor) *Tensor { return s.binary(OpMin, a, b) }

func (s *Scope) unary(op UnaryOp, t *Tensor, a, b float32) *Tensor {
	s.check(op.String(), Invalid, t)
	if !t.dtype.IsFloat() {
		s.failf(op.String(), "needs a float tensor, have %s", t.dtype)
	}
	out := s.Empty(t.dtype, t.shape...)
	if out.Numel() > 0 {
		s.run(op.String(), func() Op { return Op{Class: "unary " + op.String()} }, func() error { return s.be.Unary(op, out, t, a, b) })
	}
	return out
}

func (s *Scope) Neg(t *Tensor) *Tensor                  { return s.unary(OpNeg, t, 0, 0) }
func (s *Scope) Exp(t *Tensor) *Tensor                  { return s.unary(OpExp, t, 0, 0) }
func (s *Scope) Log(t *Tensor) *Tensor                  { return s.unary(OpLog, t, 0, 0) }
func (s *Scope) Sin(t *Tensor) *Tensor                  { return s.unary(OpSin, t, 0, 0) }
func (s *Scope) Cos(t *Tensor) *Tensor                  { return s.unary(OpCos, t, 0, 0) }
func (s *Scope) Sqrt(t *Tensor) *Tensor                 { return s.unary(OpSqrt, t, 0, 0) }
func (s *Scope) Rsqrt(t *Tensor) *Tensor                { return s.unary(OpRsqrt, t, 0, 0) }
func (s *Scope) Abs(t *Tensor) *Tensor                  { return s.unary(OpAbs, t, 0, 0) }
func (s *Scope) Square(t *Tensor) *Tensor               { return s.unary(OpSquare, t, 0, 0) }
func (s *Scope) SiLU(t *Tensor) *Tensor                 { return s.unary(OpSiLU, t, 0, 0) }
func (s *Scope) GELU(t *Tensor) *Tensor                 { return s.unary(OpGELU, t, 0, 0) }
func (s *Scope) GELUTanh(t *Tensor) *Tensor             { return s.unary(OpGELUTanh, t, 0, 0) }
func (s *Scope) QuickGELU(t *Tensor) *Tensor            { return s.unary(OpQuickGELU, t, 0, 0) }
func (s *Scope) Sigmoid(t *Tensor) *Tensor              { return s.unary(OpSigmoid, t, 0, 0) }
func (s *Scope) Tanh(t *Tensor) *Tensor                 { return s.unary(OpTanh, t, 0, 0) }
func (s *Scope) Recip(t *Tensor) *Tensor                { return s.unary(OpRecip, t, 0, 0) }
func (s *Scope) Scale(t *Tensor, a float32) *Tensor     { return s.unary(OpScale, t, a, 0) }
func (s *Scope) AddScalar(t *Tensor, a float32) *Tensor { return s.unary(OpAddScalar, t, a, 0) }
func (s *Scope) Pow(t *Tensor, a float32) *Tensor       { return s.unary(OpPow, t, a, 0) }
func (s *Scope) Clamp(t *Tensor, lo, hi float32) *Tensor {
	return s.unary(OpClamp, t, lo, hi)
}

// ---- linear algebra ----

// MatMul multiplies the last two axes of a (…, M, K) and b (…, K, N),
// transposing either first when asked. Leading axes must match, or b may be
// 2-D (shared by every batch).
func (s *Scope) MatMul(a, b *Tensor, transA, transB bool) *Tensor {
	return s.ScaledMatMul(a, b, transA, transB, 1)
}

// ScaledMatMul is alpha·MatMul(a, b, transA, transB), the scale applied in
// the GEMM (attention scores without a separate pass).
func (s *Scope) ScaledMatMul(a, b *Tensor, transA, transB bool, alpha float32) *Tensor {
	s.check("matmul", a.dtype, a, b)
	if len(a.shape) < 2 || len(b.shape) < 2 {
		s.failf("matmul", "needs rank ≥ 2, have %v and %v", a.shape, b.shape)
	}
	ra, rb := len(a.shape), len(b.shape)
	m, k := a.shape[ra-2], a.shape[ra-1]
	if transA {
		m, k = k, m
	}
	k2, n := b.shape[rb-2], b.shape[rb-1]
	if transB {
		k2, n = n, k2
	}
	if k != k2 {
		s.failf("matmul", "inner sizes differ: %v and %v (transA %v, transB %v)", a.shape, b.shape, transA, transB)
	}
	batchA := Numel(a.shape[:ra-2])
	batchB := Numel(b.shape[:rb-2])
	if batchB != 1 && !slices.Equal(a.shape[:ra-2], b.shape[:rb-2]) {
		s.failf("matmul", "batch axes differ: %v and %v", a.shape, b.shape)
	}
	shape := append(cloneInts(a.shape[:ra-2]), m, n)
	out := s.Empty(a.dtype, shape...)
	if out.Numel() > 0 {
		p := MatMulParams{Batch: batchA, M: m, N: n, K: k, TransA: transA, TransB: transB, Alpha: alpha}
		s.run("matmul", p.op, func() error { return s.be.MatMul(out, a, b, p) })
	}
	return out
}

// Linear applies x·wᵀ + bias over the last axis of x, as torch.nn.Linear
// with weight w (out, in) and bias (out) or nil.
func (s *Scope) Linear(x, w, bias *Tensor) *Tensor {
	s.check("linear", x.dtype, x, w, bias)
	if len(w.shape) != 2 {
		s.failf("linear", "weight must be 2-D, have %v", w.shape)
	}
	k := x.shape[len(x.shape)-1]
	if w.shape[1] != k {
		s.failf("linear", "input %v does not fit weight %v", x.shape, w.shape)
	}
	if bias != nil && (len(bias.shape) != 1 || bias.shape[0] != w.shape[0]) {
		s.failf("linear", "bias %v does not fit weight %v", bias.shape, w.shape)
	}
	out := s.Empty(x.dtype, linearShape(x, w)...)
	if out.Numel() > 0 {
		m := x.Numel() / max(k, 1)
		describe := func() Op {
			// The blocks' GEMMs (thousands of rows) apart from the embedders'
			// and modulations' small ones.
			o := Op{Class: "linear", Flops: 2 * float64(out.Numel()) * float64(k)}
			if m < 1024 {
				o.Class = "linear (small M)"
			}
			return o
		}
		s.run("linear", describe, func() error { return s.be.Linear(out.Reshape(m, w.shape[0]), x.Reshape(m, k), w, bias) })
	}
	return out
}

// Conv3d is torch's conv3d (groups 1, zero padding).
func (s *Scope) Conv3d(x, w, bias *Tensor, stride, padding [3]int) *Tensor {
	s.check("conv3d", x.dtype, x, w, bias)
	if len(x.shape) != 5 || len(w.shape) != 5 {
		s.failf("conv3d", "input %v and weight %v must be 5-D", x.shape, w.shape)
	}
	if x.shape[1] != w.shape[1] {
		s.failf("conv3d", "input channels %d, weight expects %d", x.shape[1], w.shape[1])
	}
	if bias != nil && bias.Numel() != w.shape[0] {
		s.failf("conv3d", "bias %v for %d output channels", bias.shape, w.shape[0])
	}
	shape := []int{x.shape[0], w.shape[0], 0, 0, 0}
	for i := 0; i < 3; i++ {
		st := max(stride[i], 1)
		stride[i] = st
		n := x.shape[2+i] + 2*padding[i] - w.shape[2+i]
		if n < 0 {
			s.failf("conv3d", "kernel %v larger than padded input %v", w.shape[2:], x.shape[2:])
		}
		shape[2+i] = n/st + 1
	}
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		p := ConvParams{Stride: stride, Padding: padding}
		s.run("conv3d", func() Op { return convOp(out, w, p) }, func() error { return s.be.Conv3d(out, x, w, bias, p) })
	}
	return out
}

// Conv2d is torch's conv2d (groups 1, zero padding) on x (B, C, H, W).
func (s *Scope) Conv2d(x, w, bias *Tensor, stride, padding [2]int) *Tensor {
	if len(x.shape) != 4 || len(w.shape) != 4 {
		s.failf("conv2d", "input %v and weight %v must be 4-D", x.shape, w.shape)
	}
	x5 := x.Reshape(x.shape[0], x.shape[1], 1, x.shape[2], x.shape[3])
	w5 := w.Reshape(w.shape[0], w.shape[1], 1, w.shape[2], w.shape[3])
	y := s.Conv3d(x5, w5, bias, [3]int{1, stride[0], stride[1]}, [3]int{0, padding[0], padding[1]})
	return y.Reshape(y.shape[0], y.shape[1], y.shape[3], y.shape[4])
}

// ---- normalisation ----

func (s *Scope) groupNorm(x, w, b *Tensor, groups int, eps float32, silu bool) *Tensor {
	s.check("group_norm", x.dtype, x, w, b)
	if len(x.shape) < 2 || groups <= 0 || x.shape[1]%groups != 0 {
		s.failf("group_norm", "%d groups for input %v", groups, x.shape)
	}
	if (w != nil && w.Numel() != x.shape[1]) || (b != nil && b.Numel() != x.shape[1]) {
		s.failf("group_norm", "affine parameters do not have %d channels", x.shape[1])
	}
	out := s.Empty(x.dtype, x.shape...)
	if out.Numel() > 0 {
		describe := func() Op {
			if silu {
				return Op{Class: "group_norm+silu"}
			}
			return Op{Class: "group_norm"}
		}
		s.run("group_norm", describe, func() error { return s.be.GroupNorm(out, x, w, b, groups, eps, silu) })
	}
	return out
}

// GroupNorm is torch.nn.GroupNorm over x (B, C, …).
func (s *Scope) GroupNorm(x, w, b *Tensor, groups int, eps float32) *Tensor {
	return s.groupNorm(x, w, b, groups, eps, false)
}

// GroupNormSiLU is SiLU(GroupNorm(x)) in one pass.
func (s *Scope) GroupNormSiLU(x, w, b *Tensor, groups int, eps float32) *Tensor {
	return s.groupNorm(x, w, b, groups, eps, true)
}

// LayerNorm normalises the last axis; w and b may be nil (no affine).
func (s *Scope) LayerNorm(x, w, b *Tensor, eps float32) *Tensor {
	s.check("layer_norm", x.dtype, x, w, b)
	d := x.shape[len(x.shape)-1]
	if (w != nil && w.Numel() != d) || (b != nil && b.Numel() != d) {
		s.failf("layer_norm", "affine parameters do not have %d channels", d)
	}
	out := s.Empty(x.dtype, x.shape...)
	if out.Numel() > 0 {
		s.run("layer_norm", nil, func() error { return s.be.LayerNorm(out, x, w, b, eps) })
	}
	return out
}

// RMSNorm normalises the last axis by its root mean square, then scales by
// w (or not, when w is nil).
func (s *Scope) RMSNorm(x, w *Tensor, eps float32) *Tensor {
	s.check("rms_norm", x.dtype, x, w)
	if w != nil && w.Numel() != x.shape[len(x.shape)-1] {
		s.failf("rms_norm", "weight %v for input %v", w.shape, x.shape)
	}
	out := s.Empty(x.dtype, x.shape...)
	if out.Numel() > 0 {
		s.run("rms_norm", nil, func() error { return s.be.RMSNorm(out, x, w, eps) })
	}
	return out
}

// Softmax over the last axis.
func (s *Scope) Softmax(x *Tensor) *Tensor {
	s.check("softmax", x.dtype, x)
	out := s.Empty(x.dtype, x.shape...)
	if out.Numel() > 0 {
		s.run("softmax", nil, func() error { return s.be.Softmax(out, x) })
	}
	return out
}

// ---- attention and position ----

// Attention runs scaled-dot-product attention on q (B, Lq, Hq, D), k and v
// (B, Lk, Hkv, D), returning (B, Lq, Hq, D).
func (s *Scope) Attention(q, k, v *Tensor, p AttnParams) *Tensor {
	s.check("attention", q.dtype, q, k, v)
	s.check("attention", F32, p.KeyMask, p.Mask)
	if len(q.shape) != 4 || len(k.shape) != 4 || !slices.Equal(k.shape, v.shape) {
		s.failf("attention", "q %v, k %v, v %v: want (B, L, H, D)", q.shape, k.shape, v.shape)
	}
	if q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3] || k.shape[2] == 0 || q.shape[2]%k.shape[2] != 0 {
		s.failf("attention", "q %v does not fit k %v", q.shape, k.shape)
	}
	if p.KeyMask != nil && !slices.Equal(p.KeyMask.shape, []int{q.shape[0], k.shape[1]}) {
		s.failf("attention", "key mask %v, want (%d, %d)", p.KeyMask.shape, q.shape[0], k.shape[1])
	}
	if p.Mask != nil {
		ms := p.Mask.shape
		if len(ms) != 3 || (ms[0] != 1 && ms[0] != q.shape[0]) || ms[1] != q.shape[1] || ms[2] != k.shape[1] {
			s.failf("attention", "mask %v, want (B|1, %d, %d)", ms, q.shape[1], k.shape[1])
		}
	}
	if p.Scale == 0 {
		p.Scale = float32(1 / math.Sqrt(float64(q.shape[3])))
	}
	out := s.Empty(q.dtype, q.shape...)
	if out.Numel() > 0 {
		describe := func() Op {
			return Op{Class: "attention", Flops: 4 * float64(q.shape[0]) * float64(q.shape[1]) * float64(k.shape[1]) * float64(q.shape[2]) * float64(q.shape[3])}
		}
		s.run("attention", describe, func() error { return s.be.Attention(out, q, k, v, p) })
	}
	return out
}

// RoPE rotates interleaved pairs of x (B, L, H, D) by cos and sin (L, D), f32.
func (s *Scope) RoPE(x, cos, sin *Tensor) *Tensor {
	s.check("rope", x.dtype, x)
	s.check("rope", F32, cos, sin)
	if len(x.shape) != 4 || x.shape[3]%2 != 0 {
		s.failf("rope", "input %v: want (B, L, H, D) with even D", x.shape)
	}
	want := []int{x.shape[1], x.shape[3]}
	if !slices.Equal(cos.shape, want) || !slices.Equal(sin.shape, want) {
		s.failf("rope", "cos %v / sin %v, want %v", cos.shape, sin.shape, want)
	}
	out := s.Empty(x.dtype, x.shape...)
	if out.Numel() > 0 {
		s.run("rope", nil, func() error { return s.be.RoPE(out, x, cos, sin) })
	}
	return out
}

// ---- reductions ----

// ReduceLast reduces the last axis (the result drops it).
func (s *Scope) ReduceLast(op ReduceOp, x *Tensor) *Tensor {
	s.check("reduce", x.dtype, x)
	r := len(x.shape)
	if r == 0 || x.shape[r-1] == 0 {
		s.failf("reduce", "empty axis in %v", x.shape)
	}
	k := x.shape[r-1]
	out := s.Empty(x.dtype, x.shape[:r-1]...)
	s.run("reduce", nil, func() error { return s.be.Reduce(op, out.Reshape(out.Numel()), x.Reshape(out.Numel(), k)) })
	return out
}

// Sum, Mean, Max over the last axis.
func (s *Scope) Sum(x *Tensor) *Tensor  { return s.ReduceLast(ReduceSum, x) }
func (s *Scope) Mean(x *Tensor) *Tensor { return s.ReduceLast(ReduceMean, x) }
func (s *Scope) Max(x *Tensor) *Tensor  { return s.ReduceLast(ReduceMax, x) }

// Std is the standard deviation over the last axis (unbiased, as torch.std).
func (s *Scope) Std(x *Tensor) *Tensor { return s.Sqrt(s.ReduceLast(ReduceVarU, x)) }

// MeanAll is the mean of every element, on the host.
func (s *Scope) MeanAll(x *Tensor) float32 {
	return Float32s(s.Cast(s.Mean(x.Reshape(1, x.Numel())), F32))[0]
}

// ---- resampling ----

// Pad pads the trailing axes: before[i] and after[i] apply to axis
// rank−len(before)+i.
func (s *Scope) Pad(x *Tensor, before, after []int, mode PadMode) *Tensor {
	s.check("pad", Invalid, x)
	if len(before) != len(after) || len(before) > len(x.shape) {
		s.failf("pad", "padding %v/%v for %v", before, after, x.shape)
	}
	shape := cloneInts(x.shape)
	off := len(shape) - len(before)
	for i := range before {
		if before[i] < 0 || after[i] < 0 {
			s.failf("pad", "negative padding %v/%v", before, after)
		}
		if mode == PadReplicate && x.shape[off+i] == 0 && before[i]+after[i] > 0 {
			s.failf("pad", "replicate-padding an empty axis")
		}
		shape[off+i] += before[i] + after[i]
	}
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		s.run("pad", nil, func() error { return s.be.Pad(out, x, before, mode) })
	}
	return out
}

// UpsampleNearest repeats the last three axes by scale.
func (s *Scope) UpsampleNearest(x *Tensor, scale [3]int) *Tensor {
	s.check("upsample", Invalid, x)
	shape := s.mapLast3("upsample", x, func(i, n int) int {
		if scale[i] < 1 {
			s.failf("upsample", "scale %v", scale)
		}
		return n * scale[i]
	})
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		s.run("upsample", nil, func() error { return s.be.UpsampleNearest(out, x, scale) })
	}
	return out
}

// mapLast3 is x's shape with each of its last three axes (it must have
// them) i of size n made f(i, n).
func (s *Scope) mapLast3(op string, x *Tensor, f func(i, n int) int) []int {
	r := len(x.shape)
	if r < 3 {
		s.failf(op, "input %v has fewer than 3 axes", x.shape)
	}
	shape := cloneInts(x.shape)
	for i := 0; i < 3; i++ {
		shape[r-3+i] = f(i, shape[r-3+i])
	}
	return shape
}

// AvgPool3d averages kernel-sized cells of the last three axes (stride =
// kernel; the sizes must divide).
func (s *Scope) AvgPool3d(x *Tensor, kernel [3]int) *Tensor {
	s.check("avg_pool3d", Invalid, x)
	shape := s.mapLast3("avg_pool3d", x, func(i, n int) int {
		if kernel[i] < 1 || n%kernel[i] != 0 {
			s.failf("avg_pool3d", "kernel %v does not divide %v", kernel, x.shape)
		}
		return n / kernel[i]
	})
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		s.run("avg_pool3d", nil, func() error { return s.be.AvgPool3d(out, x, kernel) })
	}
	return out
}

// Embedding looks up rows of table (V, D) for ids of any shape (i64/i32).
func (s *Scope) Embedding(table, ids *Tensor) *Tensor {
	s.check("embedding", Invalid, table, ids)
	if ids.dtype != I64 && ids.dtype != I32 {
		s.failf("embedding", "ids must be integers, have %s", ids.dtype)
	}
	if len(table.shape) != 2 {
		s.failf("embedding", "table %v must be 2-D", table.shape)
	}
	shape := append(cloneInts(ids.shape), table.shape[1])
	out := s.Empty(table.dtype, shape...)
	if out.Numel() > 0 {
		s.run("embedding", nil, func() error {
			return s.be.Embedding(out.Reshape(ids.Numel(), table.shape[1]), table, ids.Reshape(ids.Numel()))
		})
	}
	return out
}

func (p MatMulParams) op() Op {
	return Op{Class: "matmul", Flops: 2 * float64(max(p.Batch, 1)) * float64(p.M) * float64(p.N) * float64(p.K)}
}

// convOp names a convolution by channels, kernel and stride for a Hook.
func convOp(dst, w *Tensor, p ConvParams) Op {
	cin, kt := w.shape[1], w.shape[2]
	if p.WeightLast {
		cin, kt = w.shape[4], w.shape[1]
	}
	class := fmt.Sprintf("conv3d %d→%d k%d", cin, w.shape[0], kt)
	if p.Stride != [3]int{1, 1, 1} && p.Stride != [3]int{} {
		class += fmt.Sprintf(" s%v", p.Stride)
	}
	return Op{Class: class, Flops: 2 * float64(dst.Numel()) * float64(w.Numel()/max(w.shape[0], 1))}
}
