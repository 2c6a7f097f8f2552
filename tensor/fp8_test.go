package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// e4m3Value is the float64 formula for a code: (−1)^s · 2^(e−7) · (1 + m/8),
// subnormals 2^−6 · m/8; NaN for S.1111.111.
func e4m3Value(c int) float64 {
	s, e, m := c>>7, (c>>3)&15, c&7
	var v float64
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		v = math.Pow(2, -6) * float64(m) / 8
	default:
		v = math.Pow(2, float64(e-7)) * (1 + float64(m)/8)
	}
	if s == 1 {
		v = -v
	}
	return v
}

// e4m3Ref rounds x to E4M3 by search over the non-negative grid in float64,
// the grid extended by 480 (where 0x7f would be were it not NaN): nearest,
// ties to the even code; 480 or beyond is NaN, as torch.
func e4m3Ref(x float64) uint8 {
	if math.IsNaN(x) {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(x) {
		sign, x = 0x80, -x
	}
	if x >= 480 {
		return sign | 0x7f
	}
	grid := func(c int) float64 {
		if c == 0x7f {
			return 480
		}
		return e4m3Value(c)
	}
	best := 0
	for c := 1; c <= 0x7f; c++ {
		d, db := math.Abs(grid(c)-x), math.Abs(grid(best)-x)
		if d < db || (d == db && c%2 == 0) {
			best = c
		}
	}
	return sign | uint8(best)
}

func TestFP8E4M3DecodeAllCodes(t *testing.T) {
	nans := 0
	for c := 0; c < 256; c++ {
		got, want := float64(F32FromF8E4M3(uint8(c))), e4m3Value(c)
		if math.IsNaN(want) {
			nans++
			if !math.IsNaN(got) {
				t.Errorf("code %#02x: %v, want NaN", c, got)
			}
			continue
		}
		if got != want || math.Signbit(got) != (c&0x80 != 0) {
			t.Errorf("code %#02x: %v, want %v", c, got, want)
		}
	}
	if nans != 2 {
		t.Errorf("%d NaN codes, want 2 (0x7f, 0xff)", nans)
	}
	if F32FromF8E4M3(0x7e) != 448 || F32FromF8E4M3(0x01) != 1.0/512 || F32FromF8E4M3(0x08) != 1.0/64 {
		t.Errorf("max %v, min subnormal %v, min normal %v", F32FromF8E4M3(0x7e), F32FromF8E4M3(0x01), F32FromF8E4M3(0x08))
	}
}

func TestFP8E4M3RoundTripAllCodes(t *testing.T) {
	for c := 0; c < 256; c++ {
		v := F32FromF8E4M3(uint8(c))
		got := F8E4M3FromF32(v)
		if got != uint8(c) {
			t.Errorf("code %#02x (%v) encodes to %#02x", c, v, got)
		}
	}
}

// Every midpoint between neighbours goes to the even code, and a hair either
// side goes to the nearer one; in the subnormal range too.
func TestFP8E4M3TiesToEven(t *testing.T) {
	for _, sign := range []float64{1, -1} {
		for c := 0; c < 0x7e; c++ {
			lo, hi := e4m3Value(c), e4m3Value(c+1)
			mid := (lo + hi) / 2
			even := uint8(c)
			if c%2 == 1 {
				even = uint8(c + 1)
			}
			s := uint8(0)
			if sign < 0 {
				s = 0x80
			}
			if got := F8E4M3FromF32(float32(sign * mid)); got != s|even {
				t.Errorf("midpoint %v of %#02x,%#02x: %#02x, want %#02x", sign*mid, c, c+1, got, s|even)
			}
			below := math.Nextafter32(float32(mid), 0)
			above := math.Nextafter32(float32(mid), float32(math.Inf(1)))
			if got := F8E4M3FromF32(float32(sign) * below); got != s|uint8(c) {
				t.Errorf("just below %v: %#02x, want %#02x", sign*mid, got, s|uint8(c))
			}
			if got := F8E4M3FromF32(float32(sign) * above); got != s|uint8(c+1) {
				t.Errorf("just above %v: %#02x, want %#02x", sign*mid, got, s|uint8(c+1))
			}
		}
	}
}

// Out of range: torch makes NaN, not ±448, once a value rounds past 448.
func TestFP8E4M3OverflowAndNaN(t *testing.T) {
	cases := []struct {
		in   float32
		want uint8
	}{
		{448, 0x7e}, {460, 0x7e}, {464, 0x7e}, // 464 is the tie 448|480: even is 448
		{math.Nextafter32(464, 500), 0x7f}, {479, 0x7f}, {480, 0x7f}, {1e6, 0x7f},
		{-464, 0xfe}, {-465, 0xff}, {float32(math.Inf(1)), 0x7f}, {float32(math.Inf(-1)), 0xff},
		{float32(math.NaN()), 0x7f}, {0, 0}, {float32(math.Copysign(0, -1)), 0x80},
		{1.0 / 1024, 0}, {math.Nextafter32(1.0/1024, 1), 0x01}, {3.0 / 1024, 0x02}, // ties at the bottom
		{1e-30, 0}, {-1e-30, 0x80},
	}
	for _, c := range cases {
		if got := F8E4M3FromF32(c.in); got != c.want {
			t.Errorf("F8E4M3FromF32(%v) = %#02x, want %#02x", c.in, got, c.want)
		}
	}
	for _, in := range []float32{465, 1e6, float32(math.Inf(1))} {
		if got := F8E4M3Sat(in); got != 0x7e {
			t.Errorf("F8E4M3Sat(%v) = %#02x, want 0x7e", in, got)
		}
		if got := F8E4M3Sat(-in); got != 0xfe {
			t.Errorf("F8E4M3Sat(%v) = %#02x, want 0xfe", -in, got)
		}
	}
	if got := F8E4M3Sat(float32(math.NaN())); got&0x7f != 0x7f {
		t.Errorf("F8E4M3Sat(NaN) = %#02x", got)
	}
}

// Random values over the whole range, subnormals included, against the
// float64 search.
func TestFP8E4M3RandomAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		x := float32(math.Ldexp(r.Float64()*2-1, r.IntN(24)-14))
		if got, want := F8E4M3FromF32(x), e4m3Ref(float64(x)); got != want {
			t.Fatalf("F8E4M3FromF32(%v) = %#02x, want %#02x", x, got, want)
		}
	}
}

