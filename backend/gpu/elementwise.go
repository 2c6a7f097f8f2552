package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

const maxRank = 6 // kernels' strided views (kernels/prelude.hip MAXR)

// dtypeSuffix is a dtype's kernel-name suffix.
func dtypeSuffix(dt tensor.DType) string {
	switch dt {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.I64, tensor.I32, tensor.U8, tensor.Bool:
		return dt.String()
	}
	return ""
}

// floatSuffix is the suffix of a compute dtype (f32, f16, bf16), "" otherwise.
func floatSuffix(dt tensor.DType) string {
	if dt == tensor.F32 || dt == tensor.F16 || dt == tensor.BF16 {
		return dt.String()
	}
	return ""
}

// widthSuffix is the element-size suffix of dtype-agnostic kernels.
func widthSuffix(dt tensor.DType) string {
	switch dt.Size() {
	case 1, 2, 4, 8:
		return fmt.Sprintf("b%d", dt.Size())
	}
	return ""
}

// packInt64s packs a kernel struct of 64-bit fields.
func packInt64s(vals ...int64) []byte {
	out := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(out[8*i:], uint64(v))
	}
	return out
}

// fixed pads a slice to maxRank entries.
func fixed(v []int) []int64 {
	out := make([]int64, maxRank)
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

// forLeading calls fn once per index of the leading axes beyond maxRank,
// with the element offsets of that slice in each stride set.
func forLeading(sh []int, st [][]int, fn func(offs []int, sh []int, st [][]int) error) error {
	lead := len(sh) - maxRank
	if lead <= 0 {
		return fn(make([]int, len(st)), sh, st)
	}
	inner := make([][]int, len(st))
	for k := range st {
		inner[k] = st[k][lead:]
	}
	n := tensor.Numel(sh[:lead])
	offs := make([]int, len(st))
	for i := 0; i < n; i++ {
		r := i
		for k := range offs {
			offs[k] = 0
		}
		for ax := lead - 1; ax >= 0; ax-- {
			c := r % sh[ax]
			r /= sh[ax]
			for k := range offs {
				offs[k] += c * st[k][ax]
			}
		}
		if err := fn(offs, sh[lead:], inner); err != nil {
			return err
		}
	}
	return nil
}

// ---- Fill / Cast / Copy ----

func (b *Backend) Fill(dst *tensor.Tensor, v float64) error {
	s := dtypeSuffix(dst.DType())
	if s == "" {
		return unsupported("fill", dst.DType())
	}
	p, err := b.ptr(dst)
	if err != nil {
		return err
	}
	n := int64(dst.Numel())
	a := (&hip.Args{}).Ptr(p).I64(n).U64(math.Float64bits(v))
	return b.launchLinear("elementwise", "fill_"+s, n, 256, 1, a)
}

func (b *Backend) Cast(dst, src *tensor.Tensor) error {
	if dst.Numel() != src.Numel() {
		return fmt.Errorf("gpu: cast of %v into %v", src, dst)
	}
	ss, ds := dtypeSuffix(src.DType()), dtypeSuffix(dst.DType())
	if ss == "" || ds == "" {
		return fmt.Errorf("gpu: cast %s to %s: %w", src.DType(), dst.DType(), tensor.ErrUnsupported)
	}
	p, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	pd, ps := p[0], p[1]
	n := int64(dst.Numel())
	if dst.DType() == src.DType() {
		return b.d2d(pd, ps, n*int64(dst.DType().Size()))
	}
	return b.launchLinear("elementwise", "cast_"+ss+"_"+ds, n, 256, 1, (&hip.Args{}).Ptr(pd).Ptr(ps).I64(n))
}

func (b *Backend) d2d(dst, src uintptr, n int64) error {
	if n == 0 {
		return nil
	}
	b.idle.queued()
	if err := b.dev.CopyD2DAsync(dst, src, n, b.stream); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

func (b *Backend) Copy(dst *tensor.Tensor, dOff int, dSt []int, src *tensor.Tensor, sOff int, sSt []int, shape []int) error {
	if err := tensor.CheckCopy(dst, dOff, dSt, src, sOff, sSt, shape); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if tensor.Numel(shape) == 0 {
		return nil
	}
	ws := widthSuffix(dst.DType())
	if ws == "" {
		return unsupported("copy", dst.DType())
	}
	p, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	pd, ps := p[0], p[1]
	es := int64(dst.DType().Size())
	sh, st := tensor.CollapseAxes(shape, dSt, sSt)
	if len(sh) == 1 && st[0][0] == 1 && st[1][0] == 1 {
		return b.d2d(pd+uintptr(int64(dOff)*es), ps+uintptr(int64(sOff)*es), int64(sh[0])*es)
	}
	w := copyWord(int(es), pd, ps, dOff, sOff, sh, st)
	if f := w / int(es); f > 1 {
		sh, st, dOff, sOff = slices.Clone(sh), [][]int{slices.Clone(st[0]), slices.Clone(st[1])}, dOff/f, sOff/f
		sh[len(sh)-1] /= f
		for k := range st {
			for ax := 0; ax < len(sh)-1; ax++ {
				st[k][ax] /= f
			}
		}
		ws = fmt.Sprintf("b%d", w)
	}
	return forLeading(sh, st, func(offs []int, sh []int, st [][]int) error {
		n := int64(tensor.Numel(sh))
		args := []int64{n, int64(len(sh)), int64(dOff + offs[0]), int64(sOff + offs[1])}
		args = append(args, fixed(sh)...)
		args = append(args, fixed(st[0])...)
		args = append(args, fixed(st[1])...)
		a := (&hip.Args{}).Ptr(pd).Ptr(ps).Struct(packInt64s(args...), 8)
		return b.launchLinear("elementwise", "copy_"+ws, n, 256, 1, a)
	})
}

// copyWord is the widest word, up to 16 bytes, a strided copy of es-byte
// elements can move at once: both sides' innermost axis contiguous, and
// the run, the base addresses and every outer stride multiples of it. One
// thread per element of 2 bytes leaves a copy at a fraction of the memory
// bandwidth; the head splits of sequence parallelism are such copies.
func copyWord(es int, pd, ps uintptr, dOff, sOff int, sh []int, st [][]int) int {
	last := len(sh) - 1
	if st[0][last] != 1 || st[1][last] != 1 {
		return es
	}
	// The kernel indexes words from the base addresses: each address and
	// each offset must be a multiple of the word on its own.
	g := uint64(sh[last]*es) | uint64(pd) | uint64(dOff*es) | uint64(ps) | uint64(sOff*es)
	for k := range st {
		for ax := 0; ax < last; ax++ {
			g |= uint64(st[k][ax] * es)
		}
	}
	w := es
	for w < 16 && g&uint64(2*w-1) == 0 {
		w *= 2
	}
	return w
}

// ---- Unary / Binary ----

func (b *Backend) Unary(op tensor.UnaryOp, dst, src *tensor.Tensor, x, y float32) error {
	if dst.DType() != src.DType() || dst.Numel() != src.Numel() {
		return fmt.Errorf("gpu: %s of %v into %v", op, src, dst)
	}
	s := floatSuffix(dst.DType())
	if s == "" {
		return unsupported(op.String(), dst.DType())
	}
	if op > tensor.OpRecip {
		return fmt.Errorf("gpu: unary %s: %w", op, tensor.ErrUnsupported)
	}
	p, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	pd, ps := p[0], p[1]
	n := int64(dst.Numel())
	a := (&hip.Args{}).Ptr(pd).Ptr(ps).I64(n).I32(int32(op)).F32(x).F32(y)
	return b.launchLinear("elementwise", "unary_"+s, n, 256, 16/dst.DType().Size(), a)
}

func (b *Backend) Binary(op tensor.BinaryOp, dst, x *tensor.Tensor, xSt []int, y *tensor.Tensor, ySt []int) error {
	dt := dst.DType()
	shape, xSt, ySt, err := tensor.CheckBinary(op, dst, x, xSt, y, ySt)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	s := floatSuffix(dt)
	per := 1
	switch {
	case s != "":
		per = 16 / dt.Size()
	case dt == tensor.I64 || dt == tensor.I32:
		s = dt.String()
	default:
		return unsupported(op.String(), dt)
	}
	if shape == nil {
		return nil
	}
	p, err := b.ptrs(dst, x, y)
	if err != nil {
		return err
	}
	pd, px, py := p[0], p[1], p[2]
	es := uintptr(dt.Size())
	sh, st := tensor.CollapseAxes(shape, tensor.ContiguousStrides(shape), xSt, ySt)
	return forLeading(sh, st, func(offs []int, sh []int, st [][]int) error {
		n := int64(tensor.Numel(sh))
		args := []int64{n, int64(len(sh)), int64(op)}
		args = append(args, fixed(sh)...)
		args = append(args, fixed(st[1])...)
		args = append(args, fixed(st[2])...)
		a := (&hip.Args{}).Ptr(pd+uintptr(offs[0])*es).Ptr(px+uintptr(offs[1])*es).Ptr(py+uintptr(offs[2])*es).
			Struct(packInt64s(args...), 8)
		return b.launchLinear("elementwise", "binary_"+s, n, 256, per, a)
	})
}

// ---- RoPE ----

func (b *Backend) RoPE(dst, x, cos, sin *tensor.Tensor) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || x.DType() != dt || cos.DType() != tensor.F32 || sin.DType() != tensor.F32 {
		return unsupported("rope", dt)
	}
	if x.Rank() != 4 || dst.Numel() != x.Numel() || x.Dim(3)%2 != 0 {
		return fmt.Errorf("gpu: rope of %v into %v", x, dst)
	}
	L, H, D := x.Dim(1), x.Dim(2), x.Dim(3)
	if cos.Numel() != L*D || sin.Numel() != L*D {
		return fmt.Errorf("gpu: rope of %v with cos %v, sin %v", x, cos, sin)
	}
	ps, err := b.ptrs(dst, x, cos, sin)
	if err != nil {
		return err
	}
	pairs := int64(x.Numel() / 2)
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).I64(pairs).I64(int64(L)).I64(int64(H)).I64(int64(D))
	return b.launchLinear("elementwise", "rope_"+s, pairs, 256, 1, a)
}

