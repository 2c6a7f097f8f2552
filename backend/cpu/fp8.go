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
