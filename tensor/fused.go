package tensor

import "slices"

// Optional ops: each runs the backend's capability (FusedKernels,
// PaddedConv) when the backend has it, and the same work op by op
// otherwise, with the same checks either way. The op-by-op form is the
// reference the fused kernels are tested against; each of its steps rounds
// to the compute dtype, as PyTorch does.

// Fused reports whether the fused kernels run: the backend has them and
// the scope's settings do not ask for op by op. A caller that arranges its
// work differently for them (a GEMM that leaves its bias to the kernel that
// reads its result) asks this.
func (s *Scope) Fused() bool {
	_, ok := s.fused()
	return ok
}

func (s *Scope) fused() (FusedKernels, bool) {
	if s.st.OpByOp {
		return nil, false
	}
	return As[FusedKernels](s.be)
}

// ChildWith starts a nested scope with other settings (its hook, op by op)
// on the same backend.
func (s *Scope) ChildWith(st Settings) *Scope {
	c := s.Child()
	c.st = st
	return c
}

// LayerNormModulate is LayerNorm(x)·(1 + scale) + shift without an affine,
// x (B, L, D), shift and scale (B, 1, D).
func (s *Scope) LayerNormModulate(x, shift, scale *Tensor, eps float32) *Tensor {
	s.check("layer_norm_modulate", x.dtype, x, shift, scale)
	f, ok := s.fused()
	if !ok || len(x.shape) != 3 {
		norm := s.LayerNorm(x, nil, nil, eps)
		return s.Add(s.Mul(norm, s.AddScalar(scale, 1)), shift)
	}
	s.needBD("layer_norm_modulate", x, shift, scale)
	out := s.Empty(x.dtype, x.shape...)
	s.run("layer_norm_modulate", fusedOp("layer_norm_modulate"), func() error { return f.LayerNormModulate(out, x, shift, scale, eps) })
	return out
}

// GatedAdd is x + (y + bias)·gate, x and y (B, L, D), bias (D) or nil, gate
// (B, 1, D).
func (s *Scope) GatedAdd(x, y, bias, gate *Tensor) *Tensor {
	s.check("gated_add", x.dtype, x, y, bias, gate)
	f, ok := s.fused()
	if !ok || len(x.shape) != 3 {
		if bias != nil {
			y = s.Add(y, bias)
		}
		return s.Add(x, s.Mul(y, gate))
	}
	if !slices.Equal(x.shape, y.shape) || (bias != nil && bias.Numel() != x.shape[2]) {
		s.failf("gated_add", "x %v, y %v, bias %v", x.shape, y.shape, shapeOf(bias))
	}
	s.needBD("gated_add", x, gate)
	out := s.Empty(x.dtype, x.shape...)
	s.run("gated_add", fusedOp("gated_add"), func() error { return f.GatedAdd(out, x, y, bias, gate) })
	return out
}

// ChannelsLastRMSNorm normalises x (B, ..., C) over its last axis, the
// channels, at every position with weight w (C) or nil, then SiLU when
// silu (Wan's RMS_norm on channels-last activations).
func (s *Scope) ChannelsLastRMSNorm(x, w *Tensor, eps float32, silu bool) *Tensor {
	s.check("channels_last_rms_norm", x.dtype, x, w)
	if len(x.shape) < 2 || (w != nil && w.Numel() != x.shape[len(x.shape)-1]) {
		s.failf("channels_last_rms_norm", "x %v, weight %v: want x (B, ..., C) and weight (C)", x.shape, shapeOf(w))
	}
	f, ok := s.fused()
	if !ok {
		out := s.RMSNorm(x, w, eps)
		if silu {
			a := s.SiLU(out)
			s.Free(out)
			out = a
		}
		return out
	}
	out := s.Empty(x.dtype, x.shape...)
	s.run("channels_last_rms_norm", fusedOp("channels_last_rms_norm"), func() error { return f.ChannelsLastRMSNorm(out, x, w, eps, silu) })
	return out
}

