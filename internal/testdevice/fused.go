package testdevice

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// The fake device has the fused kernels backend/gpu has, written plainly on
// the host, so the model's fused path runs (and is checked against the
// golden cases) without a GPU. They follow the GPU kernels' rounding.

func vals(t *tensor.Tensor) []float32 {
	if t == nil {
		return nil
	}
	h, _ := tensor.FromBytes(t.DType(), t.Buffer().(*tensor.HostBuffer).Data()[:t.Bytes()], t.Numel())
	return append([]float32(nil), h.ToFloat32()...)
}

func store(t *tensor.Tensor, v []float32) {
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

func (f *Fake) LayerNormModulate(dst, x, shift, scale *tensor.Tensor, eps float32) error {
	xs, sh, sc := vals(x), vals(shift), vals(scale)
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
	store(dst, out)
	return nil
}

func (f *Fake) GatedAdd(dst, x, y, bias, gate *tensor.Tensor) error {
	xs, ys, bs, gs := vals(x), vals(y), vals(bias), vals(gate)
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
	store(dst, out)
	return nil
}

func (f *Fake) QKNormRoPE(q, k, v, src, bias *tensor.Tensor, rowOff int, cols [3]int, wq, wk, cos, sin *tensor.Tensor, eps float32) error {
	b, lj, h, dh := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	ls, s := src.Dim(1), src.Dim(2)
	ss, bs, cs, sn := vals(src), vals(bias), vals(cos), vals(sin)
	outs := [3][]float32{vals(q), vals(k), vals(v)}
	ws := [2][]float32{vals(wq), vals(wk)}
	r := tensor.Rounder(q.DType())
	cstride := 0
	if cos != nil && cos.Numel() == b*lj*dh {
		cstride = lj * dh
	}
	if rowOff+ls > lj {
		return fmt.Errorf("fake: rows %d+%d of %d", rowOff, ls, lj)
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
		store(t, outs[i])
	}
	return nil
}

func (f *Fake) ActivateColumns(op tensor.UnaryOp, dst *tensor.Tensor, dstCol int, src, bias *tensor.Tensor, srcCol, cols int) error {
	if op != tensor.OpGELUTanh && op != tensor.OpSiLU {
		return fmt.Errorf("fake: activate_columns %s: %w", op, tensor.ErrUnsupported)
	}
	ds, xs, bs := vals(dst), vals(src), vals(bias)
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
	store(dst, ds)
	return nil
}