// ---- resampling ----

func (b *Backend) Pad(dst, src *tensor.Tensor, before []int, mode tensor.PadMode) error {
	bf, err := tensor.CheckPad(dst, src, before, mode)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	ws := widthSuffix(dst.DType())
	if ws == "" {
		return unsupported("pad", dst.DType())
	}
	ds, ss := dst.Shape(), src.Shape()
	r := len(ds)
	if dst.Numel() == 0 {
		return nil
	}
	// Merge the leading axes that are not padded into one.
	lead := 0
	for lead < r && bf[lead] == 0 && ds[lead] == ss[lead] {
		lead++
	}
	if lead == r { // nothing padded: a plain copy
		return b.Cast(dst, src)
	}
	n0 := tensor.Numel(ds[:lead])
	dsh := append([]int{n0}, ds[lead:]...)
	ssh := append([]int{n0}, ss[lead:]...)
	bfs := append([]int{0}, bf[lead:]...)
	if len(dsh) > maxRank {
		return fmt.Errorf("gpu: pad of %d axes: %w", len(dsh)-1, tensor.ErrUnsupported)
	}
	ps, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	rep := int64(0)
	if mode == tensor.PadReplicate {
		rep = 1
	}
	n := int64(dst.Numel())
	args := []int64{n, int64(len(dsh)), rep}
	args = append(args, fixed(dsh)...)
	args = append(args, fixed(ssh)...)
	args = append(args, fixed(bfs)...)
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Struct(packInt64s(args...), 8)
	return b.launchLinear("elementwise", "pad_"+ws, n, 256, 1, a)
}