// ChannelsLastRMSNormAfter is Concat(1, front, ChannelsLastRMSNorm(x, w,
// eps, silu)) without copying the norm's output: the fused kernel writes it
// behind front's frames (front and x (B, F|T, ..., C) alike but for axis 1;
// front nil is none). A causal convolution's cached frames go in front of
// its input so.
func (s *Scope) ChannelsLastRMSNormAfter(front, x, w *Tensor, eps float32, silu bool) *Tensor {
	if front == nil {
		return s.ChannelsLastRMSNorm(x, w, eps, silu)
	}
	s.check("channels_last_rms_norm", x.dtype, front, x, w)
	f, ok := s.fused()
	if !ok || len(x.shape) < 3 {
		y := s.ChannelsLastRMSNorm(x, w, eps, silu)
		out := s.Concat(1, front, y)
		s.Free(y)
		return out
	}
	if len(front.shape) != len(x.shape) || front.shape[0] != x.shape[0] || !slices.Equal(front.shape[2:], x.shape[2:]) {
		s.failf("channels_last_rms_norm", "front %v for x %v: want alike but for axis 1", front.shape, x.shape)
	}
	shape := cloneInts(x.shape)
	shape[1] += front.shape[1]
	out := s.Empty(x.dtype, shape...)
	// front's frames of every batch, rows of F·rest into rows of (F+T)·rest.
	b := x.shape[0]
	fr := front.Numel() / max(b, 1)
	s.copyView(out, 0, []int{out.Numel() / max(b, 1), 1}, front, 0, []int{fr, 1}, []int{b, fr})
	s.run("channels_last_rms_norm", fusedOp("channels_last_rms_norm"), func() error { return f.ChannelsLastRMSNorm(out, x, w, eps, silu) })
	return out
}

// ChannelsLastRMSNormInto is ChannelsLastRMSNorm(x, w, eps, silu) written
// into dst, of x's shape and dtype (a view of a larger tensor, such as a
// frame of a causal convolution's cached frames).
func (s *Scope) ChannelsLastRMSNormInto(dst, x, w *Tensor, eps float32, silu bool) {
	s.check("channels_last_rms_norm", x.dtype, dst, x, w)
	if !slices.Equal(dst.shape, x.shape) {
		s.failf("channels_last_rms_norm", "into %v for x %v", dst.shape, x.shape)
	}
	if f, ok := s.fused(); ok {
		if len(x.shape) < 2 || (w != nil && w.Numel() != x.shape[len(x.shape)-1]) {
			s.failf("channels_last_rms_norm", "x %v, weight %v: want x (B, ..., C) and weight (C)", x.shape, shapeOf(w))
		}
		s.run("channels_last_rms_norm", fusedOp("channels_last_rms_norm"), func() error { return f.ChannelsLastRMSNorm(dst, x, w, eps, silu) })
		return
	}
	y := s.ChannelsLastRMSNorm(x, w, eps, silu)
	st := ContiguousStrides(y.shape)
	s.copyView(dst, 0, st, y, 0, st, y.shape)
	s.Free(y)
}

// needBD checks that each of vs holds B·D values for x (B, L, D).
func (s *Scope) needBD(op string, x *Tensor, vs ...*Tensor) {
	for _, v := range vs {
		if v.Numel() != x.shape[0]*x.shape[2] {
			s.failf(op, "%v for x %v: want (B, 1, D)", v.shape, x.shape)
		}
	}
}

