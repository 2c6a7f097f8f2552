package numcmp

import (
	"math"
	"testing"
)

func TestRelL2(t *testing.T) {
	// ‖(0.5, -1)‖ / ‖(3, 4)‖ = √1.25 / 5.
	if got, want := RelL2([]float32{3.5, 3}, []float32{3, 4}), math.Sqrt(1.25)/5; math.Abs(got-want) > 1e-15 {
		t.Errorf("RelL2 = %v, want %v", got, want)
	}
	if got := RelL2([]float32{1, 2}, []float32{1, 2}); got != 0 {
		t.Errorf("equal slices: %v", got)
	}
	if got := RelL2([]float32{1}, []float32{1, 2}); !math.IsNaN(got) {
		t.Errorf("lengths 1 and 2: %v, want NaN", got)
	}
}