func (b *Backend) UpsampleNearest(dst, src *tensor.Tensor, scale [3]int) error {
	if err := tensor.CheckUpsample(dst, src, scale); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	ws := widthSuffix(dst.DType())
	if ws == "" {
		return unsupported("upsample", dst.DType())
	}
	// A last axis that is not upsampled (channels-last frames) moves in
	// 16-byte units, one thread each.
	ss := src.Shape()
	if row := ss[len(ss)-1] * dst.DType().Size(); max(scale[2], 1) == 1 && row%16 == 0 && len(ss) >= 3 {
		ps, err := b.ptrs(dst, src)
		if err != nil {
			return err
		}
		if ps[0]%16 == 0 && ps[1]%16 == 0 {
			vs := slices.Clone(ss)
			vs[len(vs)-1] = row / 16
			n := int64(dst.Numel() / (row / dst.DType().Size()) * (row / 16))
			a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).I64(n).I64(int64(vs[len(vs)-3])).I64(int64(vs[len(vs)-2])).I64(int64(vs[len(vs)-1])).
				I32(int32(max(scale[0], 1))).I32(int32(max(scale[1], 1))).I32(1)
			return b.launchLinear("elementwise", "upsample_b16", n, 256, 1, a)
		}
	}
	return b.resample3d("upsample_"+ws, dst, src, scale)
}

