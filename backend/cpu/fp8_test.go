package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

func TestFP8Cast(t *testing.T) {
	_, s := scope(t)
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	q, err := tensor.FromBytes(tensor.F8E4M3, codes, 16, 16)
	if err != nil {
		t.Fatal(err)
	}
	must(t, func() {
		q = s.To(q)
		for _, dt := range floatTypes { // every E4M3 value is exact in each
			got := values(s, s.Cast(q, dt))
			for c, g := range got {
				w := tensor.F32FromF8E4M3(uint8(c))
				if !(g == w || (math.IsNaN(float64(w)) && math.IsNaN(float64(g)))) {
					t.Errorf("%s: code %#02x widens to %v, want %v", dt, c, g, w)
				}
			}
		}
		r := rng(7)
		vals := randVals(r, tensor.F32, 4096, -500, 500)
		for i := range vals[:1024] {
			vals[i] *= 1e-3 // subnormals and small normals
		}
		for _, dt := range floatTypes {
			in := input(s, dt, vals, 4096)
			back := values(s, in)
			got := tensor.ToHost(s.Cast(in, tensor.F8E4M3)).HostBytes()
			for i, v := range back {
				if want := tensor.F8E4M3FromF32(v); got[i] != want {
					t.Errorf("%s: %v narrows to %#02x, want %#02x", dt, v, got[i], want)
				}
			}
		}
	})
}

// linearRef64 is x·wᵀ + bias for x (m, k) and w (n, k) read through the
// functions, in float64, with each element's scale (Σ|x·w| + |bias|) for
// the tolerance.
func linearRef64(m, n, k int, x, w func(row, col int) float64, bias []float32) (want, scale []float64) {
	want, scale = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc, abs float64
			for p := 0; p < k; p++ {
				prod := x(i, p) * w(j, p)
				acc += prod
				abs += math.Abs(prod)
			}
			want[i*n+j], scale[i*n+j] = acc+float64(bias[j]), abs+math.Abs(float64(bias[j]))
		}
	}
	return want, scale
}

// randCodes are n random E4M3 codes, NaN's (S.1111.111) replaced by 0x3f.
func randCodes(r *rand.Rand, n int) []byte {
	c := make([]byte, n)
	for i := range c {
		if c[i] = byte(r.IntN(256)); c[i]&0x7f == 0x7f {
			c[i] = 0x3f
		}
	}
	return c
}

// hidden hides the backend's optional capabilities (the Scope's fallback).
type hidden struct{ tensor.Backend }

func TestFP8Linear(t *testing.T) {
	be, s := scope(t)
	r := rng(11)
	for _, sz := range [][3]int{{1, 1, 1}, {5, 7, 33}, {33, 65, 17}, {64, 300, 129}} {
		m, n, k := sz[0], sz[1], sz[2]
		codes := randCodes(r, n*k)
		scales := randVals(r, tensor.F32, n, 1e-3, 2e-2)
		wq, err := tensor.FromBytes(tensor.F8E4M3, codes, n, k)
		if err != nil {
			t.Fatal(err)
		}
		sc := tensor.FromFloat32(scales, n)
		for _, dt := range floatTypes {
			xv := randVals(r, dt, m*k, -1, 1)
			bv := randVals(r, dt, n, -1, 1)
			want, scale := linearRef64(m, n, k,
				func(i, p int) float64 { return float64(xv[i*k+p]) },
				func(j, p int) float64 { return float64(tensor.F32FromF8E4M3(codes[j*k+p])) * float64(scales[j]) }, bv)
			for _, sc2 := range []*tensor.Scope{s, tensor.NewScope(hidden{be})} {
				var got []float32
				must(t, func() {
					y := sc2.LinearFP8(input(sc2, dt, xv, m, k), sc2.To(wq), sc2.To(sc), input(sc2, dt, bv, n))
					got = values(sc2, y)
				})
				what := name("linear_fp8 ", dt, sz)
				if sc2 != s {
					what += " (dequantize first)"
				}
				tl := within(dt, scale)
				if sc2 != s && dt != tensor.F32 {
					tl.rel *= 2 // the dequantized weight is rounded to dt too
				}
				compare(t, what, got, want, tl)
				if sc2 != s {
					sc2.Close()
				}
			}
		}
	}
}

// nearestE4M3 is the E4M3 value nearest v in float64 (NaN codes aside),
// found by search: the reference for quantized codes.
func nearestE4M3(v float64) float64 {
	best := math.Inf(1)
	for c := 0; c < 256; c++ {
		f := float64(tensor.F32FromF8E4M3(uint8(c)))
		if !math.IsNaN(f) && math.Abs(f-v) < math.Abs(best-v) {
			best = f
		}
	}
	return best
}

