package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// Fused kernels for the transformer's elementwise work (kernels/fused.hip).
// They are not part of tensor.Backend: model code finds them by interface
// and falls back to the op-by-op path, which is also their reference.

// LayerNormModulate computes dst = LayerNorm(x)·(1 + scale) + shift for x
// and dst (B, L, D) and shift, scale holding B·D values (one row per batch
// element); the LayerNorm has no affine and f32 statistics.
func (b *Backend) LayerNormModulate(dst, x, shift, scale *tensor.Tensor, eps float32) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || x.DType() != dt || shift.DType() != dt || scale.DType() != dt {
		return unsupported("layer_norm_modulate", dt)
	}
	if x.Rank() != 3 || dst.Numel() != x.Numel() {
		return fmt.Errorf("gpu: layer_norm_modulate of %v into %v", x, dst)
	}
	B, L, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if shift.Numel() != B*D || scale.Numel() != B*D {
		return fmt.Errorf("gpu: layer_norm_modulate of %v with shift %v, scale %v", x, shift, scale)
	}
	if x.Numel() == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, x, shift, scale)
	if err != nil {
		return err
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).I64(int64(L)).I64(int64(D)).F32(eps)
	// Rows of 128·NV vectors stay in registers (one read of x).
	if per := 128 * 16 / dt.Size(); D%per == 0 && aligned(16, ps...) {
		switch nv := D / per; nv {
		case 1, 2, 3, 4, 6, 8:
			if B*L > 1<<31-1 {
				break
			}
			return b.launch("fused", fmt.Sprintf("ln_mod_vec%d_%s", nv, s), hip.Dim3{uint32(B * L)}, hip.Dim3{128}, 0, a)
		}
	}
	return b.rowLaunchIn("fused", "ln_mod_"+s, B*L, a)
}

// rowLaunchIn runs a one-block-per-row kernel of a module.
func (b *Backend) rowLaunchIn(mod, name string, nrows int, a *hip.Args) error {
	if nrows > 1<<31-1 {
		return fmt.Errorf("gpu: %s: %d rows exceed one launch", name, nrows)
	}
	return b.launch(mod, name, hip.Dim3{uint32(nrows)}, hip.Dim3{256}, 0, a)
}

// GatedAdd computes dst = x + (y + bias)·gate for x, y, dst (B, L, D),
// bias (D) or nil and gate holding B·D values; y + bias and the product
// are rounded to the dtype before the sum (y being a GEMM's output whose
// bias is added here).
func (b *Backend) GatedAdd(dst, x, y, bias, gate *tensor.Tensor) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || x.DType() != dt || y.DType() != dt || gate.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("gated_add", dt)
	}
	if x.Rank() != 3 || dst.Numel() != x.Numel() || y.Numel() != x.Numel() {
		return fmt.Errorf("gpu: gated_add of %v and %v into %v", x, y, dst)
	}
	B, L, D := x.Dim(0), x.Dim(1), x.Dim(2)
	if gate.Numel() != B*D || (bias != nil && bias.Numel() != D) {
		return fmt.Errorf("gpu: gated_add of %v with gate %v, bias %v", x, gate, bias)
	}
	n := int64(x.Numel())
	if n == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, x, y, bias, gate)
	if err != nil {
		return err
	}
	e := 16 / dt.Size()
	vec, per := int32(0), 1
	if D%e == 0 && aligned(16, ps...) {
		vec, per = 1, e
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Ptr(ps[4]).I64(n).I64(int64(L) * int64(D)).I64(int64(D)).I32(vec)
	return b.launchLinear("fused", "gated_add_"+s, n, 256, per, a)
}

func aligned(n uintptr, ps ...uintptr) bool {
	for _, p := range ps {
		if p%n != 0 {
			return false
		}
	}
	return true
}

