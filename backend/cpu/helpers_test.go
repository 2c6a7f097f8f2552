package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// The tests compare every kernel with naive float64 math on the same
// inputs. Half-precision inputs are drawn as values the dtype holds exactly,
// so the reference sees what the kernel sees.

var floatTypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}

// eps is the tolerance unit of a dtype's result: a few f32 roundings, or
// one rounding of the half type (relative).
func eps(dt tensor.DType) float64 {
	switch dt {
	case tensor.F16:
		return 1.0 / 1024
	case tensor.BF16:
		return 1.0 / 128
	}
	return 1e-5
}

func init() { poisonScratch = true }

func backend(t testing.TB) *Backend {
	t.Helper()
	be, err := NewWithOptions(Options{Threads: 3})
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func scope(t testing.TB) (*Backend, *tensor.Scope) {
	be := backend(t)
	s := tensor.NewScope(be)
	t.Cleanup(s.Close)
	return be, s
}

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// randVals draws n values uniform in [lo, hi) that dt holds exactly.
func randVals(r *rand.Rand, dt tensor.DType, n int, lo, hi float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = tensor.Rounder(dt)(float32(lo + (hi-lo)*r.Float64()))
	}
	return out
}

// input makes a tensor of dtype dt on the scope from f32 values.
func input(s *tensor.Scope, dt tensor.DType, vals []float32, shape ...int) *tensor.Tensor {
	t := tensor.FromFloat32(append([]float32(nil), vals...), shape...)
	return s.Cast(s.To(t), dt)
}

// values reads any float tensor back as f32.
func values(s *tensor.Scope, t *tensor.Tensor) []float32 {
	return tensor.Float32s(s.Cast(t, tensor.F32))
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// tol says how close a result must be: |got − want| ≤ rel·(|want| +
// scale[i]) + abs, where scale (nil for none) is the size of the terms that
// made want, so cancellation does not demand impossible relative accuracy,
// and abs covers results in a dtype's subnormal range.
type tol struct {
	rel   float64
	scale []float64
	abs   float64
}

// exact is no tolerance at all.
var exact = tol{}

// within is the usual tolerance for results of dtype dt.
func within(dt tensor.DType, scale []float64) tol {
	t := tol{rel: eps(dt), scale: scale}
	if dt == tensor.F16 {
		t.abs = 0x1p-24 // f16's subnormal spacing
	}
	return t
}

// compare checks got against want elementwise. NaN never passes, nor does
// Inf unless want is the same infinity.
func compare(t testing.TB, what string, got []float32, want []float64, tl tol) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range want {
		g, w := float64(got[i]), want[i]
		ok := false
		switch {
		case math.IsNaN(g) || math.IsNaN(w):
			ok = false
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			ok = g == w
		default:
			lim := tl.rel*math.Abs(w) + tl.abs
			if tl.scale != nil {
				lim += tl.rel * tl.scale[i]
			}
			ok = math.Abs(g-w) <= lim
		}
		if !ok {
			if bad < 5 {
				s := 0.0
				if tl.scale != nil {
					s = tl.scale[i]
				}
				t.Errorf("%s: [%d] got %v, want %v (scale %g, rel %g, abs %g)", what, i, g, w, s, tl.rel, tl.abs)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(want))
	}
}

// constant is a scale slice of n equal values.
func constant(n int, v float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func name(parts ...any) string { return fmt.Sprint(parts...) }

// must runs fn and fails the test with any op error.
func must(t testing.TB, fn func()) {
	t.Helper()
	if err := tensor.Catch(fn); err != nil {
		t.Fatal(err)
	}
}
