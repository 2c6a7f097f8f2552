package cpu

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// Fused is the reference of backend/gpu's fused kernels (tensor.FusedKernels),
// written plainly on host tensors with the GPU kernels' rounding, as llm.c
// keeps a CPU reference beside each kernel. The CPU backend itself runs
// these ops op by op (Scope's fallback); the CPU posing as a device
// (internal/testutil/testdevice) has these, so the model's fused path runs and is
// checked against the golden cases without a GPU, and the op suite
// (tensor/backendtest) compares every backend's fused kernels with them.
type Fused struct{}

var _ tensor.FusedKernels = Fused{}

func fusedVals(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	h, _ := tensor.FromBytes(t.DType(), t.Buffer().(*tensor.HostBuffer).Data()[:t.Bytes()], t.Numel())
	return append([]float32(nil), h.ToFloat32()...)
}

func fusedStore(t *tensor.Tensor, v []float32) {
	h, _ := tensor.FromBytes(t.DType(), t.Buffer().(*tensor.HostBuffer).Data()[:t.Bytes()], t.Numel())
	switch t.DType() {
	case tensor.F32:
		copy(h.Float32s(), v)
	case tensor.BF16:
		tensor.NarrowBF16(h.Uint16s(), v)
	case tensor.F16:
		tensor.NarrowF16(h.Uint16s(), v)
	}
}

func (Fused) LayerNormModulate(dst, x, shift, scale *tensor.Tensor, eps float32) error {
	xs, sh, sc := fusedVals(x), fusedVals(shift), fusedVals(scale)
	r := tensor.Rounder(dst.DType())
	l, d := x.Dim(1), x.Dim(2)
	out := make([]float32, len(xs))
	for row := 0; row < len(xs)/d; row++ {
		xr := xs[row*d : (row+1)*d]
		var mean, q float64
		for _, v := range xr {
			mean += float64(v)
		}
		mean /= float64(d)
		for _, v := range xr {
			q += (float64(v) - mean) * (float64(v) - mean)
		}
		rstd := 1 / math.Sqrt(q/float64(d)+float64(eps))
		b := row / l
		for j, v := range xr {
			n := r(float32((float64(v) - mean) * rstd))
			p := r(n * r(1+sc[b*d+j]))
			out[row*d+j] = p + sh[b*d+j]
		}
	}
	fusedStore(dst, out)
	return nil
}

func (Fused) GatedAdd(dst, x, y, bias, gate *tensor.Tensor) error {
	xs, ys, bs, gs := fusedVals(x), fusedVals(y), fusedVals(bias), fusedVals(gate)
	r := tensor.Rounder(dst.DType())
	l, d := x.Dim(1), x.Dim(2)
	out := make([]float32, len(xs))
	for i := range xs {
		g := ys[i]
		if bs != nil {
			g = r(g + bs[i%d])
		}
		out[i] = xs[i] + r(g*gs[(i/(l*d))*d+i%d])
	}
	fusedStore(dst, out)
	return nil
}

func (Fused) QKNormRoPE(q, k, v, src, bias *tensor.Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *tensor.Tensor, eps float32) error {
	b, lj, h, dh := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	ls, s := src.Dim(1), src.Dim(2)
	ss, bs, cs, sn := fusedVals(src), fusedVals(bias), fusedVals(cos), fusedVals(sin)
	outs := [3][]float32{fusedVals(q), fusedVals(k), fusedVals(v)}
	ws := [2][]float32{fusedVals(wq), fusedVals(wk)}
	r := tensor.Rounder(q.DType())
	cstride := 0
	if cos != nil && cos.Numel() == b*lj*dh {
		cstride = lj * dh
	}
	if rowOff+ls > lj {
		return fmt.Errorf("cpu: rows %d+%d of %d", rowOff, ls, lj)
	}
	in := make([]float32, dh)
	for bi := 0; bi < b; bi++ {
		for row := 0; row < ls; row++ {
			jr := rowOff + row
			for hh := 0; hh < h; hh++ {
				o := ((bi*lj+jr)*h + hh) * dh
				for part := 0; part < 3; part++ {
					c0 := cols[part] + hh*dh
					for e := range in {
						in[e] = ss[(bi*ls+row)*s+c0+e]
						if bs != nil {
							in[e] = r(in[e] + bs[c0+e])
						}
					}
					if part == 2 {
						copy(outs[2][o:o+dh], in)
						continue
					}
					var sq float32
					for _, x := range in {
						sq += x * x
					}
					rs := 1 / float32(math.Sqrt(float64(sq/float32(dh)+eps)))
					for e := range in {
						in[e] = r(r(in[e]*rs) * ws[part][e])
					}
					for p := 0; p < dh/2; p++ {
						a, c := in[2*p], in[2*p+1]
						if cs != nil {
							t := bi*cstride + jr*dh + 2*p
							a, c = a*cs[t]-c*sn[t], c*cs[t+1]+a*sn[t+1]
						}
						outs[part][o+2*p], outs[part][o+2*p+1] = a, c
					}
				}
			}
		}
	}
	for i, t := range []*tensor.Tensor{q, k, v} {
		fusedStore(t, outs[i])
	}
	return nil
}

func (Fused) ActivateColumns(op tensor.UnaryOp, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, cols int) error {
	if op != tensor.OpGELUTanh && op != tensor.OpSiLU {
		return fmt.Errorf("cpu: activate_columns %s: %w", op, tensor.ErrUnsupported)
	}
	ds, xs, bs := fusedVals(dst), fusedVals(src), fusedVals(bias)
	r := tensor.Rounder(dst.DType())
	w, xw := dst.Dim(-1), src.Dim(-1)
	for row := 0; row < len(xs)/xw; row++ {
		for c := 0; c < cols; c++ {
			v := xs[row*xw+srcCol+c]
			if bs != nil {
				v = r(v + bs[srcCol+c])
			}
			if op == tensor.OpGELUTanh {
				u := 0.79788456080286536 * (float64(v) + 0.044715*float64(v)*float64(v)*float64(v))
				v = float32(float64(v) / (1 + math.Exp(-2*u)))
			} else {
				v = float32(float64(v) / (1 + math.Exp(-float64(v))))
			}
			ds[row*w+dstCol+c] = v
		}
	}
	fusedStore(dst, ds)
	return nil
}

// ChannelsLastRMSNorm is tensor.FusedKernels' channels-last RMS norm:
// float64 sums, the norm's output rounded before the weight and before
// SiLU, as the op-by-op path rounds.
func (Fused) ChannelsLastRMSNorm(dst, x, w *tensor.Tensor, eps float32, silu bool) error {
	per, perDst, err := tensor.CheckChannelsLastNorm(dst, x, w)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	xs, ws, out := fusedVals(x), fusedVals(w), fusedVals(dst)
	r := tensor.Rounder(dst.DType())
	c := x.Dim(-1)
	for b := 0; b < x.Dim(0); b++ {
		for p := 0; p < per; p++ {
			row := xs[(b*per+p)*c : (b*per+p+1)*c]
			at := out[(b*perDst+perDst-per+p)*c : (b*perDst+perDst-per+p+1)*c]
			var q float64
			for _, v := range row {
				q += float64(v) * float64(v)
			}
			rs := float32(1 / math.Sqrt(q/float64(c)+float64(eps)))
			for ch, v := range row {
				v *= rs
				if ws != nil {
					v = r(v) * ws[ch]
				}
				if silu {
					v = r(v) // SiLU reads the norm's stored output
					v = float32(float64(v) / (1 + math.Exp(-float64(v))))
				}
				at[ch] = v
			}
		}
	}
	fusedStore(dst, out)
	return nil
}