// QKNormRoPE takes the q, k and v columns of src (B, Ls, S), starting at
// the column offsets cols, plus bias (S) when not nil (src being a GEMM's
// output whose bias is added here, the sum rounded), and writes them to rows [rowOff, rowOff+Ls) of
// q, k and v (B, Lj, H, Dh): q and k through RMSNorm over each head with
// the weights wq and wk (Dh; the normalised value rounded before the
// weight multiply) and then, when cos is not nil, RoPE on interleaved
// pairs with cos and sin (R, Lj, Dh) f32, R 1 (shared) or B.
func (b *Backend) QKNormRoPE(q, k, v, src, bias *tensor.Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *tensor.Tensor, eps float32) error {
	dt := q.DType()
	s := floatSuffix(dt)
	if s == "" || k.DType() != dt || v.DType() != dt || src.DType() != dt || wq.DType() != dt || wk.DType() != dt ||
		(bias != nil && bias.DType() != dt) {
		return unsupported("qk_norm_rope", dt)
	}
	if q.Rank() != 4 || k.Numel() != q.Numel() || v.Numel() != q.Numel() || src.Rank() != 3 {
		return fmt.Errorf("gpu: qk_norm_rope of %v into %v", src, q)
	}
	B, Lj, H, Dh := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	Ls, S := src.Dim(1), src.Dim(2)
	if bias != nil && bias.Numel() != S {
		return fmt.Errorf("gpu: qk_norm_rope: bias %v for %d columns", bias, S)
	}
	if src.Dim(0) != B || rowOff < 0 || rowOff+Ls > Lj || Dh%2 != 0 || wq.Numel() != Dh || wk.Numel() != Dh {
		return fmt.Errorf("gpu: qk_norm_rope of %v at row %d into %v (weights %v, %v)", src, rowOff, q, wq, wk)
	}
	for _, c := range cols {
		if c < 0 || c+H*Dh > S {
			return fmt.Errorf("gpu: qk_norm_rope: columns %v of %v for %d heads of %d", cols, src, H, Dh)
		}
	}
	cstride := 0
	if cos != nil {
		if cos.DType() != tensor.F32 || sin == nil || sin.DType() != tensor.F32 || sin.Numel() != cos.Numel() {
			return fmt.Errorf("gpu: qk_norm_rope tables %v, %v: want f32 of one shape", cos, sin)
		}
		switch cos.Numel() {
		case Lj * Dh:
		case B * Lj * Dh:
			cstride = Lj * Dh
		default:
			return fmt.Errorf("gpu: qk_norm_rope tables %v for %d rows of %d", cos, Lj, Dh)
		}
	}
	groups := int64(B) * int64(Ls) * int64(H)
	if groups == 0 {
		return nil
	}
	ps, err := b.ptrs(q, k, v, src, bias, wq, wk, cos, sin)
	if err != nil {
		return err
	}
	st := packInt64s(int64(B), int64(Ls), int64(S), int64(cols[0]), int64(cols[1]), int64(cols[2]), int64(H), int64(Dh),
		int64(Lj), int64(rowOff), int64(cstride))
	st = binary.LittleEndian.AppendUint32(st, math.Float32bits(eps))
	st = binary.LittleEndian.AppendUint32(st, 0)
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Ptr(ps[4]).Ptr(ps[5]).Ptr(ps[6]).Ptr(ps[7]).Ptr(ps[8]).
		Struct(st, 8)
	name := "qkv_norm_rope_" + s
	es := uintptr(dt.Size())
	if Dh == 128 && S%4 == 0 && cols[0]%4 == 0 && cols[1]%4 == 0 && cols[2]%4 == 0 && aligned(4*es, ps[:7]...) &&
		aligned(16, ps[7:]...) {
		name = "qkv_norm_rope128_" + s // 4 channels a lane, vector loads
	}
	return b.launchLinear("fused", name, groups*32, 256, 1, a)
}

