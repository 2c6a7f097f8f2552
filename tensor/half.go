package tensor

import (
	"math"

	"github.com/x448/float16"
)

// BF16FromF32 rounds f to bfloat16 with round-to-nearest-even (NaN stays NaN).
func BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F32FromBF16 widens a bfloat16 exactly.
func F32FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// RoundBF16 rounds f to the nearest bfloat16 value and returns it as float32.
func RoundBF16(f float32) float32 { return F32FromBF16(BF16FromF32(f)) }

// F16FromF32 rounds f to IEEE half with round-to-nearest-even.
func F16FromF32(f float32) uint16 { return uint16(float16.Fromfloat32(f)) }

// f16Table widens every half exactly; a lookup beats bit twiddling for slices.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = float16.Frombits(uint16(i)).Float32()
	}
	return &t
}()

// F32FromF16 widens an IEEE half exactly.
func F32FromF16(h uint16) float32 { return f16Table[h] }

// RoundF16 rounds f to the nearest half value and returns it as float32.
func RoundF16(f float32) float32 { return f16Table[F16FromF32(f)] }

// WidenF16 converts a slice of halves to float32.
func WidenF16(dst []float32, src []uint16) {
	t := f16Table
	for i, h := range src[:len(dst)] {
		dst[i] = t[h]
	}
}

// NarrowF16 rounds a float32 slice to halves.
func NarrowF16(dst []uint16, src []float32) {
	for i, f := range src[:len(dst)] {
		dst[i] = F16FromF32(f)
	}
}

// WidenBF16 converts a slice of bfloat16 to float32.
func WidenBF16(dst []float32, src []uint16) {
	for i, h := range src[:len(dst)] {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// NarrowBF16 rounds a float32 slice to bfloat16.
func NarrowBF16(dst []uint16, src []float32) {
	for i, f := range src[:len(dst)] {
		dst[i] = BF16FromF32(f)
	}
}

// Rounder is the rounding of an f32 value to dt's precision: RoundF16,
// RoundBF16, or the identity for f32 (and any other dtype).
func Rounder(dt DType) func(float32) float32 {
	switch dt {
	case F16:
		return RoundF16
	case BF16:
		return RoundBF16
	}
	return func(f float32) float32 { return f }
}
