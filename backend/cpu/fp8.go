package cpu

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// LinearFP8 is Linear with an F8E4M3 weight: a block of weight rows at a
// time is dequantized exactly into f32 (code · scale, one f32 rounding)
// and multiplied in f32, so the weight never exists widened in full.
func (be *Backend) LinearFP8(dst, x, w, scale, bias *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("linear_fp8", dt)
	}
	if w.DType() != tensor.F8E4M3 || scale.DType() != tensor.F32 {
		return fmt.Errorf("cpu: linear_fp8 wants an f8e4m3 weight and f32 scales, have %s and %s: %w", w.DType(), scale.DType(), tensor.ErrUnsupported)
	}
	if x.Rank() != 2 || w.Rank() != 2 || dst.Rank() != 2 {
		return fmt.Errorf("cpu: linear_fp8 wants 2-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	M, K, N := x.Dim(0), x.Dim(1), w.Dim(0)
	if w.Dim(1) != K || dst.Dim(0) != M || dst.Dim(1) != N || scale.Numel() != N || (bias != nil && bias.Numel() != N) {
		return fmt.Errorf("cpu: linear_fp8 of %v by %v (scale %v, bias %v) into %v", x, w, scale, bias, dst)
	}
	bs, err := rawAll(w, scale)
	if err != nil {
		return err
	}
	wb, sc := bs[0], tensor.ViewAs[float32](bs[1])
	return be.linear(dst, x, bias, M, N, func(tm *temps, xf, out []float32) {
		be.weightRows(tm, xf, out, M, N, K, func(tmp []float32, n0, nr int) {
			be.parallel(nr, max(1, (1<<14)/max(K, 1)), func(lo, hi int) {
				for r := lo; r < hi; r++ {
					n := n0 + r
					tensor.WidenF8E4M3Scaled(tmp[r*K:(r+1)*K], wb[n*K:(n+1)*K], sc[n])
				}
			})
		})
	})
}

// QuantizeRowsFP8 is tensor.QuantizeF8E4M3Rows on x's rows, read as f32.
func (be *Backend) QuantizeRowsFP8(q, scale, x *tensor.Tensor) error {
	if !isCompute(x.DType()) || q.DType() != tensor.F8E4M3 || scale.DType() != tensor.F32 {
		return fmt.Errorf("cpu: quantize_rows_fp8 of %s into %s, %s: %w", x.DType(), q.DType(), scale.DType(), tensor.ErrUnsupported)
	}
	if x.Rank() != 2 || q.Rank() != 2 || q.Dim(0) != x.Dim(0) || q.Dim(1) != x.Dim(1) || scale.Numel() != x.Dim(0) {
		return fmt.Errorf("cpu: quantize_rows_fp8 of %v into %v, %v", x, q, scale)
	}
	M, K := x.Dim(0), x.Dim(1)
	bs, err := rawAll(q, scale)
	if err != nil {
		return err
	}
	tm := be.temps()
	defer tm.release()
	xf, err := tm.widen(x)
	if err != nil {
		return err
	}
	qb, sc := bs[0], tensor.ViewAs[float32](bs[1])
	be.parallel(M, max(1, (1<<14)/max(K, 1)), func(lo, hi int) {
		tensor.QuantizeF8E4M3Rows(qb[lo*K:hi*K], sc[lo:hi], xf[lo*K:hi*K], hi-lo, K)
	})
	return nil
}

// LinearScaledFP8 multiplies the codes widened exactly into f32 (their
// products are exact in f32; the sums are f32 as on FP8 tensor cores),
// then scales each element by its row's and column's scales and adds the
// bias.
func (be *Backend) LinearScaledFP8(dst, xq, xs, wq, ws, bias *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || (bias != nil && bias.DType() != dt) {
		return unsupported("linear_scaled_fp8", dt)
	}
	for _, t := range []*tensor.Tensor{xq, wq} {
		if t.DType() != tensor.F8E4M3 || t.Rank() != 2 {
			return fmt.Errorf("cpu: linear_scaled_fp8 wants 2-D f8e4m3 operands, have %v: %w", t, tensor.ErrUnsupported)
		}
	}
	if xs.DType() != tensor.F32 || ws.DType() != tensor.F32 {
		return fmt.Errorf("cpu: linear_scaled_fp8 wants f32 scales, have %s and %s: %w", xs.DType(), ws.DType(), tensor.ErrUnsupported)
	}
	M, K, N := xq.Dim(0), xq.Dim(1), wq.Dim(0)
	if wq.Dim(1) != K || dst.Rank() != 2 || dst.Dim(0) != M || dst.Dim(1) != N || xs.Numel() != M || ws.Numel() != N ||
		(bias != nil && bias.Numel() != N) {
		return fmt.Errorf("cpu: linear_scaled_fp8 of %v (scales %v) by %v (scales %v, bias %v) into %v", xq, xs, wq, ws, bias, dst)
	}
	bs, err := rawAll(xq, xs, wq, ws)
	if err != nil {
		return err
	}
	xb, xsc, wb, wsc := bs[0], tensor.ViewAs[float32](bs[1]), bs[2], tensor.ViewAs[float32](bs[3])
	return be.inF32(dst, []*tensor.Tensor{bias}, func(tm *temps, in [][]float32, out []float32) {
		xf := tm.alloc(M * K)
		be.parallel(M, max(1, (1<<14)/max(K, 1)), func(lo, hi int) {
			tensor.WidenF8E4M3(xf[lo*K:hi*K], xb[lo*K:hi*K])
		})
		be.weightRows(tm, xf, out, M, N, K, func(tmp []float32, n0, nr int) {
			tensor.WidenF8E4M3(tmp[:nr*K], wb[n0*K:(n0+nr)*K])
		})
		bf := in[0]
		be.parallel(M, max(1, (1<<14)/max(N, 1)), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := out[i*N : (i+1)*N]
				for j := range row {
					row[j] *= xsc[i] * wsc[j]
					if bf != nil {
						row[j] += bf[j]
					}
				}
			}
		})
	})
}

// NativeFP8 is false: the CPU widens the codes; it is FP8 compute's
// reference.
func (be *Backend) NativeFP8() bool { return false }
