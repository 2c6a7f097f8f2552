package tensor

import "fmt"

// The operand checks every backend makes before it runs a kernel, so that
// each gives the same answer to the same bad call. The errors name the op
// and the operands; a backend prefixes its name ("cpu: ", "gpu: ").

// CheckAffine checks an op's per-channel parameters (nil: absent): dtype dt
// and n elements each.
func CheckAffine(op string, dt DType, n int, params ...*Tensor) error {
	for _, t := range params {
		if t == nil {
			continue
		}
		if t.DType() != dt {
			return fmt.Errorf("%s: parameter %v, input %s", op, t, dt)
		}
		if t.Numel() != n {
			return fmt.Errorf("%s: parameter %v for %d channels", op, t, n)
		}
	}
	return nil
}

// CheckChannelsLastNorm checks ChannelsLastRMSNorm's operands and returns
// the positions a batch of x and of dst: x (B, ..., C), dst of x's dtype
// with the same B and C and at least as many positions a batch, w (C) or
// nil.
func CheckChannelsLastNorm(dst, x, w *Tensor) (p, py int, err error) {
	if x.Rank() < 2 || dst.Rank() < 2 || dst.DType() != x.DType() || dst.Dim(0) != x.Dim(0) || dst.Dim(-1) != x.Dim(-1) {
		return 0, 0, fmt.Errorf("channels_last_rms_norm of %v into %v", x, dst)
	}
	bc := x.Dim(0) * x.Dim(-1)
	if bc == 0 {
		return 0, 0, nil
	}
	p, py = x.Numel()/bc, dst.Numel()/bc
	if py < p {
		return 0, 0, fmt.Errorf("channels_last_rms_norm of %v into %v: fewer positions a batch", x, dst)
	}
	return p, py, CheckAffine("channels_last_rms_norm", x.DType(), x.Dim(-1), w)
}

// CheckGroupNorm checks GroupNorm's shapes: x (B, C, …) into dst of as many
// elements, C a multiple of groups, w and b (nil: absent) of C elements in
// x's dtype.
func CheckGroupNorm(dst, x, w, b *Tensor, groups int) error {
	if x.Rank() < 2 || x.Numel() != dst.Numel() || groups <= 0 || x.Dim(1)%groups != 0 {
		return fmt.Errorf("group_norm of %v in %d groups into %v", x, groups, dst)
	}
	return CheckAffine("group_norm", x.DType(), x.Dim(1), w, b)
}

// Rows checks a last-axis op (dst as many elements as x, the same dtype)
// and its per-channel parameters (see CheckAffine), and returns its rows
// and row length (0, 0 for rows of no element).
func Rows(op string, dst, x *Tensor, params ...*Tensor) (n, d int, err error) {
	if x.Rank() == 0 || dst.Numel() != x.Numel() || dst.DType() != x.DType() {
		return 0, 0, fmt.Errorf("%s of %v into %v", op, x, dst)
	}
	d = x.Dim(-1)
	if err := CheckAffine(op, x.DType(), d, params...); err != nil {
		return 0, 0, err
	}
	if d == 0 {
		return 0, 0, nil
	}
	return x.Numel() / d, d, nil
}

// CheckCopy checks Copy's operands: one dtype, and both strided views
// inside their tensors (not checked when shape holds no element).
func CheckCopy(dst *Tensor, dOff int, dSt []int, src *Tensor, sOff int, sSt []int, shape []int) error {
	if dst.DType() != src.DType() {
		return fmt.Errorf("copy of %s into %s", src.DType(), dst.DType())
	}
	if Numel(shape) == 0 {
		return nil
	}
	if err := CheckView(dOff, dSt, shape, dst.Numel()); err != nil {
		return err
	}
	return CheckView(sOff, sSt, shape, src.Numel())
}

// CheckUpsample checks UpsampleNearest's shapes: dst is src in the same
// dtype with its last three dimensions multiplied by scale, each at least 1.
func CheckUpsample(dst, src *Tensor, scale [3]int) error {
	return checkScaled("upsample", src, dst, src, dst, scale, dst.DType() == src.DType())
}

