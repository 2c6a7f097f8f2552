package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// matRef is alpha·op(a)·op(b) in float64 with the sum of |terms| as scale.
func matRef(a, b []float32, m, n, k int, tA, tB bool, alpha float64) (want, scale []float64) {
	want, scale = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, sa float64
			for p := 0; p < k; p++ {
				x := a[i*k+p]
				if tA {
					x = a[p*m+i]
				}
				y := b[p*n+j]
				if tB {
					y = b[j*k+p]
				}
				s += float64(x) * float64(y)
				sa += math.Abs(float64(x) * float64(y))
			}
			want[i*n+j], scale[i*n+j] = alpha*s, math.Abs(alpha)*sa
		}
	}
	return want, scale
}

func TestMatMul(t *testing.T) {
	be, s := scope(t)
	r := rng(10)
	sizes := [][3]int{{1, 1, 1}, {3, 7, 17}, {17, 1, 33}, {33, 17, 3}, {7, 33, 1}, {64, 65, 66}, {4, 5, 0}}
	for _, sz := range sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for _, dt := range floatTypes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, bc := range [][2]int{{2, 2}, {1, 3}, {3, 1}} { // batch of a and b
					batch := max(bc[0], bc[1])
					av := randVals(r, dt, bc[0]*m*k, -1, 1)
					bv := randVals(r, dt, bc[1]*k*n, -1, 1)
					ashape := []int{bc[0], m, k}
					if tr[0] {
						ashape = []int{bc[0], k, m}
					}
					bshape := []int{bc[1], k, n}
					if tr[1] {
						bshape = []int{bc[1], n, k}
					}
					a, b := input(s, dt, av, ashape...), input(s, dt, bv, bshape...)
					alpha := float32(0.5)
					y := s.Empty(dt, batch, m, n)
					p := tensor.MatMulParams{Batch: batch, M: m, N: n, K: k, TransA: tr[0], TransB: tr[1], Alpha: alpha}
					if err := be.MatMul(y, a, b, p); err != nil {
						t.Fatal(err)
					}
					got := values(s, y)
					for i := 0; i < batch; i++ {
						ai, bi := i%bc[0], i%bc[1]
						want, scale := matRef(av[ai*m*k:(ai+1)*m*k], bv[bi*k*n:(bi+1)*k*n], m, n, k, tr[0], tr[1], float64(alpha))
						compare(t, name("matmul ", dt, sz, tr, bc, " batch ", i), got[i*m*n:(i+1)*m*n], want, within(dt, scale))
					}
				}
			}
		}
	}
	// The Scope frontend: 4-D batch, and a 2-D b shared by every batch.
	av := randVals(r, tensor.F32, 2*3*5*4, -1, 1)
	bv := randVals(r, tensor.F32, 4*6, -1, 1)
	var y *tensor.Tensor
	must(t, func() {
		y = s.MatMul(input(s, tensor.F32, av, 2, 3, 5, 4), input(s, tensor.F32, bv, 4, 6), false, false)
	})
	if !slices.Equal(y.Shape(), []int{2, 3, 5, 6}) {
		t.Fatalf("shape %v", y.Shape())
	}
	for i := 0; i < 6; i++ {
		want, scale := matRef(av[i*20:(i+1)*20], bv, 5, 6, 4, false, false, 1)
		compare(t, "scope matmul", y.Float32s()[i*30:(i+1)*30], want, within(tensor.F32, scale))
	}
}

func TestLinear(t *testing.T) {
	_, s := scope(t)
	r := rng(11)
	for _, sz := range [][3]int{{1, 1, 1}, {3, 7, 17}, {33, 17, 1}, {5, 3, 64}, {70, 33, 129}} {
		m, n, k := sz[0], sz[1], sz[2]
		for _, dt := range floatTypes {
			for _, withBias := range []bool{false, true} {
				xv := randVals(r, dt, m*k, -1, 1)
				wv := randVals(r, dt, n*k, -1, 1)
				bv := randVals(r, dt, n, -1, 1)
				x, w := input(s, dt, xv, 1, m, k), input(s, dt, wv, n, k)
				var bias *tensor.Tensor
				if withBias {
					bias = input(s, dt, bv, n)
				}
				var y *tensor.Tensor
				must(t, func() { y = s.Linear(x, w, bias) })
				want, scale := matRef(xv, wv, m, n, k, false, true, 1)
				if withBias {
					for i := range want {
						want[i] += float64(bv[i%n])
						scale[i] += math.Abs(float64(bv[i%n]))
					}
				}
				compare(t, name("linear ", dt, sz, " bias ", withBias), values(s, y), want, within(dt, scale))
			}
		}
	}
}

