package cpu

import "math"

// expTable holds 2^(j/64) for j = 0…63.
var expTable = func() (t [64]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 64)
	}
	return t
}()

// expf is e^x for a float32 argument, in float64 arithmetic: x = (64m +
// j)·ln2/64 + r with |r| ≤ ln2/128, so e^x = 2^m · 2^(j/64) · e^r with the
// middle factor from a table and e^r from a cubic (relative error below
// 4e-11, far under float32's 6e-8). It is several times faster than
// math.Exp, which the softmax loops would otherwise spend most of their
// time in.
func expf(x float32) float64 {
	switch {
	case x != x:
		return float64(x)
	case x < -104: // below float32's smallest subnormal
		return 0
	case x > 89: // above float32's largest value
		return math.Inf(1)
	}
	const (
		toK   = 64 / math.Ln2
		fromK = math.Ln2 / 64
		round = 0x1.8p52 // adding and subtracting it rounds to an integer
	)
	// The conversions round each product before the sum: a compiler may
	// otherwise fuse the two (as with GOAMD64=v3), and the values would
	// then differ from normSiLU's vector code, which does not.
	f := float64(x)
	kf := (float64(f*toK) + round) - round
	k := int64(kf)
	r := f - float64(kf*fromK)
	p := 1 + float64(r*(1+float64(r*(0.5+float64(r*(1.0/6))))))
	v := expTable[k&63] * p
	return math.Float64frombits(math.Float64bits(v) + uint64(k>>6)<<52)
}
