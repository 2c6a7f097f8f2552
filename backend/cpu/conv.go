package cpu

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// convBudget bounds the im2col buffer (in floats).
const convBudget = 1 << 23

func (be *Backend) Conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams) error {
	return be.conv3d(dst, x, w, bias, p, convBudget)
}

// conv3d lowers the convolution to GEMMs over im2col chunks of at most
// budget floats.
func (be *Backend) conv3d(dst, x, w, bias *tensor.Tensor, p tensor.ConvParams, budget int) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt || w.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("conv3d", dt)
	}
	if x.Rank() != 5 || w.Rank() != 5 || dst.Rank() != 5 {
		return fmt.Errorf("cpu: conv3d wants 5-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	xs, ws, os := x.Shape(), w.Shape(), dst.Shape()
	B, Cin, Cout := xs[0], xs[1], ws[0]
	if ws[1] != Cin || os[0] != B || os[1] != Cout || (bias != nil && bias.Numel() != Cout) {
		return fmt.Errorf("cpu: conv3d of %v by %v (bias %v) into %v", x, w, bias, dst)
	}
	var g convGeom
	for i := 0; i < 3; i++ {
		st := max(p.Stride[i], 1)
		g.in[i], g.k[i], g.out[i], g.st[i], g.pad[i] = xs[2+i], ws[2+i], os[2+i], st, p.Padding[i]
		if (g.in[i]+2*g.pad[i]-g.k[i])/st+1 != g.out[i] || g.in[i]+2*g.pad[i] < g.k[i] {
			return fmt.Errorf("cpu: conv3d output %v does not fit input %v, kernel %v, %+v", os, xs, ws, p)
		}
	}
	g.cin = Cin
	return be.inF32(dst, []*tensor.Tensor{x, w, bias}, func(tm *temps, in [][]float32, out []float32) {
		xf, wf, bf := in[0], in[1], in[2]
		inN := Cin * g.in[0] * g.in[1] * g.in[2]
		P := g.out[0] * g.out[1] * g.out[2]
		Kc := Cin * g.k[0] * g.k[1] * g.k[2]
		pointwise := g.k == [3]int{1, 1, 1} && g.st == [3]int{1, 1, 1} && g.pad == [3]int{}
		shifted := !pointwise && g.st == [3]int{1, 1, 1} && convShift &&
			(Cin >= shiftMinCin || Cin >= shiftFewOutMinCin && Cout <= shiftFewOutMaxCout)
		var xp, wt []float32
		if shifted {
			taps := g.k[0] * g.k[1] * g.k[2]
			wt = tm.alloc(taps * Cout * Cin)
			be.parallel(Cout, 1, func(lo, hi int) {
				for co := lo; co < hi; co++ {
					for ci := 0; ci < Cin; ci++ {
						src := wf[(co*Cin+ci)*taps:][:taps]
						for tap, v := range src {
							wt[(tap*Cout+co)*Cin+ci] = v
						}
					}
				}
			})
			if g.pad != [3]int{} { // unpadded: the GEMMs read x itself
				xp = tm.alloc(Cin * (g.in[0] + 2*g.pad[0]) * (g.in[1] + 2*g.pad[1]) * (g.in[2] + 2*g.pad[2]))
			}
		}
		var col []float32
		pc := P
		if !pointwise && !shifted {
			pc = max(1, min(P, budget/max(Kc, 1)))
			col = tm.alloc(Kc * pc)
		}
		for b := 0; b < B; b++ {
			xb := xf[b*inN : (b+1)*inN]
			ob := out[b*Cout*P : (b+1)*Cout*P]
			switch {
			case pointwise:
				be.gemm(false, false, Cout, P, Cin, 1, wf, Cin, xb, P, 0, ob, P)
			case shifted:
				if xp == nil {
					be.convShifted(ob, xb, wt, &g, Cout, tm)
				} else {
					be.padInput(xp, xb, &g)
					be.convShifted(ob, xp, wt, &g, Cout, tm)
				}
			default:
				for p0 := 0; p0 < P; p0 += pc {
					n := min(pc, P-p0)
					be.im2col(col[:Kc*n], xb, &g, p0, n)
					be.gemm(false, false, Cout, n, Kc, 1, wf, Kc, col, n, 0, ob[p0:], P)
				}
			}
			if bf != nil {
				be.parallel(Cout, 1, func(lo, hi int) {
					for c := lo; c < hi; c++ {
						v := bf[c]
						row := ob[c*P : (c+1)*P]
						for i := range row {
							row[i] += v
						}
					}
				})
			}
		}
	})
}

type convGeom struct {
	cin                 int
	in, k, out, st, pad [3]int
}

// im2col fills col (Kc × n, row-major) with the input values that output
// positions [p0, p0+n) see through each kernel tap, zero outside the input.
func (be *Backend) im2col(col, x []float32, g *convGeom, p0, n int) {
	taps := g.k[0] * g.k[1] * g.k[2]
	Kc := g.cin * taps
	inHW := g.in[1] * g.in[2]
	be.parallel(Kc, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			c, tap := r/taps, r%taps
			kt, kh, kw := tap/(g.k[1]*g.k[2]), (tap/g.k[2])%g.k[1], tap%g.k[2]
			xc := x[c*g.in[0]*inHW : (c+1)*g.in[0]*inHW]
			row := col[r*n : (r+1)*n]
			// Walk output positions from p0, a W-row segment at a time.
			ot := p0 / (g.out[1] * g.out[2])
			oh := (p0 / g.out[2]) % g.out[1]
			ow := p0 % g.out[2]
			for i := 0; i < n; {
				seg := min(n-i, g.out[2]-ow)
				ti := ot*g.st[0] - g.pad[0] + kt
				hin := oh*g.st[1] - g.pad[1] + kh
				dst := row[i : i+seg]
				if ti < 0 || ti >= g.in[0] || hin < 0 || hin >= g.in[1] {
					clear(dst)
				} else {
					src := xc[ti*inHW+hin*g.in[2] : ti*inHW+(hin+1)*g.in[2]]
					// Output j reads wi = w0 + j·stride; only [jlo, jhi) lands
					// inside the row, the rest is padding.
					w0, sw := ow*g.st[2]-g.pad[2]+kw, g.st[2]
					jlo := 0
					if w0 < 0 {
						jlo = min(seg, (-w0+sw-1)/sw)
					}
					jhi := max(jlo, min(seg, (g.in[2]-w0+sw-1)/sw))
					clear(dst[:jlo])
					clear(dst[jhi:])
					if sw == 1 {
						copy(dst[jlo:jhi], src[w0+jlo:])
					} else {
						for j, wi := jlo, w0+jlo*sw; j < jhi; j, wi = j+1, wi+sw {
							dst[j] = src[wi]
						}
					}
				}
				i += seg
				ow = 0
				if oh++; oh == g.out[1] {
					oh = 0
					ot++
				}
			}
		}
	})
}

// convShifted computes one batch item of a stride-1 convolution without
// im2col: with the input zero-padded into xp (Cin, Tp, Hp, Wp; the input
// itself when the convolution has no padding), every
// kernel tap is one GEMM of the tap's weights (Cout × Cin) with the padded
// input shifted by the tap's offset, accumulated over taps on the padded
// output grid; the valid positions are then copied out. wt holds the
// weights tap-major (taps, Cout, Cin).
func (be *Backend) convShifted(ob, xp, wt []float32, g *convGeom, cout int, tm *temps) {
	tp, hp, wp := g.in[0]+2*g.pad[0], g.in[1]+2*g.pad[1], g.in[2]+2*g.pad[2]
	np := tp * hp * wp
	to, ho, wo := g.out[0], g.out[1], g.out[2]
	// padded-grid columns that hold every valid output position
	qmax := (to-1)*hp*wp + (ho-1)*wp + wo
	nc := max(1, min(qmax, convBudget/4/max(cout, 1)))
	c := tm.alloc(cout * nc)
	taps := g.k[0] * g.k[1] * g.k[2]
	cin := g.cin
	for q0 := 0; q0 < qmax; q0 += nc {
		n := min(nc, qmax-q0)
		for tap := 0; tap < taps; tap++ {
			kt, kh, kw := tap/(g.k[1]*g.k[2]), (tap/g.k[2])%g.k[1], tap%g.k[2]
			off := kt*hp*wp + kh*wp + kw
			beta := float32(1)
			if tap == 0 {
				beta = 0
			}
			be.gemm(false, false, cout, n, cin, 1, wt[tap*cout*cin:], cin, xp[off+q0:], np, beta, c, n)
		}
		// copy the valid columns of this chunk out
		be.parallel(cout, 1, func(lo, hi int) {
			for co := lo; co < hi; co++ {
				row := c[co*n : (co+1)*n]
				for j := 0; j < n; {
					q := q0 + j
					t, h, w := q/(hp*wp), (q/wp)%hp, q%wp
					seg := min(n-j, wp-w)
					if t < to && h < ho && w < wo {
						m := min(seg, wo-w)
						copy(ob[co*to*ho*wo+(t*ho+h)*wo+w:][:m], row[j:j+m])
					}
					j += seg
				}
			}
		})
	}
}

// shiftMinCin is the input channel count from which the shifted GEMMs (K =
// Cin) beat im2col (K = Cin·taps, but every input value copied per tap).
// With few output channels the im2col GEMM is bound by copying its matrix
// (and the library packing it again), so the shifted GEMMs win from fewer
// input channels: twice as fast at 16 in and 16 out, three times at 16 in
// and 3 out, level at 16 in and 64 out, slower from 128 out (a small
// model's VAE decoder against the real one's conv_in; BenchmarkConv3d).
const (
	shiftMinCin        = 32
	shiftFewOutMinCin  = 8
	shiftFewOutMaxCout = 32
)

// convShift enables the shifted path (tests and benchmarks turn it off to
// cover and compare im2col).
var convShift = true

// padInput copies x (Cin, T, H, W) into the zero-padded xp.
func (be *Backend) padInput(xp, x []float32, g *convGeom) {
	t, h, w := g.in[0], g.in[1], g.in[2]
	tp, hp, wp := t+2*g.pad[0], h+2*g.pad[1], w+2*g.pad[2]
	be.parallel(g.cin, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			dst := xp[c*tp*hp*wp : (c+1)*tp*hp*wp]
			clear(dst)
			src := x[c*t*h*w : (c+1)*t*h*w]
			for i := 0; i < t; i++ {
				for j := 0; j < h; j++ {
					copy(dst[((i+g.pad[0])*hp+j+g.pad[1])*wp+g.pad[2]:][:w], src[(i*h+j)*w:][:w])
				}
			}
		}
	})
}

// Conv2d is the 2-D cross-correlation of frames, the conv3d chain's conv2d
// tier's one primitive: dst (N, Cout, Ho, Wo) = x (N, Cin, H, W) ⋆ w (Cout,
// Cin, kH, kW) + bias, zero padding and stride (H, W); with accumulate it
// is added to what dst holds (through a temporary and one add: the
// product is rounded once, then the sum). It is conv3d's kernel on frames
// of depth one.
func (be *Backend) Conv2d(dst, x, w, bias *tensor.Tensor, stride, pad [2]int, accumulate bool) error {
	if x.Rank() != 4 || w.Rank() != 4 || dst.Rank() != 4 {
		return fmt.Errorf("cpu: conv2d wants 4-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	as5 := func(t *tensor.Tensor) *tensor.Tensor {
		s := t.Shape()
		return t.Reshape(s[0], s[1], 1, s[2], s[3])
	}
	p := tensor.ConvParams{Stride: [3]int{1, stride[0], stride[1]}, Padding: [3]int{0, pad[0], pad[1]}}
	if !accumulate {
		return be.Conv3d(as5(dst), as5(x), as5(w), bias, p)
	}
	tmp := tensor.New(dst.DType(), dst.Shape()...)
	if err := be.Conv3d(as5(tmp), as5(x), as5(w), bias, p); err != nil {
		return err
	}
	st := tensor.ContiguousStrides(dst.Shape())
	return be.Binary(tensor.OpAdd, dst, dst, st, tmp, st)
}
