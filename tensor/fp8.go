package tensor

import "math"

// F8E4M3 is OCP FP8 E4M3 ("e4m3fn", torch.float8_e4m3fn): 1 sign, 4
// exponent (bias 7) and 3 mantissa bits, no infinities, max ±448, NaN is
// S.1111.111. It is a storage type for weights: ops compute in F32/F16/BF16.

// F8E4M3Max is the largest finite E4M3 value.
const F8E4M3Max = 448

// F8E4M3FromF32 rounds f to E4M3 with round-to-nearest-even, exactly as
// torch's to(torch.float8_e4m3fn) does (c10/util/Float8_e4m3fn.h): no
// saturation. A finite value that rounds beyond 448 (|f| > 464), ±Inf and
// NaN all become NaN (0x7f with f's sign). Quantizers that must not make
// NaNs scale first (F8E4M3Sat clamps).
func F8E4M3FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	b &^= 0x80000000
	switch {
	case b >= 1087<<20: // |f| ≥ 480 (the first value past 0x7f's), Inf, NaN
		return sign | 0x7f
	case b < 121<<23: // |f| < 2⁻⁶: subnormal. Adding 2¹⁴ lines the FPU's
		// own round-to-nearest-even up with E4M3's last subnormal bit (2⁻⁹).
		const denorm = 141 << 23
		r := math.Float32bits(math.Float32frombits(b)+math.Float32frombits(denorm)) - denorm
		return sign | uint8(r)
	}
	// Normal: rebias the exponent (127 → 7) and round the 20 dropped
	// mantissa bits to nearest even; a carry into 0x7f gives NaN as torch.
	b += 0xc407ffff + (b>>20)&1
	return sign | uint8(b>>20)
}

// F8E4M3Sat is F8E4M3FromF32 after clamping f to ±448 (NaN stays NaN): the
// saturating conversion quantizers use.
func F8E4M3Sat(f float32) uint8 {
	if f > F8E4M3Max {
		f = F8E4M3Max
	} else if f < -F8E4M3Max {
		f = -F8E4M3Max
	}
	return F8E4M3FromF32(f)
}

// f8e4m3Table widens every E4M3 code exactly.
var f8e4m3Table = func() *[256]float32 {
	var t [256]float32
	for c := range t {
		e, m := (c>>3)&15, c&7
		var v float32
		switch {
		case e == 15 && m == 7:
			v = float32(math.NaN())
		case e == 0:
			v = float32(math.Ldexp(float64(m), -9))
		default:
			v = float32(math.Ldexp(float64(8+m), e-10))
		}
		if c&0x80 != 0 {
			v = -v
		}
		t[c] = v
	}
	return &t
}()

// F32FromF8E4M3 widens an E4M3 code exactly (NaN codes give NaN).
func F32FromF8E4M3(c uint8) float32 { return f8e4m3Table[c] }

// WidenF8E4M3 converts E4M3 codes to float32.
func WidenF8E4M3(dst []float32, src []uint8) {
	t := f8e4m3Table
	for i, c := range src[:len(dst)] {
		dst[i] = t[c]
	}
}

// WidenF8E4M3Scaled converts E4M3 codes to float32 times scale (one
// dequantized weight row).
func WidenF8E4M3Scaled(dst []float32, src []uint8, scale float32) {
	t := f8e4m3Table
	for i, c := range src[:len(dst)] {
		dst[i] = t[c] * scale
	}
}

// NarrowF8E4M3 rounds float32 values to E4M3 as F8E4M3FromF32 does.
func NarrowF8E4M3(dst []uint8, src []float32) {
	for i, f := range src[:len(dst)] {
		dst[i] = F8E4M3FromF32(f)
	}
}

// QuantizeF8E4M3Rows quantizes a (rows, cols) matrix row by row with a
// per-row (per output channel) scale amax/448, so that q·scale ≈ w; an
// all-zero row has scale 1. Values saturate rather than turning into NaN.
func QuantizeF8E4M3Rows(q []uint8, scale []float32, w []float32, rows, cols int) {
	for r := 0; r < rows; r++ {
		row := w[r*cols : (r+1)*cols]
		// |v|'s bits order as the values do, and a NaN's lie above
		// every number's (so a NaN makes the scale 1, as max would).
		var abits uint32
		for _, v := range row {
			abits = max(abits, math.Float32bits(v)&0x7fffffff)
		}
		amax := math.Float32frombits(abits)
		s := amax / F8E4M3Max
		if s == 0 || math.IsInf(float64(s), 0) || math.IsNaN(float64(s)) {
			s = 1
		}
		scale[r] = s
		inv := 1 / s
		out := q[r*cols : (r+1)*cols]
		for i, v := range row {
			out[i] = F8E4M3Sat(v * inv)
		}
	}
}