// QKNormRoPE writes the q, k and v columns (at cols) of src (B, Ls, S) plus
// bias (S) or nil to rows [rowOff, rowOff+Ls) of q, k, v (B, L, H, Dh): q
// and k through the per-head RMSNorms wq, wk (Dh) and, when cos is not
// nil, RoPE with rows [rowOff, rowOff+Ls) of cos, sin (R, L, Dh), R 1 or B.
func (s *Scope) QKNormRoPE(q, k, v, src, bias *Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *Tensor, eps float32) {
	s.check("qk_norm_rope", src.dtype, q, k, v, src, bias, wq, wk)
	s.check("qk_norm_rope", F32, cos, sin)
	if len(q.shape) != 4 || !slices.Equal(q.shape, k.shape) || !slices.Equal(q.shape, v.shape) || len(src.shape) != 3 ||
		src.shape[0] != q.shape[0] || rowOff < 0 || rowOff+src.shape[1] > q.shape[1] {
		s.failf("qk_norm_rope", "q %v, k %v, v %v, src %v at row %d", q.shape, k.shape, v.shape, src.shape, rowOff)
	}
	d := q.shape[2] * q.shape[3]
	for _, c := range cols {
		if c < 0 || c+d > src.shape[2] {
			s.failf("qk_norm_rope", "columns %v of %d for %d", cols, src.shape[2], d)
		}
	}
	if f, ok := s.fused(); ok {
		s.run("qk_norm_rope", fusedOp("qk_norm_rope"), func() error {
			return f.QKNormRoPE(q, k, v, src, bias, rowOff, cols, wq, wk, cos, sin, eps)
		})
		return
	}
	y := src
	if bias != nil {
		y = s.Add(y, bias)
	}
	b, ls, h := y.shape[0], y.shape[1], q.shape[2]
	part := func(i int) *Tensor { return s.Slice(y, 2, cols[i], cols[i]+d).Reshape(b, ls, h, -1) }
	for i, dst := range []*Tensor{q, k} {
		x := s.RMSNorm(part(i), []*Tensor{wq, wk}[i], eps)
		if cos != nil {
			x = s.ropeRows(x, cos, sin, rowOff)
		}
		s.PlaceRows(dst, rowOff, x)
	}
	s.PlaceRows(v, rowOff, part(2))
}

// ropeRows rotates x (B, Ls, H, Dh) with rows [off, off+Ls) of the tables
// (R, L, Dh), R 1 or B.
func (s *Scope) ropeRows(x, cos, sin *Tensor, off int) *Tensor {
	ls := x.shape[1]
	rows := func(t *Tensor, r int) *Tensor {
		return s.Slice(s.Slice(t, 0, r, r+1), 1, off, off+ls).Reshape(ls, -1)
	}
	if cos.shape[0] == 1 {
		return s.RoPE(x, rows(cos, 0), rows(sin, 0))
	}
	parts := make([]*Tensor, x.shape[0])
	for b := range parts {
		parts[b] = s.RoPE(s.Slice(x, 0, b, b+1), rows(cos, b), rows(sin, b))
	}
	return s.Concat(0, parts...)
}

// ActivateColumns writes op(src[…, srcCol:srcCol+n] + bias[srcCol:srcCol+n])
// to dst[…, dstCol:dstCol+n]; bias (one value a column of src) may be nil,
// dst and src have the same rows, and dst may be src (in place).
func (s *Scope) ActivateColumns(op UnaryOp, dst *Tensor, dstCol int, src, bias *Tensor, srcCol, n int) {
	s.check("activate_columns", dst.dtype, dst, src, bias)
	if len(dst.shape) == 0 || len(src.shape) == 0 || dst.Numel()/max(dst.Dim(-1), 1) != src.Numel()/max(src.Dim(-1), 1) ||
		dstCol < 0 || srcCol < 0 || n < 0 || dstCol+n > dst.Dim(-1) || srcCol+n > src.Dim(-1) ||
		(bias != nil && bias.Numel() != src.Dim(-1)) {
		s.failf("activate_columns", "dst %v at %d, src %v at %d, %d columns, bias %v", dst.shape, dstCol, src.shape, srcCol, n, shapeOf(bias))
	}
	if f, ok := s.fused(); ok {
		s.run("activate_columns", fusedOp(op.String()), func() error { return f.ActivateColumns(op, dst, dstCol, src, bias, srcCol, n) })
		return
	}
	x := s.Slice(src, -1, srcCol, srcCol+n)
	if bias != nil {
		x = s.Add(x, s.Slice(bias, 0, srcCol, srcCol+n))
	}
	y := s.unary(op, x, 0, 0)
	s.PlaceColumns(dst, dstCol, y)
	s.Free(y)
}

