package weights

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// TestHalfF16 checks the fast f16 rounding against the exact converter.
func TestHalfF16(t *testing.T) {
	for i := uint32(0); i < 1<<32-99991; i += 99991 {
		f := math.Float32frombits(i)
		if f != f || math.IsInf(float64(f), 0) {
			continue
		}
		if got, want := halfF16(f), tensor.F16FromF32(f); got != want {
			t.Fatalf("%g (%#x): %#x, want %#x", f, i, got, want)
		}
		if got, want := halfBF16(f), tensor.BF16FromF32(f); got != want {
			t.Fatalf("bf16 %g (%#x): %#x, want %#x", f, i, got, want)
		}
	}
}
