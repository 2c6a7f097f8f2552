package gpu

import (
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/rocblas"
	"github.com/framepack-go/framepack/tensor"
)

// The backend's tiers of the conv3d chain (package convchain):
//
//   - "gemm": im2col chunks bounded in memory, each one GEMM on
//     rocBLAS/cuBLAS;
//   - "naive": framepack's direct kernel, correct for every shape.

// ConvTiers returns the backend's own tiers of the conv3d chain, fastest
// first. The vendor library tier (MIOpen / cuDNN) is in conv_vendor.go,
// which reads its input channels-last and through the causal padding.
func (b *Backend) ConvTiers() []convchain.Tier {
	var ts []convchain.Tier
	if b.blas != nil {
		ts = append(ts, gemmTier{b})
	}
	return append(ts, naiveTier{b})
}

func convDesc(k convchain.Key) (miopen.ConvDesc, error) {
	var dt miopen.DType
	switch k.DType {
	case "f32":
		dt = miopen.F32
	case "f16":
		dt = miopen.F16
	case "bf16":
		dt = miopen.BF16
	default:
		return miopen.ConvDesc{}, fmt.Errorf("gpu: conv3d on %s: %w", k.DType, tensor.ErrUnsupported)
	}
	if k.Layout != "" && k.Layout != "ncdhw" {
		return miopen.ConvDesc{}, fmt.Errorf("gpu: conv3d layout %s: %w", k.Layout, tensor.ErrUnsupported)
	}
	return miopen.ConvDesc{N: k.X[0], C: k.X[1], D: k.X[2], H: k.X[3], W: k.X[4], K: k.W[0], KD: k.W[2], KH: k.W[3],
		KW: k.W[4], Stride: k.Stride, Pad: k.Padding, DType: dt, Layout: miopen.NCDHW}, nil
}

// ---- gemm: im2col chunks on the vendor BLAS ----

type gemmTier struct{ b *Backend }

func (gemmTier) Name() string { return "gemm" }

// colBudget bounds the im2col buffer.
const colBudget = 256 << 20

func gemmChunk(k convchain.Key, es int) (K, P, pc int) {
	K = k.W[1] * k.W[2] * k.W[3] * k.W[4]
	P = 1
	for i := 0; i < 3; i++ {
		P *= (k.X[2+i]+2*k.Padding[i]-k.W[2+i])/max(k.Stride[i], 1) + 1
	}
	pc = max(1, min(P, colBudget/max(K*es, 1)))
	if pc < P && pc > 256 {
		pc -= pc % 256
	}
	return K, P, pc
}

func (g gemmTier) Plan(k convchain.Key, _ *convchain.Plan) (*convchain.Plan, error) {
	if g.b.blas == nil {
		return nil, errors.New("gpu: no vendor BLAS")
	}
	if _, err := convDesc(k); err != nil {
		return nil, err
	}
	dt, _ := tensor.ParseDType(k.DType)
	K, P, pc := gemmChunk(k, dt.Size())
	return &convchain.Plan{Algorithm: fmt.Sprintf("im2col (K %d × %d of %d positions) + %s", K, pc, P, g.b.BLAS()),
		Workspace: int64(K) * int64(pc) * int64(dt.Size())}, nil
}