// CheckPad checks Pad's operands: src and dst of one dtype and rank (at
// least 1), before for at most that many trailing axes, a known mode, and
// dst holding src behind before on every axis (replicate mode cannot grow
// an empty axis). It returns the amount added in front of every axis.
func CheckPad(dst, src *Tensor, before []int, mode PadMode) ([]int, error) {
	ds, ss := dst.Shape(), src.Shape()
	if dst.DType() != src.DType() || len(ds) != len(ss) || len(before) > len(ds) || len(ds) == 0 {
		return nil, fmt.Errorf("pad of %v into %v", src, dst)
	}
	if mode != PadZeros && mode != PadReplicate {
		return nil, fmt.Errorf("pad mode %d: %w", mode, ErrUnsupported)
	}
	r := len(ds)
	bf := make([]int, r)
	copy(bf[r-len(before):], before)
	for i := range ds {
		if bf[i] < 0 || ds[i] < ss[i]+bf[i] || (mode == PadReplicate && ss[i] == 0 && ds[i] > 0) {
			return nil, fmt.Errorf("pad of %v into %v with %v in front", src, dst, before)
		}
	}
	return bf, nil
}

// CheckAvgPool3d checks AvgPool3d's shapes: src is dst with its last three
// dimensions multiplied by kernel, each at least 1.
func CheckAvgPool3d(dst, src *Tensor, kernel [3]int) error {
	return checkScaled("avg_pool3d", src, dst, dst, src, kernel, true)
}

// checkScaled checks that big is small with its last three dimensions
// multiplied by f and the others equal.
func checkScaled(op string, src, dst, small, big *Tensor, f [3]int, sameDType bool) error {
	ss, bs := small.Shape(), big.Shape()
	r := len(ss)
	if !sameDType || len(bs) != r || r < 3 {
		return fmt.Errorf("%s of %v into %v", op, src, dst)
	}
	for i := range r {
		k := 1
		if i >= r-3 {
			k = f[i-(r-3)]
		}
		if k < 1 || ss[i]*k != bs[i] {
			return fmt.Errorf("%s of %v by %v into %v", op, src, f, dst)
		}
	}
	return nil
}

// AttnDims are the sizes of an attention call: batch, query and key
// lengths, query and key/value heads, head dimension; and MaskStride, the
// elements between the batches of AttnParams.Mask (0 when one mask serves
// every batch).
type AttnDims struct{ B, Lq, Lk, Hq, Hkv, D, MaskStride int }

// CheckAttention checks Attention's shapes: q (B, Lq, Hq, D) into dst of as
// many elements, k and v (B, Lk, Hkv, D) with Hkv dividing Hq, and p's
// masks (KeyMask f32 (B, Lk); Mask f32 (B|1, Lq, Lk)). It returns the sizes.
func CheckAttention(dst, q, k, v *Tensor, p AttnParams) (AttnDims, error) {
	if q.Rank() != 4 || k.Rank() != 4 || v.Rank() != 4 || dst.Numel() != q.Numel() {
		return AttnDims{}, fmt.Errorf("attention of q %v, k %v, v %v into %v", q, k, v, dst)
	}
	d := AttnDims{B: q.Dim(0), Lq: q.Dim(1), Hq: q.Dim(2), D: q.Dim(3), Lk: k.Dim(1), Hkv: k.Dim(2)}
	if k.Dim(0) != d.B || k.Dim(3) != d.D || v.Dim(0) != d.B || v.Dim(1) != d.Lk || v.Dim(2) != d.Hkv || v.Dim(3) != d.D ||
		d.Hkv == 0 || d.Hq%d.Hkv != 0 {
		return AttnDims{}, fmt.Errorf("attention of q %v with k %v, v %v", q, k, v)
	}
	if p.KeyMask != nil && (p.KeyMask.DType() != F32 || p.KeyMask.Numel() != d.B*d.Lk) {
		return AttnDims{}, fmt.Errorf("attention key mask %v, want f32 (%d, %d)", p.KeyMask, d.B, d.Lk)
	}
	if p.Mask != nil {
		n := p.Mask.Numel()
		if p.Mask.DType() != F32 || (n != d.Lq*d.Lk && n != d.B*d.Lq*d.Lk) {
			return AttnDims{}, fmt.Errorf("attention mask %v, want f32 (B|1, %d, %d)", p.Mask, d.Lq, d.Lk)
		}
		if n == d.B*d.Lq*d.Lk && d.B > 1 {
			d.MaskStride = d.Lq * d.Lk
		}
	}
	return d, nil
}