// resample3d runs kernel, one thread per element of dst, over src (…, T,
// H, W) and the three factors f.
func (b *Backend) resample3d(kernel string, dst, src *tensor.Tensor, f [3]int) error {
	ps, err := b.ptrs(dst, src)
	if err != nil {
		return err
	}
	ss := src.Shape()
	r := len(ss)
	n := int64(dst.Numel())
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).I64(n).I64(int64(ss[r-3])).I64(int64(ss[r-2])).I64(int64(ss[r-1])).
		I32(int32(f[0])).I32(int32(f[1])).I32(int32(f[2]))
	return b.launchLinear("elementwise", kernel, n, 256, 1, a)
}

func (b *Backend) AvgPool3d(dst, src *tensor.Tensor, kernel [3]int) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || src.DType() != dt {
		return unsupported("avg_pool3d", dt)
	}
	if err := tensor.CheckAvgPool3d(dst, src, kernel); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return b.resample3d("avgpool_"+s, dst, src, kernel)
}

func (b *Backend) Embedding(dst, table, ids *tensor.Tensor) error {
	V, D, err := tensor.CheckEmbedding(dst, table, ids)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	n := ids.Numel()
	ws := widthSuffix(dst.DType())
	if ws == "" {
		return unsupported("embedding", dst.DType())
	}
	if dst.Numel() == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, table, ids)
	if err != nil {
		return err
	}
	b.idle.queued()
	if err := b.dev.MemsetAsync(b.errFlag, 0, 4, b.stream); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	total := int64(n) * int64(D)
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).I64(int64(n)).I64(int64(D)).I64(int64(V)).Ptr(b.errFlag)
	if err := b.launchLinear("elementwise", "embedding_"+ws+"_"+ids.DType().String(), total, 256, 1, a); err != nil {
		return err
	}
	// Ids live on the device: checking them costs one synchronisation,
	// acceptable for the token embeddings this serves.
	var flag [4]byte
	if err := b.dev.CopyD2H(flag[:], b.errFlag, b.stream); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if flag != [4]byte{} {
		return fmt.Errorf("gpu: embedding: an id lies outside the table of %d rows", V)
	}
	return nil
}