func fusedOp(name string) func() Op { return func() Op { return Op{Class: "fused " + name} } }

func shapeOf(t *Tensor) []int {
	if t == nil {
		return nil
	}
	return t.shape
}

// PlaceRows copies src (B, Ls, …) into rows [off, off+Ls) of dst (B, L, …),
// the trailing axes the same size.
func (s *Scope) PlaceRows(dst *Tensor, off int, src *Tensor) {
	s.check("copy", dst.dtype, dst, src)
	if len(dst.shape) < 2 || len(src.shape) < 2 || dst.shape[0] != src.shape[0] || off < 0 || off+src.shape[1] > dst.shape[1] ||
		Numel(dst.shape[2:]) != Numel(src.shape[2:]) {
		s.failf("copy", "rows of %v into %v at %d", src.shape, dst.shape, off)
	}
	b, l, ls := dst.shape[0], dst.shape[1], src.shape[1]
	inner := Numel(dst.shape[2:])
	s.copyView(dst, off*inner, []int{l * inner, inner, 1}, src, 0, []int{ls * inner, inner, 1}, []int{b, ls, inner})
}

// PlaceColumns copies src (…, n) into columns [col, col+n) of dst (…, W),
// both with the same rows.
func (s *Scope) PlaceColumns(dst *Tensor, col int, src *Tensor) {
	s.check("copy", dst.dtype, dst, src)
	if len(dst.shape) == 0 || len(src.shape) == 0 {
		s.failf("copy", "columns of %v into %v", src.shape, dst.shape)
	}
	w, n := dst.Dim(-1), src.Dim(-1)
	rows := src.Numel() / max(n, 1)
	if col < 0 || col+n > w || dst.Numel()/max(w, 1) != rows {
		s.failf("copy", "columns of %v into %v at %d", src.shape, dst.shape, col)
	}
	s.copyView(dst, col, []int{w, 1}, src, 0, []int{n, 1}, []int{rows, n})
}

// Conv3dPadded is Conv3d (no padding of its own) on the input pad makes
// from x: a backend that is a PaddedConv reads x through the padding,
// others get the padded copy made here. With consume, x is freed (when the
// scope owns it) as soon as it is no longer needed — before the
// convolution when a copy is made — so the copy and x are not both held
// through the convolution.
func (s *Scope) Conv3dPadded(x, w, bias *Tensor, stride [3]int, pad Padding, consume bool) *Tensor {
	s.check("conv3d", x.dtype, x, w, bias)
	if len(x.shape) != 5 || len(w.shape) != 5 || x.shape[1] != w.shape[1] {
		s.failf("conv3d", "input %v %s for weight %v %s", x.shape, x.dtype, w.shape, w.dtype)
	}
	for i := 0; i < 3; i++ {
		if pad.Before[i] < 0 || pad.After[i] < 0 || pad.Upsample[i] < 0 {
			s.failf("conv3d", "negative padding %v/%v or upsample %v", pad.Before, pad.After, pad.Upsample)
		}
	}
	pc, ok := As[PaddedConv](s.be)
	if !ok {
		in := s.materialize(x, pad)
		if consume {
			s.Free(x)
		}
		y := s.Conv3d(in, w, bias, stride, [3]int{})
		s.Free(in)
		return y
	}
	in := pad.Shape(x.shape)
	shape := []int{x.shape[0], w.shape[0], 0, 0, 0}
	for i := 0; i < 3; i++ {
		stride[i] = max(stride[i], 1)
		n := in[2+i] - w.shape[2+i]
		if n < 0 {
			s.failf("conv3d", "kernel %v larger than padded input %v", w.shape[2:], in[2:])
		}
		shape[2+i] = n/stride[i] + 1
	}
	out := s.Empty(x.dtype, shape...)
	if out.Numel() > 0 {
		p := ConvParams{Stride: stride}
		s.run("conv3d", func() Op { return convOp(out, w, p) }, func() error { return pc.Conv3dPadded(out, x, w, bias, p, pad) })
	}
	if consume {
		s.Free(x)
	}
	return out
}

