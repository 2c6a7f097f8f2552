package gpu

import (
	"fmt"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// ---- normalisation ----

func (b *Backend) GroupNorm(dst, x, w, bias *tensor.Tensor, groups int, eps float32, silu bool) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || x.DType() != dt {
		return unsupported("group_norm", dt)
	}
	if err := tensor.CheckGroupNorm(dst, x, w, bias, groups); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	B, C := x.Dim(0), x.Dim(1)
	if x.Numel() == 0 {
		return nil
	}
	S := x.Numel() / (B * C)
	gsize := int64(C/groups) * int64(S)
	chunk := int64(16384)
	nchunks := (gsize + chunk - 1) / chunk
	BG := int64(B * groups)
	if nchunks > 65535*64 || BG > 65535 {
		return fmt.Errorf("gpu: group_norm of %v: %w", x, tensor.ErrUnsupported)
	}
	p, err := b.ptrs(dst, x, w, bias)
	if err != nil {
		return err
	}
	pd, px, pw, pb := p[0], p[1], p[2], p[3]
	part, err := b.alloc.alloc(BG * nchunks * 3 * 4)
	if err != nil {
		return err
	}
	defer b.alloc.free(part)
	stats, err := b.alloc.alloc(BG * 2 * 4)
	if err != nil {
		return err
	}
	defer b.alloc.free(stats)
	a := (&hip.Args{}).Ptr(px).Ptr(part.ptr).I64(gsize).I64(chunk)
	if err := b.launch("norm", "gn_stats_"+s, hip.Dim3{uint32(nchunks), uint32(BG)}, hip.Dim3{256}, 0, a); err != nil {
		return err
	}
	a = (&hip.Args{}).Ptr(part.ptr).Ptr(stats.ptr).I64(BG).I64(nchunks).F32(eps)
	if err := b.launchLinear("norm", "gn_finalize", BG, 256, 1, a); err != nil {
		return err
	}
	n := int64(x.Numel())
	sl := int32(0)
	if silu {
		sl = 1
	}
	e := 16 / dt.Size()
	vec, per := int32(0), 1
	if S%e == 0 {
		vec, per = 1, e
	}
	a = (&hip.Args{}).Ptr(pd).Ptr(px).Ptr(pw).Ptr(pb).Ptr(stats.ptr).I64(n).I64(int64(S)).I64(int64(C)).I64(int64(groups)).
		I32(sl).I32(vec)
	return b.launchLinear("norm", "gn_apply_"+s, n, 256, per, a)
}

// rowOp checks a last-axis op with its per-channel parameters (nil:
// absent) and returns its kernels' dtype suffix, its rows and row length.
func rowOp(op string, dst, x *tensor.Tensor, params ...*tensor.Tensor) (s string, n, d int, err error) {
	s = floatSuffix(dst.DType())
	if s == "" {
		return "", 0, 0, unsupported(op, dst.DType())
	}
	n, d, err = tensor.Rows(op, dst, x, params...)
	if err != nil {
		return "", 0, 0, fmt.Errorf("gpu: %w", err)
	}
	return s, n, d, nil
}

// shortRow is the longest row the 32-lanes-per-row kernels take.
const shortRow = 1024

// shortRows runs a 32-lanes-per-row kernel (8 rows per block).
func (b *Backend) shortRows(name string, nrows int, a *hip.Args) error {
	return b.launchLinear("norm", name, int64(nrows)*32, 256, 1, a)
}

// rowLaunch runs a one-block-per-row kernel.
func (b *Backend) rowLaunch(name string, nrows int, a *hip.Args) error {
	if nrows == 0 {
		return nil
	}
	if nrows > 1<<31-1 {
		return fmt.Errorf("gpu: %s: %d rows exceed one launch", name, nrows)
	}
	return b.launch("norm", name, hip.Dim3{uint32(nrows)}, hip.Dim3{256}, 0, a)
}

func (b *Backend) LayerNorm(dst, x, w, bias *tensor.Tensor, eps float32) error {
	s, n, d, err := rowOp("layer_norm", dst, x, w, bias)
	if err != nil {
		return err
	}
	ps, err := b.ptrs(dst, x, w, bias)
	if err != nil {
		return err
	}
	if d <= shortRow {
		a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).I64(int64(n)).I64(int64(d)).F32(eps)
		return b.shortRows("layernorm_rows_"+s, n, a)
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).I64(int64(d)).F32(eps)
	return b.rowLaunch("layernorm_"+s, n, a)
}

func (b *Backend) RMSNorm(dst, x, w *tensor.Tensor, eps float32) error {
	s, n, d, err := rowOp("rms_norm", dst, x, w)
	if err != nil {
		return err
	}
	ps, err := b.ptrs(dst, x, w)
	if err != nil {
		return err
	}
	if d <= shortRow {
		a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).I64(int64(n)).I64(int64(d)).F32(eps)
		return b.shortRows("rmsnorm_rows_"+s, n, a)
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).I64(int64(d)).F32(eps)
	return b.rowLaunch("rmsnorm_"+s, n, a)
}

func (b *Backend) Softmax(dst, x *tensor.Tensor) error {
	s, n, d, err := rowOp("softmax", dst, x)
	if err != nil {
		return err
	}
	ps, err := b.ptrs(dst, x)
	if err != nil {
		return err
	}
	if d <= shortRow {
		return b.shortRows("softmax_rows_"+s, n, (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).I64(int64(n)).I64(int64(d)))
	}
	return b.rowLaunch("softmax_"+s, n, (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).I64(int64(d)))
}

func (b *Backend) Reduce(op tensor.ReduceOp, dst, src *tensor.Tensor) error {
	s := floatSuffix(dst.DType())
	if s == "" || src.DType() != dst.DType() {
		return unsupported("reduce", dst.DType())
	}
	if op > tensor.ReduceAbsMean {
		return fmt.Errorf("gpu: reduce %d: %w", op, tensor.ErrUnsupported)
	}
	if src.Rank() != 2 || dst.Numel() != src.Dim(0) {
		return fmt.Errorf("gpu: reduce of %v into %v", src, dst)
	}
	if src.Dim(1) == 0 {
		return fmt.Errorf("gpu: reduce over an empty axis of %v", src)
	}
	ps, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).I64(int64(src.Dim(1))).I32(int32(op))
	return b.rowLaunch("reduce_"+s, src.Dim(0), a)
}

// ptrs resolves several tensors' addresses (nil tensors give 0).
func (b *Backend) ptrs(ts ...*tensor.Tensor) ([]uintptr, error) {
	out := make([]uintptr, len(ts))
	for i, t := range ts {
		p, err := b.ptr(t)
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}