func (g gemmTier) Run(_ *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	b := g.b
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || b.blas == nil {
		return unsupported("conv3d gemm", dt)
	}
	args, err := convArgs(dst, x, w, bias, p)
	if err != nil {
		return err
	}
	k := convchain.KeyOf("", x, w, bias, p)
	es := dt.Size()
	K, P, pc := gemmChunk(k, es)
	ps, err := b.ptrs(dst, x, w, bias)
	if err != nil {
		return err
	}
	B, Cout := x.Dim(0), w.Dim(0)
	beta := float32(0)
	if bias != nil {
		// y[b][c][p] = bias[c], then every GEMM adds into it: one rounding.
		cargs := []int64{int64(dst.Numel()), 3, 0, 0}
		cargs = append(cargs, fixed([]int{B, Cout, P})...)
		cargs = append(cargs, fixed([]int{Cout * P, P, 1})...)
		cargs = append(cargs, fixed([]int{0, 1, 0})...)
		a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[3]).Struct(packInt64s(cargs...), 8)
		if err := b.launchLinear("elementwise", fmt.Sprintf("copy_b%d", es), int64(dst.Numel()), 256, 1, a); err != nil {
			return err
		}
		beta = 1
	}
	col, err := b.alloc.alloc(int64(K) * int64(pc) * int64(es))
	if err != nil {
		return err
	}
	defer b.alloc.free(col)
	b.blasMu.Lock()
	defer b.blasMu.Unlock()
	for bi := 0; bi < B; bi++ {
		for p0 := 0; p0 < P; p0 += pc {
			n := min(pc, P-p0)
			a := (&hip.Args{}).Ptr(col.ptr).Ptr(ps[1]).Struct(args, 8).I64(int64(bi)).I64(int64(p0)).I64(int64(n))
			if err := b.launchLinear("conv", "im2col_"+s, int64(K)*int64(n), 256, 1, a); err != nil {
				return err
			}
			m := rocblas.MatMul{M: Cout, N: n, K: K, A: ps[2], LDA: K, B: col.ptr, LDB: n,
				C: ps[0] + uintptr((int64(bi)*int64(Cout)*int64(P)+int64(p0))*int64(es)), LDC: P,
				Batch: 1, In: blasType(dt), Out: blasType(dt), Alpha: 1, Beta: beta}
			if err := b.blasCall(func() error { return b.blas.MatMul(m) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// blasCall runs fn on a thread bound to the device (the caller holds
// blasMu).
func (b *Backend) blasCall(fn func() error) error {
	b.idle.queued()
	unbind, err := b.dev.Bind()
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	defer unbind()
	if err := fn(); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

// ---- naive: the direct kernel ----

type naiveTier struct{ b *Backend }

func (naiveTier) Name() string { return "naive" }

func (naiveTier) Plan(k convchain.Key, _ *convchain.Plan) (*convchain.Plan, error) {
	if _, err := convDesc(k); err != nil {
		return nil, err
	}
	return &convchain.Plan{Algorithm: "framepack direct conv3d kernel"}, nil
}

func (t naiveTier) Run(_ *convchain.Plan, dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return t.b.conv3dNaive(dst, x, w, bias, p)
}

// ---- naive: framepack's direct kernel ----

// Conv3d runs framepack's direct kernel: correct for every shape, slow. The
// engine wraps the backend in the conv3d chain (WithConvChain, convchain.go), whose
// vendor library and GEMM tiers run first.
func (b *Backend) Conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	if _, err := convArgs(dst, x, w, bias, p); err != nil {
		return err
	}
	if dst.Numel() == 0 {
		return nil
	}
	return b.conv3dNaive(dst, x, w, bias, p)
}

// convArgs checks a convolution and packs the kernels' ConvArgs.
func convArgs(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) ([]byte, error) {
	dt := dst.DType()
	if floatSuffix(dt) == "" || x.DType() != dt || w.DType() != dt || (bias != nil && bias.DType() != dt) {
		return nil, unsupported("conv3d", dt)
	}
	if x.Rank() != 5 || w.Rank() != 5 || dst.Rank() != 5 || x.Dim(1) != w.Dim(1) || dst.Dim(0) != x.Dim(0) ||
		dst.Dim(1) != w.Dim(0) || (bias != nil && bias.Numel() != w.Dim(0)) {
		return nil, fmt.Errorf("gpu: conv3d of %v with %v (bias %v) into %v", x, w, bias, dst)
	}
	var st [3]int64
	for i := 0; i < 3; i++ {
		st[i] = int64(max(p.Stride[i], 1))
		want := (x.Dim(2+i)+2*p.Padding[i]-w.Dim(2+i))/int(st[i]) + 1
		if dst.Dim(2+i) != want || p.Padding[i] < 0 {
			return nil, fmt.Errorf("gpu: conv3d of %v with %v, %+v: output %v, want size %d on axis %d", x, w, p, dst, want, 2+i)
		}
	}
	d := func(t *tensor.Tensor, i int) int64 { return int64(t.Dim(i)) }
	return packInt64s(d(x, 0), d(x, 1), d(x, 2), d(x, 3), d(x, 4), d(w, 0), d(w, 2), d(w, 3), d(w, 4), d(dst, 2), d(dst, 3), d(dst, 4),
		st[0], st[1], st[2], int64(p.Padding[0]), int64(p.Padding[1]), int64(p.Padding[2])), nil
}

// conv3dNaive runs the direct kernel: one thread per output element.
func (b *Backend) conv3dNaive(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	args, err := convArgs(dst, x, w, bias, p)
	if err != nil {
		return err
	}
	if dst.Numel() == 0 {
		return nil
	}
	ps, err := b.ptrs(dst, x, w, bias)
	if err != nil {
		return err
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Struct(args, 8)
	return b.launchLinear("conv", "conv3d_"+floatSuffix(dst.DType()), int64(dst.Numel()), 256, 1, a)
}