// Conv3dLast is Conv3d on channels-last tensors: x (B, T, H, W, Cin) and
// the result (B, To, Ho, Wo, Cout), w (Cout, Cin, kT, kH, kW) as
// checkpoints hold it, padded with zeros as pad says (a replicate mode or
// an upsample is refused). A backend that is a ChannelsLastConv convolves x as it is and pads
// what is symmetric itself; the rest of the padding is a padded copy made
// here. Other backends get x moved channels-first and back. With consume, x
// is freed (when the scope owns it) as soon as it is no longer needed.
func (s *Scope) Conv3dLast(x, w, bias *Tensor, stride [3]int, pad Padding, consume bool) *Tensor {
	return s.conv3dLast(nil, x, w, false, bias, stride, pad, consume)
}

// Conv3dLastAdd adds Conv3dLast(x, w, bias, stride, pad) to y, whose shape
// is the convolution's: a convolution summed over parts of its input (the
// temporal taps of a causal convolution applied to frames held apart). A
// ChannelsLastConv backend adds it as it convolves.
func (s *Scope) Conv3dLastAdd(y, x, w, bias *Tensor, stride [3]int, pad Padding) {
	s.check("conv3d", x.dtype, y, x, w, bias)
	s.conv3dLast(y, x, w, false, bias, stride, pad, false)
}

// Conv3dLastPacked is Conv3dLast with w packed channels-last, (Cout, kT,
// kH, kW, Cin): the order the vendor libraries convolve channels-last
// tensors with, so a model that keeps its weights so needs no packed copy
// of them (backends without ChannelsLastConv get a channels-first copy).
func (s *Scope) Conv3dLastPacked(x, w, bias *Tensor, stride [3]int, pad Padding, consume bool) *Tensor {
	return s.conv3dLast(nil, x, w, true, bias, stride, pad, consume)
}

// Conv3dLastAddPacked is Conv3dLastAdd with w packed as in
// Conv3dLastPacked.
func (s *Scope) Conv3dLastAddPacked(y, x, w, bias *Tensor, stride [3]int, pad Padding) {
	s.check("conv3d", x.dtype, y, x, w, bias)
	s.conv3dLast(y, x, w, true, bias, stride, pad, false)
}