// Strides checks MatMul's operand sizes against p: dst holds Batch·M·N
// elements, a holds M·K (one matrix for every batch) or Batch·M·K, and b
// K·N or Batch·K·N. It returns a's and b's batch strides in elements, 0 for
// a matrix every batch shares.
func (p MatMulParams) Strides(dst, a, b *Tensor) (sa, sb int, err error) {
	B, M, N, K := p.Batch, p.M, p.N, p.K
	if B < 0 || M < 0 || N < 0 || K < 0 || dst.Numel() != B*M*N {
		return 0, 0, fmt.Errorf("matmul %+v into %v", p, dst)
	}
	stride := func(t *Tensor, rows, cols int) (int, error) {
		switch t.Numel() {
		case rows * cols:
			return 0, nil
		case B * rows * cols:
			return rows * cols, nil
		}
		return 0, fmt.Errorf("matmul %+v: operand %v", p, t)
	}
	if sa, err = stride(a, M, K); err != nil {
		return 0, 0, err
	}
	if sb, err = stride(b, K, N); err != nil {
		return 0, 0, err
	}
	return sa, sb, nil
}

// Scale is the product's factor: Alpha, 1 when unset.
func (p MatMulParams) Scale() float32 {
	if p.Alpha == 0 {
		return 1
	}
	return p.Alpha
}

// CheckEmbedding checks Embedding's operands: table (V, D) in dst's dtype,
// dst of D elements per id, ids I64 or I32. It returns V and D.
func CheckEmbedding(dst, table, ids *Tensor) (V, D int, err error) {
	if dst.DType() != table.DType() || table.Rank() != 2 {
		return 0, 0, fmt.Errorf("embedding of %v into %v", table, dst)
	}
	V, D = table.Dim(0), table.Dim(1)
	if n := ids.Numel(); dst.Numel() != n*D {
		return 0, 0, fmt.Errorf("embedding of %d ids from %v into %v", n, table, dst)
	}
	if ids.DType() != I64 && ids.DType() != I32 {
		return 0, 0, fmt.Errorf("embedding ids of %s: %w", ids.DType(), ErrUnsupported)
	}
	return V, D, nil
}

// CheckBinary checks Binary's operands: one dtype, an op backends run, and
// a and b read through strides aSt and bSt inside them over dst's shape.
// It returns the shape and strides to run, a 0-d dst as one element; the
// shape is nil when dst holds no element.
func CheckBinary(op BinaryOp, dst, a *Tensor, aSt []int, b *Tensor, bSt []int) (shape, as, bs []int, err error) {
	dt := dst.DType()
	if a.DType() != dt || b.DType() != dt {
		return nil, nil, nil, fmt.Errorf("%s of %s and %s into %s", op, a.DType(), b.DType(), dt)
	}
	if op > OpMin {
		return nil, nil, nil, fmt.Errorf("binary %s: %w", op, ErrUnsupported)
	}
	if dst.Numel() == 0 {
		return nil, nil, nil, nil
	}
	shape = dst.Shape()
	if len(shape) == 0 {
		shape, aSt, bSt = []int{1}, []int{0}, []int{0}
	}
	if err := CheckView(0, aSt, shape, a.Numel()); err != nil {
		return nil, nil, nil, err
	}
	if err := CheckView(0, bSt, shape, b.Numel()); err != nil {
		return nil, nil, nil, err
	}
	return shape, aSt, bSt, nil
}

// CheckLinear checks Linear's shapes: x (M, K), w (N, K), bias (nil:
// absent) of N elements, dst (M, N). It returns M, K and N.
func CheckLinear(dst, x, w, bias *Tensor) (M, K, N int, err error) {
	if x.Rank() != 2 || w.Rank() != 2 || dst.Rank() != 2 {
		return 0, 0, 0, fmt.Errorf("linear wants 2-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	M, K, N = x.Dim(0), x.Dim(1), w.Dim(0)
	if w.Dim(1) != K || dst.Dim(0) != M || dst.Dim(1) != N || (bias != nil && bias.Numel() != N) {
		return 0, 0, 0, fmt.Errorf("linear of %v by %v (bias %v) into %v", x, w, bias, dst)
	}
	return M, K, N, nil
}