// convRef is a direct float64 cross-correlation with zero padding.
func convRef(x []float32, xs []int, w []float32, ws []int, bias []float32, st, pad [3]int) (want, scale []float64, os []int) {
	B, Cin, Cout := xs[0], xs[1], ws[0]
	os = []int{B, Cout, 0, 0, 0}
	for i := 0; i < 3; i++ {
		os[2+i] = (xs[2+i]+2*pad[i]-ws[2+i])/st[i] + 1
	}
	n := tensor.Numel(os)
	want, scale = make([]float64, n), make([]float64, n)
	xst := tensor.ContiguousStrides(xs)
	wst := tensor.ContiguousStrides(ws)
	i := 0
	for b := 0; b < B; b++ {
		for co := 0; co < Cout; co++ {
			for ot := 0; ot < os[2]; ot++ {
				for oh := 0; oh < os[3]; oh++ {
					for ow := 0; ow < os[4]; ow++ {
						var s, sa float64
						if bias != nil {
							s, sa = float64(bias[co]), math.Abs(float64(bias[co]))
						}
						for ci := 0; ci < Cin; ci++ {
							for kt := 0; kt < ws[2]; kt++ {
								for kh := 0; kh < ws[3]; kh++ {
									for kw := 0; kw < ws[4]; kw++ {
										ti, hi, wi := ot*st[0]-pad[0]+kt, oh*st[1]-pad[1]+kh, ow*st[2]-pad[2]+kw
										if ti < 0 || hi < 0 || wi < 0 || ti >= xs[2] || hi >= xs[3] || wi >= xs[4] {
											continue
										}
										p := float64(x[b*xst[0]+ci*xst[1]+ti*xst[2]+hi*xst[3]+wi]) *
											float64(w[co*wst[0]+ci*wst[1]+kt*wst[2]+kh*wst[3]+kw])
										s += p
										sa += math.Abs(p)
									}
								}
							}
						}
						want[i], scale[i] = s, sa
						i++
					}
				}
			}
		}
	}
	return want, scale, os
}

// Conv2d, the conv2d tier's primitive, writes and adds to dst, against
// float64 math, in every dtype.
func TestConv2dFrames(t *testing.T) {
	be := backend(t)
	r := rng(15)
	xs, ws := []int{3, 5, 9, 8}, []int{4, 5, 3, 3}
	for _, dt := range floatTypes {
		for _, acc := range []bool{false, true} {
			xv, wv := randVals(r, dt, tensor.Numel(xs), -1, 1), randVals(r, dt, tensor.Numel(ws), -1, 1)
			bv := randVals(r, dt, ws[0], -1, 1)
			want, scale, os := convRef(xv, []int{3, 5, 1, 9, 8}, wv, []int{4, 5, 1, 3, 3}, bv, [3]int{1, 2, 1}, [3]int{0, 1, 1})
			ys := []int{os[0], os[1], os[3], os[4]}
			y0 := randVals(r, dt, tensor.Numel(ys), -1, 1)
			y := tensor.FromFloat32(append([]float32(nil), y0...), ys...)
			if acc {
				for i := range want {
					want[i] += float64(y0[i])
					scale[i] += math.Abs(float64(y0[i]))
				}
			}
			var got []float32
			must(t, func() {
				s := tensor.NewScope(be)
				defer s.Close()
				yd := s.Cast(y, dt)
				if err := be.Conv2d(yd, input(s, dt, xv, xs...), input(s, dt, wv, ws...), input(s, dt, bv, ws[0]), [2]int{2, 1}, [2]int{1, 1}, acc); err != nil {
					t.Fatal(err)
				}
				got = values(s, yd)
			})
			// Adding rounds the product once more before the sum.
			tl := within(dt, scale)
			if acc {
				tl.rel *= 2
			}
			compare(t, fmt.Sprintf("conv2d %s accumulate %v", dt, acc), got, want, tl)
		}
	}
}