// TestFP8QuantizeRows checks each row's scale (amax/448, 1 for a row of
// zeros or one holding an Inf or NaN) and that each code is the E4M3 value
// nearest x/scale in float64, saturated at ±448.
func TestFP8QuantizeRows(t *testing.T) {
	_, s := scope(t)
	r := rng(13)
	const m, k = 7, 97
	for _, dt := range floatTypes {
		vals := randVals(r, dt, m*k, -1, 1)
		for i := range vals {
			switch i / k {
			case 0:
				vals[i] *= 300 // amax well above 448 after no scaling: scaled down
			case 1:
				vals[i] = 0
			case 2:
				vals[i] *= 1e-4 // codes among the subnormals
			case 3:
				if i%k == 5 {
					vals[i] = float32(math.Inf(-1))
				}
			case 4:
				if i%k == 9 {
					vals[i] = float32(math.NaN())
				}
			}
		}
		var codes []byte
		var scales []float32
		xv := values(s, input(s, dt, vals, m, k)) // as rounded to dt
		must(t, func() {
			q, sc := s.QuantizeRowsFP8(input(s, dt, vals, m, k))
			codes, scales = tensor.ToHost(q).HostBytes(), values(s, sc)
		})
		for row := 0; row < m; row++ {
			x := xv[row*k : (row+1)*k]
			var amax float64
			bad := false
			for _, v := range x {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					bad = true
				}
				amax = math.Max(amax, math.Abs(float64(v)))
			}
			want := float32(amax) / 448
			if bad || amax == 0 {
				want = 1
			}
			if scales[row] != want {
				t.Errorf("%s row %d: scale %v, want %v", dt, row, scales[row], want)
				continue
			}
			for j, v := range x {
				c := codes[row*k+j]
				got := float64(tensor.F32FromF8E4M3(c))
				if math.IsNaN(float64(v)) {
					if !math.IsNaN(got) {
						t.Errorf("%s row %d col %d: NaN quantized to %v", dt, row, j, got)
					}
					continue
				}
				target := math.Max(-448, math.Min(448, float64(v)/float64(scales[row])))
				near := nearestE4M3(target)
				// A tie may go either way between float64's x/scale and x·(1/scale) in f32.
				if math.Abs(got-target) > math.Abs(near-target)*(1+1e-6)+1e-30 {
					t.Errorf("%s row %d col %d: %v/%v quantized to %v, nearest %v", dt, row, j, v, scales[row], got, near)
				}
			}
		}
	}
}

// TestFP8LinearScaled checks the scaled FP8 Linear against float64 math on
// the same codes and scales.
func TestFP8LinearScaled(t *testing.T) {
	be, s := scope(t)
	r := rng(17)
	for _, sz := range [][3]int{{1, 1, 1}, {5, 7, 33}, {33, 65, 48}} {
		m, n, k := sz[0], sz[1], sz[2]
		xc, wc := randCodes(r, m*k), randCodes(r, n*k)
		xs, ws := randVals(r, tensor.F32, m, 1e-3, 2e-2), randVals(r, tensor.F32, n, 1e-3, 2e-2)
		for _, dt := range floatTypes {
			bv := randVals(r, dt, n, -1, 1)
			// The scales folded into the operands: exact in float64.
			want, scale := linearRef64(m, n, k,
				func(i, p int) float64 { return float64(tensor.F32FromF8E4M3(xc[i*k+p])) * float64(xs[i]) },
				func(j, p int) float64 { return float64(tensor.F32FromF8E4M3(wc[j*k+p])) * float64(ws[j]) }, bv)
			var got []float32
			must(t, func() {
				xq, _ := tensor.FromBytes(tensor.F8E4M3, xc, m, k)
				wq, _ := tensor.FromBytes(tensor.F8E4M3, wc, n, k)
				out := s.Empty(dt, m, n)
				if err := be.LinearScaledFP8(out, s.To(xq), s.To(tensor.FromFloat32(xs, m)), s.To(wq), s.To(tensor.FromFloat32(ws, n)), input(s, dt, bv, n)); err != nil {
					t.Fatal(err)
				}
				got = values(s, out)
			})
			compare(t, name("linear_scaled_fp8 ", dt, sz), got, want, within(dt, scale))
		}
	}
}

// TestFP8LinearCompute checks the whole FP8-compute Linear against float64
// math on the unquantized input: the error is E4M3's rounding of x and w
// (3 mantissa bits), and it must differ from the weight-only Linear (the
// input really is quantized).
func TestFP8LinearCompute(t *testing.T) {
	_, s := scope(t)
	r := rng(19)
	const m, n, k = 40, 48, 256
	wv := randVals(r, tensor.F32, n*k, -1, 1)
	codes, scales := make([]byte, n*k), make([]float32, n)
	tensor.QuantizeF8E4M3Rows(codes, scales, wv, n, k)
	wq, err := tensor.FromBytes(tensor.F8E4M3, codes, n, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range floatTypes {
		xv := randVals(r, dt, m*k, -2, 2)
		bv := randVals(r, dt, n, -1, 1)
		want, _ := linearRef64(m, n, k,
			func(i, p int) float64 { return float64(xv[i*k+p]) },
			func(j, p int) float64 { return float64(wv[j*k+p]) }, bv)
		var got, weightOnly []float32
		must(t, func() {
			x, w, sc, b := input(s, dt, xv, m, k), s.To(wq), s.To(tensor.FromFloat32(scales, n)), input(s, dt, bv, n)
			got = values(s, s.LinearFP8Compute(x, w, sc, b))
			weightOnly = values(s, s.LinearFP8(x, w, sc, b))
		})
		var num, den, diff float64
		for i, w := range want {
			num += (float64(got[i]) - w) * (float64(got[i]) - w)
			den += w * w
			diff = math.Max(diff, math.Abs(float64(got[i]-weightOnly[i])))
		}
		rel := math.Sqrt(num / den)
		t.Logf("%s: rel L2 of FP8 compute against float64 %.4f", dt, rel)
		if rel > 4e-2 || math.IsNaN(rel) {
			t.Errorf("%s: rel L2 %.4f > 4e-2", dt, rel)
		}
		if diff == 0 {
			t.Errorf("%s: FP8 compute equals the weight-only Linear: the input was not quantized", dt)
		}
	}
}
