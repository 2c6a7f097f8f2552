package bench

import (
	"fmt"
	"math"
	"slices"
)

// relL2 is ‖got − want‖₂ / ‖want‖₂ (0 when both are zero).
func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return math.Sqrt(num / den)
}

// toU8 is FramePack's save_bcthw_as_mp4 conversion of one pixel:
// clamp(x, −1, 1)·127.5 + 127.5 in f32, truncated to uint8.
func toU8(x float32) uint8 {
	if x != x {
		return 0
	}
	x = min(max(x, -1), 1)
	return uint8(float32(x*127.5) + 127.5)
}

// psnrU8 is the PSNR in dB of two 8-bit images (+Inf when equal).
func psnrU8(a, b []uint8) float64 {
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

// framesU8 converts pixels (1, C, T, H, W) in [−1, 1] to T frames of C·H·W
// bytes, as the video writer does.
func framesU8(px []float32, c, t, hw int) [][]uint8 {
	out := make([][]uint8, t)
	for ti := range out {
		f := make([]uint8, c*hw)
		for ci := 0; ci < c; ci++ {
			src := px[(ci*t+ti)*hw : (ci*t+ti+1)*hw]
			for i, x := range src {
				f[ci*hw+i] = toU8(x)
			}
		}
		out[ti] = f
	}
	return out
}

// frameErrors compares pixels got and want (1, C, T, H, W), frame by
// frame: the relative L2 of the values and the PSNR of the 8-bit frames.
func frameErrors(got, want []float32, shape []int) (rel, psnr []float64, err error) {
	if len(shape) != 5 || shape[0] != 1 {
		return nil, nil, fmt.Errorf("pixels %v: want (1, C, T, H, W)", shape)
	}
	c, t, hw := shape[1], shape[2], shape[3]*shape[4]
	if len(got) != len(want) || len(want) != c*t*hw {
		return nil, nil, fmt.Errorf("pixels of %d and %d values for %v", len(got), len(want), shape)
	}
	gf, wf := framesU8(got, c, t, hw), framesU8(want, c, t, hw)
	frame := func(px []float32, ti int) []float32 {
		out := make([]float32, 0, c*hw)
		for ci := 0; ci < c; ci++ {
			out = append(out, px[(ci*t+ti)*hw:(ci*t+ti+1)*hw]...)
		}
		return out
	}
	for ti := 0; ti < t; ti++ {
		rel = append(rel, relL2(frame(got, ti), frame(want, ti)))
		psnr = append(psnr, psnrU8(gf[ti], wf[ti]))
	}
	return rel, psnr, nil
}

// psnrSummary is the mean, the least (and where) and the most of per-frame
// PSNRs; infinite values (equal frames) count as 99 dB in the mean.
func psnrSummary(psnr []float64) map[string]any {
	if len(psnr) == 0 {
		return nil
	}
	var sum float64
	lo := 0
	for i, p := range psnr {
		sum += min(p, 99)
		if p < psnr[lo] {
			lo = i
		}
	}
	return map[string]any{"mean": round2(sum / float64(len(psnr))), "min": round2(psnr[lo]), "min_frame": lo,
		"max": round2(slices.Max(psnr))}
}

// round2 rounds to 2 decimals; +Inf (identical frames) becomes 99.
func round2(x float64) float64 {
	if math.IsInf(x, 1) {
		return 99
	}
	return math.Round(x*100) / 100
}

// rounded is round2 of every value.
func rounded(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = round2(x)
	}
	return out
}

// sig3 rounds to 3 significant digits (JSON stays short).
func sig3(x float64) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

func sig3s(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = sig3(x)
	}
	return out
}