func TestConv3d(t *testing.T) {
	_, s := scope(t)
	r := rng(12)
	cases := []struct {
		x, w     []int
		st, pad  [3]int
		withBias bool
	}{
		{[]int{1, 3, 4, 5, 6}, []int{4, 3, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
		{[]int{2, 2, 3, 7, 5}, []int{3, 2, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{0, 1, 1}, true},
		{[]int{1, 5, 3, 4, 4}, []int{7, 5, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, false}, // pointwise
		{[]int{2, 4, 5, 3, 3}, []int{2, 4, 3, 1, 1}, [3]int{2, 1, 1}, [3]int{2, 0, 0}, true},
		{[]int{1, 1, 1, 1, 1}, []int{1, 1, 1, 1, 1}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
		{[]int{1, 2, 2, 3, 3}, []int{3, 2, 2, 3, 3}, [3]int{3, 3, 3}, [3]int{1, 1, 1}, false},
		// few output channels: the shifted-GEMM path from 8 input channels
		{[]int{1, 16, 3, 9, 10}, []int{8, 16, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
		{[]int{2, 8, 2, 5, 7}, []int{3, 8, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 0, 1}, false},
		{[]int{1, 2, 2, 2, 2}, []int{3, 2, 1, 3, 3}, [3]int{1, 2, 2}, [3]int{1, 2, 2}, true}, // padding wider than the input
		{[]int{1, 3, 1, 5, 9}, []int{2, 3, 1, 2, 4}, [3]int{1, 3, 3}, [3]int{0, 3, 3}, false},
		// enough input channels for the shifted-GEMM path
		{[]int{2, 32, 3, 5, 6}, []int{8, 32, 3, 3, 3}, [3]int{1, 1, 1}, [3]int{1, 1, 1}, true},
		{[]int{1, 33, 4, 3, 7}, []int{5, 33, 2, 1, 3}, [3]int{1, 1, 1}, [3]int{0, 1, 2}, false},
		{[]int{1, 40, 1, 4, 4}, []int{3, 40, 1, 3, 3}, [3]int{1, 1, 1}, [3]int{0, 0, 0}, true},
	}
	defer func() { convShift = true }()
	for _, c := range cases {
		for _, dt := range floatTypes {
			for _, shift := range []bool{false, true} {
				convShift = shift
				xv := randVals(r, dt, tensor.Numel(c.x), -1, 1)
				wv := randVals(r, dt, tensor.Numel(c.w), -1, 1)
				bv := randVals(r, dt, c.w[0], -1, 1)
				var bias *tensor.Tensor
				var bref []float32
				if c.withBias {
					bias, bref = input(s, dt, bv, c.w[0]), bv
				}
				var y *tensor.Tensor
				must(t, func() {
					y = s.Conv3d(input(s, dt, xv, c.x...), input(s, dt, wv, c.w...), bias, c.st, c.pad)
				})
				want, scale, os := convRef(xv, c.x, wv, c.w, bref, c.st, c.pad)
				if !slices.Equal(y.Shape(), os) {
					t.Fatalf("conv3d %v: shape %v, want %v", c, y.Shape(), os)
				}
				compare(t, name("conv3d ", dt, c.x, c.w, c.st, c.pad, " shifted ", shift), values(s, y), want, within(dt, scale))
			}
		}
	}
}

// TestConv3dChunked forces the im2col buffer into several chunks.
func TestConv3dChunked(t *testing.T) {
	be, s := scope(t)
	r := rng(13)
	xs, ws := []int{1, 4, 3, 11, 13}, []int{5, 4, 3, 3, 3}
	xv, wv := randVals(r, tensor.F32, tensor.Numel(xs), -1, 1), randVals(r, tensor.F32, tensor.Numel(ws), -1, 1)
	want, scale, os := convRef(xv, xs, wv, ws, nil, [3]int{1, 1, 1}, [3]int{1, 1, 1})
	y := s.Empty(tensor.F32, os...)
	x, w := input(s, tensor.F32, xv, xs...), input(s, tensor.F32, wv, ws...)
	if err := be.conv3d(y, x, w, nil, tensor.ConvParams{Stride: [3]int{1, 1, 1}, Padding: [3]int{1, 1, 1}}, 108*37); err != nil {
		t.Fatal(err)
	}
	compare(t, "chunked conv3d", y.Float32s(), want, within(tensor.F32, scale))
}

func TestConv2d(t *testing.T) {
	_, s := scope(t)
	r := rng(14)
	xs, ws := []int{2, 3, 9, 8}, []int{4, 3, 3, 3}
	xv, wv := randVals(r, tensor.F32, tensor.Numel(xs), -1, 1), randVals(r, tensor.F32, tensor.Numel(ws), -1, 1)
	var y *tensor.Tensor
	must(t, func() {
		y = s.Conv2d(input(s, tensor.F32, xv, xs...), input(s, tensor.F32, wv, ws...), nil, [2]int{2, 2}, [2]int{1, 1})
	})
	want, scale, _ := convRef(xv, []int{2, 3, 1, 9, 8}, wv, []int{4, 3, 1, 3, 3}, nil, [3]int{1, 2, 2}, [3]int{0, 1, 1})
	compare(t, "conv2d", y.Float32s(), want, within(tensor.F32, scale))
}
