package hunyuan

import (
	"math"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/tensor"
)

// poly is the rescale polynomial written out term by term (independent of
// teaCachePoly's Horner form).
func poly(x float64) float64 {
	return 733.226126*math.Pow(x, 4) - 401.131952*math.Pow(x, 3) + 67.5869174*x*x - 3.149878*x + 0.0961237896
}

func TestTeaCachePoly(t *testing.T) {
	for _, x := range []float64{0, 0.01, 0.05, 0.1, 0.2, 0.5} {
		if got, want := teaCachePoly(x), poly(x); math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
			t.Errorf("poly(%v) = %v, want %v", x, got, want)
		}
	}
}

// TestTeaCacheGating drives the decision state machine with known relative
// distances: the first and last call of each cycle always compute, the
// others accumulate f(rel) and compute (resetting) once it reaches 0.15.
func TestTeaCacheGating(t *testing.T) {
	// f(0) = 0.0961, f(0.1) = 0.1292.
	steps := []struct {
		rel  float64 // -1: must not be asked
		calc bool
	}{
		{-1, true},   // cnt 0
		{0, false},   // acc 0.0961
		{0, true},    // acc 0.1922 ≥ 0.15 → compute, reset
		{0.1, false}, // acc 0.1292
		{0, true},    // acc 0.2253
		{-1, true},   // cnt 5 = steps−1
		{-1, true},   // next cycle: cnt 0 again
		{0.3, true},  // f(0.3) = 0.342 alone reaches the threshold
	}
	tc := teaCache{enabled: true, steps: 6, thresh: decimal64(0.15)}
	for i, st := range steps {
		asked := false
		calc := tc.step(func() float64 {
			asked = true
			if st.rel < 0 {
				t.Fatalf("call %d: rel asked on an always-computed call", i)
			}
			return st.rel
		})
		if calc != st.calc {
			t.Errorf("call %d: compute = %v, want %v (acc %v)", i, calc, st.calc, tc.acc)
		}
		if st.rel >= 0 && !asked {
			t.Errorf("call %d: rel not asked", i)
		}
	}
	if decimal64(0.15) != 0.15 {
		t.Errorf("threshold %v, want the decimal 0.15", decimal64(0.15))
	}
}

// TestRelL1 checks the distance against host float64 math.
func TestRelL1(t *testing.T) {
	be := cpu.New()
	s := tensor.NewScope(be)
	defer s.Close()
	a := make([]float32, 6*40)
	b := make([]float32, len(a))
	var num, den float64
	for i := range a {
		a[i] = float32(math.Sin(float64(i)))
		b[i] = a[i] + 0.01*float32(math.Cos(float64(3*i)))
		num += math.Abs(float64(b[i] - a[i]))
		den += math.Abs(float64(a[i]))
	}
	got := relL1(s, tensor.FromFloat32(b, 2, 3, 40), tensor.FromFloat32(a, 2, 3, 40), tensor.F32, nil)
	if want := num / den; math.Abs(got-want) > 1e-6*want {
		t.Errorf("relL1 = %v, want %v", got, want)
	}
}

// TestGoldenTeaCache runs a golden case three times with TeaCache over 3
// steps: the first and last compute, the middle one (same input, distance 0,
// f(0) < 0.15) reuses the residual and so returns the first output.
func TestGoldenTeaCache(t *testing.T) {
	c := golden.Cases(t, "transformer")[2]
	m := loadModel(t, c.ModelDir, Options{})
	in := caseInputs(c)
	m.InitTeaCache(true, 3, 0.15)
	first := forward(t, m, in)
	c.Compare(t, "output", first)
	second := forward(t, m, in)
	if r := numcmp.RelL2(second.Float32s(), first.Float32s()); r > 1e-6 {
		t.Errorf("skipped call: rel_l2 %.3g from the computed one", r)
	}
	c.Compare(t, "output", forward(t, m, in))
	if comp, skip := m.TeaCacheStats(); comp != 2 || skip != 1 {
		t.Errorf("stats: %d computed, %d skipped; want 2, 1", comp, skip)
	}

	// A changed input right after a computed call: the skip reuses the
	// stored residual, not a fresh computation.
	m.InitTeaCache(true, 4, 0.15)
	forward(t, m, in)
	in2 := *in
	in2.HiddenStates = scaled(in.HiddenStates, 1.001)
	forward(t, m, &in2)
	if comp, skip := m.TeaCacheStats(); comp != 1 || skip != 1 {
		t.Errorf("stats: %d computed, %d skipped; want 1, 1", comp, skip)
	}

	// Off: every call computes.
	m.InitTeaCache(false, 3, 0.15)
	for range 3 {
		forward(t, m, in)
	}
	if comp, skip := m.TeaCacheStats(); comp != 0 || skip != 0 {
		t.Errorf("disabled: stats %d/%d, want none counted", comp, skip)
	}
}
