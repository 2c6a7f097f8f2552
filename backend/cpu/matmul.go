package cpu

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

func (be *Backend) MatMul(dst, a, b *tensor.Tensor, p tensor.MatMulParams) error {
	dt := dst.DType()
	if !isCompute(dt) || a.DType() != dt || b.DType() != dt {
		return unsupported("matmul", dt)
	}
	sa, sb, err := p.Strides(dst, a, b)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	B, M, N, K, alpha := p.Batch, p.M, p.N, p.K, p.Scale()
	return be.inF32(dst, []*tensor.Tensor{a, b}, func(_ *temps, in [][]float32, out []float32) {
		af, bf := in[0], in[1]
		lda, ldb := K, N
		if p.TransA {
			lda = M
		}
		if p.TransB {
			ldb = K
		}
		if B > 1 && M*N*K < gemmGrain { // many small products: one per task
			be.tasks(B, func(_, i int) {
				be.gemmSerial(p.TransA, p.TransB, M, N, K, alpha, af[i*sa:], lda, bf[i*sb:], ldb, 0, out[i*M*N:], N)
			})
		} else {
			for i := 0; i < B; i++ {
				be.gemm(p.TransA, p.TransB, M, N, K, alpha, af[i*sa:], lda, bf[i*sb:], ldb, 0, out[i*M*N:], N)
			}
		}
	})
}

func (be *Backend) Linear(dst, x, w, bias *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt || w.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("linear", dt)
	}
	M, K, N, err := tensor.CheckLinear(dst, x, w, bias)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	wb, err := raw(w)
	if err != nil {
		return err
	}
	return be.linear(dst, x, bias, M, N, func(tm *temps, xf, out []float32) {
		if dt == tensor.F32 {
			be.gemm(false, true, M, N, K, 1, xf, K, tensor.ViewAs[float32](wb), K, 0, out, N)
			return
		}
		// Widen a half-precision weight a block of rows at a time, so a
		// large weight never exists twice in full.
		wh := tensor.ViewAs[uint16](wb)
		be.weightRows(tm, xf, out, M, N, K, func(tmp []float32, n0, nr int) {
			be.widenInto(tmp, wh[n0*K:(n0+nr)*K], dt)
		})
	})
}

// linear is dst = x·wᵀ + bias for x (M, K) and a weight of N rows, bias
// added in f32 after gemmW multiplies xf by the weight into out.
func (be *Backend) linear(dst, x, bias *tensor.Tensor, M, N int, gemmW func(tm *temps, xf, out []float32)) error {
	return be.inF32(dst, []*tensor.Tensor{x, bias}, func(tm *temps, in [][]float32, out []float32) {
		gemmW(tm, in[0], out)
		if bf := in[1]; bf != nil {
			be.parallel(M, max(1, (1<<14)/max(N, 1)), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					row := out[i*N : (i+1)*N]
					for j, v := range bf[:N] {
						row[j] += v
					}
				}
			})
		}
	})
}

// weightRows multiplies xf (M, K) by the transpose of a weight (N, K) that
// widen writes in f32 a block of rows at a time (rows n0 … n0+nr−1 into
// tmp), so that a large weight never exists widened in full.
func (be *Backend) weightRows(tm *temps, xf, out []float32, M, N, K int, widen func(tmp []float32, n0, nr int)) {
	rows := max(1, min(N, (1<<22)/max(K, 1)))
	tmp := tm.alloc(rows * K)
	for n0 := 0; n0 < N; n0 += rows {
		nr := min(rows, N-n0)
		widen(tmp[:nr*K], n0, nr)
		be.gemm(false, true, M, nr, K, 1, xf, K, tmp, K, 0, out[n0:], N)
	}
}
