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
				asFloat64s(x.HostBytes())[i] = v
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
				got = asFloat64s(x.HostBytes())[i]
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
	if n, i := NonFinite(FromInt64([]int64{1, 2}, 2)); n != 0 || i != 0 {
		t.Errorf("int64: %d, %d", n, i)
	}
}
