package cpu

import (
	"math"
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

// hidden hides the backend's optional capabilities (the Scope's fallback).
type hidden struct{ tensor.Backend }

func TestFP8Linear(t *testing.T) {
	be, s := scope(t)
	r := rng(11)
	for _, sz := range [][3]int{{1, 1, 1}, {5, 7, 33}, {33, 65, 17}, {64, 300, 129}} {
		m, n, k := sz[0], sz[1], sz[2]
		codes := make([]byte, n*k)
		for i := range codes {
			codes[i] = byte(r.IntN(256))
			if codes[i]&0x7f == 0x7f {
				codes[i] = 0x3f
			}
		}
		scales := randVals(r, tensor.F32, n, 1e-3, 2e-2)
		wq, err := tensor.FromBytes(tensor.F8E4M3, codes, n, k)
		if err != nil {
			t.Fatal(err)
		}
		sc := tensor.FromFloat32(scales, n)
		for _, dt := range floatTypes {
			xv := randVals(r, dt, m*k, -1, 1)
			bv := randVals(r, dt, n, -1, 1)
			want, scale := make([]float64, m*n), make([]float64, m*n)
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					var acc, abs float64
					for p := 0; p < k; p++ {
						w := float64(tensor.F32FromF8E4M3(codes[j*k+p])) * float64(scales[j])
						acc += float64(xv[i*k+p]) * w
						abs += math.Abs(float64(xv[i*k+p]) * w)
					}
					want[i*n+j], scale[i*n+j] = acc+float64(bv[j]), abs+math.Abs(float64(bv[j]))
				}
			}
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
