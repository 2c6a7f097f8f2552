// Package numcmp measures how far float32 results are from a reference, in
// float64: the relative L2 error the tests and benchmarks report.
package numcmp

import "math"

// RelL2 is ‖got − want‖₂ / ‖want‖₂; NaN when the lengths differ.
func RelL2(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.NaN()
	}
	var num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}
