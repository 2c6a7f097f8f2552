package tensor

import (
	"math"
	"strings"
	"testing"
)

// NonFinite against float64 math on every float dtype: the values are
// stored, read back widened to float64, and classified with math.IsNaN and
// math.IsInf.
func TestNonFinite(t *testing.T) {
	vals := []float64{0, 1, -2.5, math.NaN(), math.Inf(1), math.Inf(-1), 65504, -65504, 1e-7, math.NaN(), 3e38, 6e-8}
	for _, dt := range []DType{F32, F16, BF16, F64} {
		x := New(dt, len(vals))
		for i, v := range vals {
			switch dt {
			case F32:
				x.Float32s()[i] = float32(v)
			case F16:
				x.Uint16s()[i] = F16FromF32(float32(v))
			case BF16:
				x.Uint16s()[i] = BF16FromF32(float32(v))
			case F64:
				ViewAs[float64](x.HostBytes())[i] = v
			}
		}
		var wantNaN, wantInf int
		for i := range vals {
			var got float64
			switch dt {
			case F32:
				got = float64(x.Float32s()[i])
			case F16:
				got = float64(F32FromF16(x.Uint16s()[i]))
			case BF16:
				got = float64(F32FromBF16(x.Uint16s()[i]))
			case F64:
				got = ViewAs[float64](x.HostBytes())[i]
			}
			if math.IsNaN(got) {
				wantNaN++
			} else if math.IsInf(got, 0) {
				wantInf++
			}
		}
		nan, inf := NonFinite(x)
		if nan != wantNaN || inf != wantInf {
			t.Errorf("%s: NonFinite = %d NaN, %d Inf; float64 math says %d, %d", dt, nan, inf, wantNaN, wantInf)
		}
		if dt == F16 && wantInf != 3 { // 3e38 overflows f16 to +Inf; ±Inf stay
			t.Errorf("f16: %d Inf, want 3", wantInf)
		}
	}
	if err := NonFiniteError("ok", FromFloat32([]float32{1, 2}, 2)); err != nil {
		t.Errorf("finite values: %v", err)
	}
	err := NonFiniteError("section 2 latents", FromFloat32([]float32{1, float32(math.NaN()), float32(math.Inf(-1))}, 1, 3))
	if err == nil || !strings.Contains(err.Error(), "section 2 latents: 1 NaN and 1 Inf of 3 values") {
		t.Errorf("NonFiniteError = %v", err)
	}
	// A long tensor, counted over the cores: non-finite values at the ends
	// and around the split points.
	long := New(F32, 3<<20+7)
	v := long.Float32s()
	var wantNaN, wantInf int
	for _, i := range []int{0, 1 << 20, 1<<20 - 1, 3 << 19, 2<<20 + 1, len(v) - 1} {
		if i%2 == 0 {
			v[i] = float32(math.NaN())
		} else {
			v[i] = float32(math.Inf(1))
		}
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) {
			wantNaN++
		} else if math.IsInf(float64(x), 0) {
			wantInf++
		}
	}
	if n, i := NonFinite(long); n != wantNaN || i != wantInf {
		t.Errorf("long f32: %d NaN, %d Inf; float64 math says %d, %d", n, i, wantNaN, wantInf)
	}
	if n, i := NonFinite(FromInt64([]int64{1, 2}, 2)); n != 0 || i != 0 {
		t.Errorf("int64: %d, %d", n, i)
	}
}

// BenchmarkNonFinite checks the pixels of one 544×704 section of 37 frames
// (the real model's decode output at FramePack's 640 buckets).
func BenchmarkNonFinite(b *testing.B) {
	x := New(F32, 1, 3, 37, 544, 704)
	b.SetBytes(x.Bytes())
	for b.Loop() {
		NonFinite(x)
	}
}
