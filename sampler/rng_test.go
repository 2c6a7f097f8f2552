package sampler

import (
	"math"
	"math/big"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/tensor"
)

func TestTorchRandnGolden(t *testing.T) {
	for _, c := range golden.Cases(t, "rng") {
		var draws []struct {
			Name  string `json:"name"`
			Seed  uint64 `json:"seed"`
			Shape []int  `json:"shape"`
		}
		c.Param("draws", &draws)
		if len(draws) == 0 {
			t.Fatalf("%s: no draws", c.Name)
		}
		for _, d := range draws {
			got := NewTorchGenerator(d.Seed).Randn(d.Shape...)
			c.Compare(t, d.Name, tensor.FromFloat32(got, d.Shape...))
		}
	}
}

// The sampler goldens record their noise: it is the first draw of their seed.
func TestTorchRandnSamplerNoise(t *testing.T) {
	for _, c := range golden.Cases(t, "sampler") {
		var seed uint64
		c.Param("generator_seed", &seed)
		ref := c.Tensor("noise")
		got := NewTorchGenerator(seed).Randn(ref.Shape()...)
		if d := maxAbsDiff(got, ref.Float32s()); d != 0 {
			t.Errorf("%s: noise differs from torch by %g", c.Name, d)
		}
	}
}

func maxAbsDiff(a, b []float32) float64 {
	m := 0.0
	for i := range a {
		d := float64(a[i] - b[i])
		if d < 0 {
			d = -d
		}
		if d > m || d != d {
			m = d
		}
	}
	return m
}

// MT19937 seeded with 5489 (the C++ default) gives 3499211612 first and
// 4123659995 as its 10000th output (std::mt19937's conformance value).
func TestMT19937(t *testing.T) {
	g := NewTorchGenerator(5489)
	if v := g.Uint32(); v != 3499211612 {
		t.Fatalf("first output %d", v)
	}
	for i := 2; i < 10000; i++ {
		g.Uint32()
	}
	if v := g.Uint32(); v != 4123659995 {
		t.Fatalf("10000th output %d", v)
	}
}

// Successive draws continue one stream, as sections share one generator,
// and a tail shorter than 16 redraws the last block: 20 values use 36
// uniforms, so the next draw starts 36 outputs in.
func TestTorchRandnStream(t *testing.T) {
	a := NewTorchGenerator(7)
	first := a.Randn(20)
	second := a.Randn(16)

	b := NewTorchGenerator(7)
	for range 36 {
		b.Uint32()
	}
	if d := maxAbsDiff(b.Randn(16), second); d != 0 {
		t.Fatalf("second draw does not continue after 36 outputs (diff %g)", d)
	}
	// The tail block overwrites slots 4..19 with fresh normals; slots 0..3
	// keep the first block's values.
	c := NewTorchGenerator(7)
	u := make([]float32, 16)
	for i := range u {
		u[i] = c.uniform32()
	}
	boxMuller16(u)
	if d := maxAbsDiff(first[:4], u[:4]); d != 0 {
		t.Fatalf("head of the first block changed (diff %g)", d)
	}
	// Small draws use the cached double path: 3 + 1 values = 2 Box–Muller pairs = 8 outputs.
	e := NewTorchGenerator(9)
	e.Randn(3)
	e.Randn(1)
	f := NewTorchGenerator(9)
	for range 8 {
		f.Uint32()
	}
	if e.Uint32() != f.Uint32() {
		t.Fatal("small draws did not consume two uniforms per pair")
	}
}

// The float32 Cephes log and sincos stay within a few ulps of libm.
func TestCephesAccuracy(t *testing.T) {
	for i := 1; i < 1<<16; i++ {
		u := float32(i) / (1 << 16)
		if d := relErr(cephesLog(u), float32(math.Log(float64(u)))); d > 4e-7 && u < 0.999 {
			t.Fatalf("log(%g): rel err %g", u, d)
		}
		x := float32(2*math.Pi) * u
		s, c := cephesSincos(x)
		if math.Abs(float64(s)-math.Sin(float64(x))) > 3e-7 || math.Abs(float64(c)-math.Cos(float64(x))) > 3e-7 {
			t.Fatalf("sincos(%g) = %g, %g", x, s, c)
		}
	}
}

func relErr(a, b float32) float64 { return math.Abs(float64(a-b)) / math.Abs(float64(b)) }

// fma32 rounds a·b + c once, checked against exact arithmetic.
func TestFMA32(t *testing.T) {
	g := NewTorchGenerator(11)
	rnd := func() float32 {
		e := int(g.Uint32()%40) - 20
		return float32(math.Ldexp(float64(g.uniform32())-0.5, e))
	}
	for i := 0; i < 200000; i++ {
		a, b, c := rnd(), rnd(), rnd()
		if i%3 == 0 { // near-cancelling sums
			c = -float32(float64(a) * float64(b))
		}
		x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
		want, _ := x.Float32()
		if got := fma32(a, b, c); got != want {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
	// A double-rounding trap: a·b + c is just below a float32 midpoint but
	// rounds onto it in float64 (then ties to even, one ulp too high).
	a := float32(math.Ldexp(1+0x1p-23, -12))
	b := float32(math.Ldexp(1-0x1p-23, -12))
	c := float32(1 + 0x1p-23)
	if got := fma32(a, b, c); got != c {
		t.Errorf("fma32 midpoint case = %.10g, want %.10g", got, c)
	}
}

// A generator restored from its state mid-stream draws what the original
// draws next, on both of torch's paths.
func TestTorchGeneratorStateRoundTrip(t *testing.T) {
	g := NewTorchGenerator(31337)
	g.Randn(3, 40)
	g.Randn(5) // scalar path: leaves a cached normal
	b, err := g.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var h TorchGenerator
	if err := h.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	for _, shape := range [][]int{{3}, {2, 17}, {1000}} {
		want, got := g.Randn(shape...), h.Randn(shape...)
		for i := range want {
			if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
				t.Fatalf("shape %v: value %d is %v after the round trip, want %v", shape, i, got[i], want[i])
			}
		}
	}
	if err := h.UnmarshalBinary(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated state was accepted")
	}
}