// ActivateColumns applies op (tensor.OpGELUTanh or tensor.OpSiLU) to
// columns [srcCol, srcCol+cols) of src, plus bias (one value per column of
// src, the sum rounded) when not nil, and writes them to columns [dstCol,
// dstCol+cols) of dst; both are matrices of the same number of rows (all
// axes but the last). dst may be src.
func (b *Backend) ActivateColumns(op tensor.UnaryOp, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, cols int) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || src.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("activate_columns", dt)
	}
	var code int32
	switch op {
	case tensor.OpGELUTanh:
		code = 0
	case tensor.OpSiLU:
		code = 1
	default:
		return fmt.Errorf("gpu: activate_columns %s: %w", op, tensor.ErrUnsupported)
	}
	if dst.Rank() == 0 || src.Rank() == 0 {
		return fmt.Errorf("gpu: activate_columns of %v into %v", src, dst)
	}
	ws, xs := dst.Dim(-1), src.Dim(-1)
	if ws == 0 || xs == 0 {
		return nil
	}
	rows := dst.Numel() / ws
	if bias != nil && bias.Numel() != xs {
		return fmt.Errorf("gpu: activate_columns: bias %v for %v", bias, src)
	}
	if src.Numel()/xs != rows || dstCol < 0 || srcCol < 0 || cols < 0 || dstCol+cols > ws || srcCol+cols > xs {
		return fmt.Errorf("gpu: activate_columns [%d, +%d) of %v into [%d, …) of %v", srcCol, cols, src, dstCol, dst)
	}
	n := int64(rows) * int64(cols)
	if n == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, src, bias)
	if err != nil {
		return err
	}
	es := uintptr(dt.Size())
	py, px, pb := ps[0]+uintptr(dstCol)*es, ps[1]+uintptr(srcCol)*es, uintptr(0)
	if bias != nil {
		pb = ps[2] + uintptr(srcCol)*es
	}
	e := 16 / dt.Size()
	vec, per := int32(0), 1
	if cols%e == 0 && ws%e == 0 && xs%e == 0 && aligned(16, py, px, pb) {
		vec, per = 1, e
	}
	a := (&hip.Args{}).Ptr(py).Ptr(px).Ptr(pb).I64(int64(rows)).I64(int64(cols)).I64(int64(ws)).I64(int64(xs)).I32(code).I32(vec)
	return b.launchLinear("fused", "act_rows_"+s, n, 256, per, a)
}

// View is n bytes of buf from byte offset off, without a copy: the storage
// of buf, valid while buf is. Never free a view.
func (b *Backend) View(buf tensor.Buffer, off, n int64) (tensor.Buffer, error) {
	db, ok := buf.(*Buffer)
	if !ok {
		return nil, fmt.Errorf("gpu: view of a %T", buf)
	}
	root, _ := db.allocation()
	if db.freed.Load() || root.freed.Load() || off < 0 || n < 0 || off+n > db.n {
		return nil, fmt.Errorf("gpu: view of %d bytes at %d of a %d-byte buffer", n, off, db.n)
	}
	return &Buffer{ptr: db.ptr + uintptr(off), n: n, root: root}, nil
}

// ChannelsLastRMSNorm normalises x (B, P..., C) over its last axis at every
// position (half a warp a row, the row in registers where it fits) into the
// last positions of each of dst's batches (tensor.FusedKernels).
func (b *Backend) ChannelsLastRMSNorm(dst, x, w *tensor.Tensor, eps float32, silu bool) error {
	sfx := floatSuffix(dst.DType())
	if sfx == "" {
		return unsupported("channels_last_rms_norm", dst.DType())
	}
	p, py, err := tensor.CheckChannelsLastNorm(dst, x, w)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if x.Numel() == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, x, w)
	if err != nil {
		return err
	}
	fl := int32(0)
	if silu {
		fl = 1
	}
	c := x.Dim(-1)
	n := int64(x.Dim(0)) * int64(p) // rows
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).I64(int64(c)).I64(int64(p)).I64(int64(py)).I64(n).F32(eps).I32(fl)
	// 16 lanes a row, 16 rows a block (kernels/norm.hip).
	blocks := (n + 15) / 16
	if blocks > 1<<31-1 {
		return fmt.Errorf("gpu: channels_last_rms_norm: %d rows exceed one launch", n)
	}
	return b.launch("norm", fmt.Sprintf("cl_rmsnorm%d_%s", clVectors(dst.DType(), c, ps), sfx), hip.Dim3{uint32(blocks)}, hip.Dim3{256}, 0, a)
}

// clVectors is the register variant of cl_rmsnorm for rows of c channels:
// the fewest 16-byte vectors a lane (of 16) that hold a row, or 0 (the
// element loop) when c is not a whole number of vectors, a pointer is not
// 16-byte aligned or the row needs more than 8.
func clVectors(dt tensor.DType, c int, ptrs []uintptr) int {
	e := 16 / dt.Size()
	if c%e != 0 {
		return 0
	}
	for _, p := range ptrs {
		if p%16 != 0 {
			return 0
		}
	}
	need := (c/e + 15) / 16
	for _, nv := range []int{1, 2, 3, 4, 6, 8} {
		if need <= nv {
			return nv
		}
	}
	return 0
}
