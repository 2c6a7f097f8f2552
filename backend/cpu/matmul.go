package cpu

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

func (be *Backend) MatMul(dst, a, b *tensor.Tensor, p tensor.MatMulParams) error {
	dt := dst.DType()
	if !isCompute(dt) || a.DType() != dt || b.DType() != dt {
		return unsupported("matmul", dt)
	}
	B, M, N, K := p.Batch, p.M, p.N, p.K
	if B < 0 || M < 0 || N < 0 || K < 0 || dst.Numel() != B*M*N {
		return fmt.Errorf("cpu: matmul %+v into %v", p, dst)
	}
	batchStride := func(t *tensor.Tensor, rows, cols int) (int, error) {
		switch t.Numel() {
		case rows * cols:
			return 0, nil
		case B * rows * cols:
			return rows * cols, nil
		}
		return 0, fmt.Errorf("cpu: matmul %+v: operand %v", p, t)
	}
	sa, err := batchStride(a, M, K)
	if err != nil {
		return err
	}
	sb, err := batchStride(b, K, N)
	if err != nil {
		return err
	}
	alpha := p.Alpha
	if alpha == 0 {
		alpha = 1
	}
	tm := be.temps()
	defer tm.release()
	fs, err := tm.widenAll(a, b)
	if err != nil {
		return err
	}
	af, bf := fs[0], fs[1]
	out, commit, err := tm.output(dst)
	if err != nil {
		return err
	}
	lda, ldb := K, N
	if p.TransA {
		lda = M
	}
	if p.TransB {
		ldb = K
	}
	if B > 1 && M*N*K < gemmGrain { // many small products: one per task
		be.tasks(B, func(_, i int) {
			be.gemmSerial(p.TransA, p.TransB, M, N, K, alpha, af[i*sa:], lda, bf[i*sb:], ldb, 0, out[i*M*N:], N)
		})
	} else {
		for i := 0; i < B; i++ {
			be.gemm(p.TransA, p.TransB, M, N, K, alpha, af[i*sa:], lda, bf[i*sb:], ldb, 0, out[i*M*N:], N)
		}
	}
	commit()
	return nil
}

func (be *Backend) Linear(dst, x, w, bias *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt || w.DType() != dt || (bias != nil && bias.DType() != dt) {
		return unsupported("linear", dt)
	}
	if x.Rank() != 2 || w.Rank() != 2 || dst.Rank() != 2 {
		return fmt.Errorf("cpu: linear wants 2-D x, w, dst; have %v, %v, %v", x, w, dst)
	}
	M, K, N := x.Dim(0), x.Dim(1), w.Dim(0)
	if w.Dim(1) != K || dst.Dim(0) != M || dst.Dim(1) != N || (bias != nil && bias.Numel() != N) {
		return fmt.Errorf("cpu: linear of %v by %v (bias %v) into %v", x, w, bias, dst)
	}
	tm := be.temps()
	defer tm.release()
	fs, err := tm.widenAll(x, bias)
	if err != nil {
		return err
	}
	xf, bf := fs[0], fs[1]
	out, commit, err := tm.output(dst)
	if err != nil {
		return err
	}
	if dt == tensor.F32 {
		wf, err := tm.widen(w)
		if err != nil {
			return err
		}
		be.gemm(false, true, M, N, K, 1, xf, K, wf, K, 0, out, N)
	} else {
		// Widen a half-precision weight a block of rows at a time, so a
		// large weight never exists twice in full.
		wb, err := raw(w)
		if err != nil {
			return err
		}
		wh := tensor.ViewAs[uint16](wb)
		rows := max(1, min(N, (1<<22)/max(K, 1)))
		tmp := tm.alloc(rows * K)
		for n0 := 0; n0 < N; n0 += rows {
			nr := min(rows, N-n0)
			be.widenInto(tmp[:nr*K], wh[n0*K:(n0+nr)*K], dt)
			be.gemm(false, true, M, nr, K, 1, xf, K, tmp, K, 0, out[n0:], N)
		}
	}
	if bf != nil {
		be.parallel(M, max(1, (1<<14)/max(N, 1)), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := out[i*N : (i+1)*N]
				for j, v := range bf[:N] {
					row[j] += v
				}
			}
		})
	}
	commit()
	return nil
}

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
	tm := be.temps()
	defer tm.release()
	fs, err := tm.widenAll(x, w, bias)
	if err != nil {
		return err
	}
	xf, wf, bf := fs[0], fs[1], fs[2]
	out, commit, err := tm.output(dst)
	if err != nil {
		return err
	}
	inN := Cin * g.in[0] * g.in[1] * g.in[2]
	P := g.out[0] * g.out[1] * g.out[2]
	Kc := Cin * g.k[0] * g.k[1] * g.k[2]
	pointwise := g.k == [3]int{1, 1, 1} && g.st == [3]int{1, 1, 1} && g.pad == [3]int{}
	shifted := !pointwise && g.st == [3]int{1, 1, 1} && Cin >= shiftMinCin && convShift
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
		xp = tm.alloc(Cin * (g.in[0] + 2*g.pad[0]) * (g.in[1] + 2*g.pad[1]) * (g.in[2] + 2*g.pad[2]))
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
			be.padInput(xp, xb, &g)
			be.convShifted(ob, xp, wt, &g, Cout, tm)
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
	commit()
	return nil
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
