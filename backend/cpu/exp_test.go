package cpu

import (
	"math"
	"testing"
)

func TestExpf(t *testing.T) {
	r := rng(60)
	check := func(x float32) {
		got, want := expf(x), math.Exp(float64(x))
		if float32(got) == float32(want) {
			return
		}
		if math.Abs(got-want) > 1e-8*want {
			t.Fatalf("expf(%v) = %v, want %v", x, got, want)
		}
	}
	for i := 0; i < 200000; i++ {
		check(float32(r.Float64()*200 - 110))
	}
	for _, x := range []float32{0, -0, 1, -1, 88.7, -87.3, -103.9, 0.34657, -0.34657, 1e-30} {
		check(x)
	}
	if expf(-105) != 0 || !math.IsInf(expf(90), 1) || !math.IsNaN(expf(float32(math.NaN()))) {
		t.Error("expf limits")
	}
	if float32(expf(float32(math.Inf(-1)))) != 0 || !math.IsInf(expf(float32(math.Inf(1))), 1) {
		t.Error("expf of infinities")
	}
}

var sinkF float64

func BenchmarkExpf(b *testing.B) {
	x := make([]float32, 4096)
	for i := range x {
		x[i] = -float32(i) / 256
	}
	b.Run("expf", func(b *testing.B) {
		var s float64
		for i := 0; i < b.N; i++ {
			for _, v := range x {
				s += expf(v)
			}
		}
		sinkF = s
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/exp")
	})
	b.Run("math", func(b *testing.B) {
		var s float64
		for i := 0; i < b.N; i++ {
			for _, v := range x {
				s += math.Exp(float64(v))
			}
		}
		sinkF = s
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/exp")
	})
}
