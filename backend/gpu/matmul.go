package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/rocblas"
	"github.com/framepack-go/framepack/tensor"
)

func blasType(dt tensor.DType) rocblas.DType {
	switch dt {
	case tensor.F32:
		return rocblas.F32
	case tensor.F16:
		return rocblas.F16
	case tensor.BF16:
		return rocblas.BF16
	}
	return 0
}

// gemm computes c[z] = alpha·op(a[z])·op(b[z]) (+ bias) for row-major
// operands, through the vendor BLAS when present (bias then enters as
// beta·C with C pre-filled, so the result is rounded once), else through
// our own kernel.
func (b *Backend) gemm(dt tensor.DType, c, a, bm, bias uintptr, batch, M, N, K int, ta, tb, bcastA, bcastB bool, alpha float32) error {
	if M == 0 || N == 0 || batch == 0 {
		return nil
	}
	if b.blas != nil {
		beta := float32(0)
		if bias != 0 {
			// C[z][m][n] = bias[n]: a broadcast copy.
			es := int64(dt.Size())
			rowsTotal := int64(batch) * int64(M)
			args := []int64{rowsTotal * int64(N), 2, 0, 0}
			args = append(args, fixed([]int{int(rowsTotal), N})...)
			args = append(args, fixed([]int{N, 1})...)
			args = append(args, fixed([]int{0, 1})...)
			ca := (&hip.Args{}).Ptr(c).Ptr(bias).Struct(packInt64s(args...), 8)
			if err := b.launchLinear("elementwise", fmt.Sprintf("copy_b%d", es), rowsTotal*int64(N), 256, 1, ca); err != nil {
				return err
			}
			beta = 1
		}
		m := rocblas.MatMul{M: M, N: N, K: K, TransA: ta, TransB: tb, A: a, B: bm, C: c,
			BroadcastA: bcastA && batch > 1, BroadcastB: bcastB && batch > 1, Batch: batch,
			In: blasType(dt), Out: blasType(dt), Alpha: alpha, Beta: beta}
		b.blasMu.Lock()
		defer b.blasMu.Unlock()
		return b.blasCall(func() error { return b.blas.MatMul(m) })
	}
	lda, ldb := K, N
	if ta {
		lda = M
	}
	if tb {
		ldb = K
	}
	sa, sb := int64(M)*int64(K), int64(K)*int64(N)
	if bcastA {
		sa = 0
	}
	if bcastB {
		sb = 0
	}
	s := floatSuffix(dt)
	es := uintptr(dt.Size())
	for z0 := 0; z0 < batch; z0 += 65535 {
		nz := min(65535, batch-z0)
		st := packInt64s(int64(M), int64(N), int64(K), int64(lda), int64(ldb), sa, sb, int64(M)*int64(N))
		st = binary.LittleEndian.AppendUint32(st, b2u(ta))
		st = binary.LittleEndian.AppendUint32(st, b2u(tb))
		st = binary.LittleEndian.AppendUint32(st, math.Float32bits(alpha))
		st = append(st, 0, 0, 0, 0) // struct padding to 8
		args := (&hip.Args{}).Ptr(c+uintptr(int64(z0)*int64(M)*int64(N))*es).
			Ptr(a+uintptr(int64(z0)*sa)*es).Ptr(bm+uintptr(int64(z0)*sb)*es).Ptr(bias).Struct(st, 8)
		grid := hip.Dim3{uint32((N + 63) / 64), uint32((M + 63) / 64), uint32(nz)}
		if (M+63)/64 > 65535 {
			return fmt.Errorf("gpu: gemm with %d rows: %w", M, tensor.ErrUnsupported)
		}
		if err := b.launch("conv", "gemm_"+s, grid, hip.Dim3{256}, 0, args); err != nil {
			return err
		}
	}
	return nil
}

func b2u(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

func (b *Backend) MatMul(dst, x, y *tensor.Tensor, p tensor.MatMulParams) error {
	dt := dst.DType()
	if floatSuffix(dt) == "" || x.DType() != dt || y.DType() != dt {
		return unsupported("matmul", dt)
	}
	sa, sb, err := p.Strides(dst, x, y)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	B, M, N, K, alpha := p.Batch, p.M, p.N, p.K, p.Scale()
	ba, bb := sa == 0, sb == 0 // one matrix serves every batch
	ps, err := b.ptrs(dst, x, y)
	if err != nil {
		return err
	}
	if K == 0 {
		return b.Fill(dst, 0)
	}
	return b.gemm(dt, ps[0], ps[1], ps[2], 0, B, M, N, K, p.TransA, p.TransB, ba, bb, alpha)
}

func (b *Backend) Linear(dst, x, w, bias *tensor.Tensor) error {
	dt := dst.DType()
	if floatSuffix(dt) == "" || x.DType() != dt || w.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("linear", dt)
	}
	M, K, N, err := tensor.CheckLinear(dst, x, w, bias)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	ps, err := b.ptrs(dst, x, w, bias)
	if err != nil {
		return err
	}
	if K == 0 {
		return b.linearNoK(dst, bias, M, N)
	}
	if b.opts.Lt && b.lt != nil && (dt == tensor.BF16 || dt == tensor.F16) {
		err := b.ltLinear(dt, ps[0], ps[1], ps[2], ps[3], M, N, K)
		if err == nil || b.blas == nil || errors.Is(err, tensor.ErrOutOfMemory) {
			return err
		}
		// The Lt library refused the product (no kernel for this GPU or
		// shape): the plain BLAS runs it, and this one only.
		b.ltRefusedOnce.Do(func() {
			b.log.Warn("gpu: the Lt library refused a Linear; those it refuses run on "+b.BLAS(), "err", err)
		})
	}
	return b.gemm(dt, ps[0], ps[1], ps[2], ps[3], 1, M, N, K, false, true, false, false, 1)
}

// linearNoK is a Linear whose K is 0: no products, so every row of dst is
// the bias, or zeros without one.
func (b *Backend) linearNoK(dst, bias *tensor.Tensor, M, N int) error {
	if bias == nil {
		return b.Fill(dst, 0)
	}
	return b.Copy(dst, 0, []int{N, 1}, bias, 0, []int{0, 1}, []int{M, N})
}

// ltLinear is Linear through cuBLASLt / hipBLASLt (Options.Lt), the bias
// added by the GEMM's epilogue.
func (b *Backend) ltLinear(dt tensor.DType, d, x, w, bias uintptr, M, N, K int) error {
	t := ltType(dt)
	g := rocblas.LtLinear{M: M, N: N, K: K, X: x, W: w, D: d, XType: t, WType: t, DType: t}
	if bias != 0 {
		g.Bias, g.Epilogue = bias, rocblas.EpilogueBias
	}
	b.blasMu.Lock()
	defer b.blasMu.Unlock()
	return b.blasCall(func() error { return b.lt.Linear(g) })
}
