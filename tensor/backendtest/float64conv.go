package backendtest

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// VAEConvCases are the 3-D convolutions of the two video VAEs at small
// sizes: HunyuanVideo's causal 3×3×3 (its time padding a copy, so none in
// the convolution), its encoder's downsampler (stride 2 in time and
// space), Wan 2.1's time convolutions (3×1×1, stride 1 in the decoder and
// 2 in the encoder), its per-frame 3×3 resampler (stride 2) and 1×1×1
// shortcuts, and a symmetric time padding.
var VAEConvCases = []ConvCase{
	{[]int{1, 8, 6, 10, 9}, []int{16, 8, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{0, 1, 1}, true},
	{[]int{1, 8, 7, 12, 10}, []int{8, 8, 3, 3, 3}, [3]int{2, 2, 2}, [3]int{0, 0, 0}, true},
	{[]int{1, 16, 6, 5, 7}, []int{32, 16, 3, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
	{[]int{1, 16, 7, 5, 7}, []int{16, 16, 3, 1, 1}, [3]int{2, 1, 1}, [3]int{0, 0, 0}, true},
	{[]int{1, 8, 3, 12, 13}, []int{8, 8, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{0, 0, 0}, true},
	{[]int{2, 12, 4, 6, 5}, []int{24, 12, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, false},
	{[]int{2, 6, 5, 7, 8}, []int{4, 6, 3, 3, 3}, [3]int{2, 1, 2}, [3]int{1, 1, 0}, true},
}

func (c ConvCase) String() string {
	return fmt.Sprintf("x%s w%s s%s p%s bias=%v", shapeName(c.X), shapeName(c.W), shapeName(c.Stride[:]), shapeName(c.Pad[:]), c.WithBias)
}

// Float64Limit is the relative L2 error a convolution in dt may have
// against float64 math on the same rounded inputs: a few output roundings
// (a sum over taps in the output rounds once a tap).
func Float64Limit(dt tensor.DType) float64 {
	switch dt {
	case tensor.F16:
		return 2e-3
	case tensor.BF16:
		return 1.6e-2
	}
	return 1e-5
}

// ConvAgainstFloat64 runs the conv3d cases (ConvCases and VAEConvCases) on
// be's Conv3d in every float dtype against float64 math on the same
// rounded inputs, and logs "<label>: <case> rel_l2 <x>" for each; a
// relative L2 error above Float64Limit fails.
func ConvAgainstFloat64(t *testing.T, be tensor.Backend, label string) {
	t.Helper()
	e := &Env{T: t, Got: be}
	for ci, c := range append(append([]ConvCase(nil), ConvCases...), VAEConvCases...) {
		for _, dt := range floats {
			e.Rng = newRand(int64(ci))
			x := e.Rand(dt, -1, 1, c.X...)
			w := e.Rand(dt, -1, 1, c.W...)
			var b *tensor.Tensor
			if c.WithBias {
				b = e.Rand(dt, -1, 1, c.W[0])
			}
			want, os := conv3dFloat64(x, w, b, c.Stride, c.Pad)
			dst, err := tensor.Alloc(be, dt, os...)
			if err != nil {
				t.Fatal(err)
			}
			if err := be.Fill(dst, math.NaN()); err != nil {
				t.Fatal(err)
			}
			var bd *tensor.Tensor
			if b != nil {
				bd = e.On(be, b)
			}
			if err := be.Conv3d(dst, e.On(be, x), e.On(be, w), bd, tensor.ConvParams{Stride: c.Stride, Padding: c.Pad}); err != nil {
				t.Fatalf("%s %v: %v", dt, c, err)
			}
			if err := be.Sync(); err != nil {
				t.Fatal(err)
			}
			got := tensor.ToHost(dst).ToFloat32()
			tensor.Release(dst)
			var d2, r2 float64
			for i, g := range got {
				d := float64(g) - want[i]
				d2 += d * d
				r2 += want[i] * want[i]
			}
			rel := math.Sqrt(d2 / r2)
			t.Logf("%s: %s %v rel_l2 %.3g", label, dt, c, rel)
			if !(rel <= Float64Limit(dt)) {
				t.Errorf("%s: %s %v: rel_l2 %.3g above %.3g", label, dt, c, rel, Float64Limit(dt))
			}
		}
	}
}

// conv3dFloat64 is the cross-correlation of host tensors in float64, and
// its output shape.
func conv3dFloat64(x, w, b *tensor.Tensor, st, pad [3]int) ([]float64, []int) {
	xs, ws := x.Shape(), w.Shape()
	xv, wv := x.ToFloat32(), w.ToFloat32()
	var bv []float32
	if b != nil {
		bv = b.ToFloat32()
	}
	os := []int{xs[0], ws[0], 0, 0, 0}
	for i := 0; i < 3; i++ {
		st[i] = max(st[i], 1)
		os[2+i] = (xs[2+i]+2*pad[i]-ws[2+i])/st[i] + 1
	}
	out := make([]float64, tensor.Numel(os))
	xst, wst := tensor.ContiguousStrides(xs), tensor.ContiguousStrides(ws)
	i := 0
	for n := 0; n < os[0]; n++ {
		for k := 0; k < os[1]; k++ {
			for ot := 0; ot < os[2]; ot++ {
				for oh := 0; oh < os[3]; oh++ {
					for ow := 0; ow < os[4]; ow++ {
						var s float64
						if bv != nil {
							s = float64(bv[k])
						}
						for c := 0; c < xs[1]; c++ {
							for kt := 0; kt < ws[2]; kt++ {
								ti := ot*st[0] - pad[0] + kt
								if ti < 0 || ti >= xs[2] {
									continue
								}
								for kh := 0; kh < ws[3]; kh++ {
									hi := oh*st[1] - pad[1] + kh
									if hi < 0 || hi >= xs[3] {
										continue
									}
									for kw := 0; kw < ws[4]; kw++ {
										wi := ow*st[2] - pad[2] + kw
										if wi < 0 || wi >= xs[4] {
											continue
										}
										s += float64(xv[n*xst[0]+c*xst[1]+ti*xst[2]+hi*xst[3]+wi]) *
											float64(wv[k*wst[0]+c*wst[1]+kt*wst[2]+kh*wst[3]+kw])
									}
								}
							}
						}
						out[i] = s
						i++
					}
				}
			}
		}
	}
	return out, os
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }
