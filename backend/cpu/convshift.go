package cpu

// convShifted computes one batch item of a stride-1 convolution without
// im2col: with the input zero-padded into xp (Cin, Tp, Hp, Wp), every
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
const shiftMinCin = 32

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