func TestFP8QuantizeRows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols = 7, 300
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * float32(i/cols+1) * 0.01
	}
	for i := range cols { // row 3 all zero
		w[3*cols+i] = 0
	}
	q, sc := make([]uint8, len(w)), make([]float32, rows)
	QuantizeF8E4M3Rows(q, sc, w, rows, cols)
	for ro := 0; ro < rows; ro++ {
		var num, den, amax float64
		for i := 0; i < cols; i++ {
			v := float64(w[ro*cols+i])
			d := float64(F32FromF8E4M3(q[ro*cols+i])) * float64(sc[ro])
			num += (d - v) * (d - v)
			den += v * v
			amax = max(amax, math.Abs(v))
		}
		if ro == 3 {
			if sc[ro] != 1 || num != 0 {
				t.Errorf("zero row: scale %v, error %v", sc[ro], num)
			}
			continue
		}
		if math.Abs(float64(sc[ro])*F8E4M3Max-amax) > 1e-6*amax {
			t.Errorf("row %d: scale %v for amax %v", ro, sc[ro], amax)
		}
		// E4M3 keeps 3 mantissa bits: relative error ≤ 2⁻⁴ a value, a few
		// per cent in L2 over a Gaussian row.
		if rel := math.Sqrt(num / den); rel > 0.04 {
			t.Errorf("row %d: relative L2 %v", ro, rel)
		}
	}
}