// conv3dLast is Conv3dLast, into a new tensor (y nil) or added to y, with w
// as checkpoints hold it or packed.
func (s *Scope) conv3dLast(y, x, w *Tensor, packed bool, bias *Tensor, stride [3]int, pad Padding, consume bool) *Tensor {
	s.check("conv3d", x.dtype, x, w, bias)
	if len(x.shape) != 5 || len(w.shape) != 5 {
		s.failf("conv3d", "channels-last input %v %s for weight %v %s", x.shape, x.dtype, w.shape, w.dtype)
	}
	cin, kernel := w.shape[1], w.shape[2:5]
	if packed {
		cin, kernel = w.shape[4], w.shape[1:4]
	}
	if x.shape[4] != cin {
		s.failf("conv3d", "channels-last input %v %s for weight %v %s (packed %v)", x.shape, x.dtype, w.shape, w.dtype, packed)
	}
	if bias != nil && bias.Numel() != w.shape[0] {
		s.failf("conv3d", "bias %v for %d output channels", bias.shape, w.shape[0])
	}
	if pad.Mode != PadZeros || pad.upsamples() {
		s.failf("conv3d", "channels-last convolution pads with zeros only, without an upsample")
	}
	var sym [3]int
	var before, after [4]int // T, H, W, C of x
	extra := false
	for i := 0; i < 3; i++ {
		if pad.Before[i] < 0 || pad.After[i] < 0 {
			s.failf("conv3d", "negative padding %v/%v", pad.Before, pad.After)
		}
		sym[i] = min(pad.Before[i], pad.After[i])
		before[i], after[i] = pad.Before[i]-sym[i], pad.After[i]-sym[i]
		extra = extra || before[i] > 0 || after[i] > 0
		stride[i] = max(stride[i], 1)
	}
	shape := []int{x.shape[0], 0, 0, 0, w.shape[0]}
	for i := 0; i < 3; i++ {
		n := x.shape[1+i] + pad.Before[i] + pad.After[i] - kernel[i]
		if n < 0 {
			s.failf("conv3d", "kernel %v larger than padded input %v", kernel, x.shape[1:4])
		}
		shape[1+i] = n/stride[i] + 1
	}
	if y != nil && !slices.Equal(y.shape, shape) {
		s.failf("conv3d", "adding a convolution %v to %v", shape, y.shape)
	}
	in := x
	if extra {
		in = s.Pad(x, before[:], after[:], PadZeros)
		if consume {
			s.Free(x)
		}
	}
	p := ConvParams{Stride: stride, Padding: sym, Accumulate: y != nil, WeightLast: packed}
	out := y
	if cl, ok := As[ChannelsLastConv](s.be); ok {
		if out == nil {
			out = s.Empty(x.dtype, shape...)
		}
		if out.Numel() > 0 {
			s.run("conv3d", func() Op { return convOp(out, w, p) }, func() error { return cl.Conv3dLast(out, in, w, bias, p) })
		}
	} else {
		wf := w
		if packed {
			wf = s.Permute(w, 0, 4, 1, 2, 3)
		}
		first := s.Permute(in, 0, 4, 1, 2, 3)
		c := s.Conv3d(first, wf, bias, stride, sym)
		s.Free(first)
		if wf != w {
			s.Free(wf)
		}
		last := s.Permute(c, 0, 2, 3, 4, 1)
		s.Free(c)
		if out == nil {
			out = last
		} else {
			if out.Numel() > 0 {
				st := ContiguousStrides(out.shape)
				s.run("add", func() Op { return Op{Class: "binary add"} }, func() error { return s.be.Binary(OpAdd, out, out, st, last, st) })
			}
			s.Free(last)
		}
	}
	if in != x {
		s.Free(in)
	} else if consume {
		s.Free(x)
	}
	return out
}

// materialize is the input pad makes from x, as scope ops.
func (s *Scope) materialize(x *Tensor, pad Padding) *Tensor {
	src := x
	if pad.upsamples() {
		src = s.causalUpsample(x, pad)
	}
	out := s.Pad(src, pad.Before[:], pad.After[:], pad.Mode)
	if src != x {
		s.Free(src)
	}
	return out
}

// causalUpsample repeats x (nearest) by pad.Upsample; with CausalFirst the
// first frame only spatially.
func (s *Scope) causalUpsample(x *Tensor, pad Padding) *Tensor {
	ft, fh, fw := max(pad.Upsample[0], 1), max(pad.Upsample[1], 1), max(pad.Upsample[2], 1)
	if !pad.CausalFirst || ft == 1 || x.shape[2] == 1 {
		if pad.CausalFirst {
			ft = 1
		}
		return s.UpsampleNearest(x, [3]int{ft, fh, fw})
	}
	sp := s.UpsampleNearest(x, [3]int{1, fh, fw})
	first := s.Slice(sp, 2, 0, 1)
	rest := s.UpsampleNearest(s.Slice(sp, 2, 1, sp.shape[2]), [3]int{ft, 1, 1})
	s.Free(sp)
	out := s.Concat(2, first, rest)
	s.Free(first, rest)
	return out
}
