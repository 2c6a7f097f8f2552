package cpu

import (
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// bySize runs a dtype-agnostic kernel from src into dst on element words of
// their dtype's size (nothing for an empty dst).
func bySize(dst, src *tensor.Tensor, k8 func([]uint8, []uint8), k16 func([]uint16, []uint16),
	k32 func([]uint32, []uint32), k64 func([]uint64, []uint64)) error {
	if dst.Numel() == 0 {
		return nil
	}
	bs, err := rawAll(dst, src)
	if err != nil {
		return err
	}
	db, sb := bs[0], bs[1]
	switch dt := dst.DType(); dt.Size() {
	case 1:
		k8(tensor.ViewAs[uint8](db), tensor.ViewAs[uint8](sb))
	case 2:
		k16(tensor.ViewAs[uint16](db), tensor.ViewAs[uint16](sb))
	case 4:
		k32(tensor.ViewAs[uint32](db), tensor.ViewAs[uint32](sb))
	case 8:
		k64(tensor.ViewAs[uint64](db), tensor.ViewAs[uint64](sb))
	default:
		return unsupported("copy", dt)
	}
	return nil
}

func (be *Backend) Pad(dst, src *tensor.Tensor, before []int, mode tensor.PadMode) error {
	bf, err := tensor.CheckPad(dst, src, before, mode) // amount added in front of every axis
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	ds, ss := dst.Shape(), src.Shape()
	rep := mode == tensor.PadReplicate
	return bySize(dst, src,
		func(d, s []uint8) { padRows(be, d, s, ds, ss, bf, rep) },
		func(d, s []uint16) { padRows(be, d, s, ds, ss, bf, rep) },
		func(d, s []uint32) { padRows(be, d, s, ds, ss, bf, rep) },
		func(d, s []uint64) { padRows(be, d, s, ds, ss, bf, rep) })
}

func padRows[T word](be *Backend, d, s []T, ds, ss, bf []int, rep bool) {
	r := len(ds)
	dn, sn, front := ds[r-1], ss[r-1], bf[r-1]
	rows := len(d) / dn
	sst := tensor.ContiguousStrides(ss)
	be.parallel(rows, max(1, 4096/dn), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			out := d[row*dn : (row+1)*dn]
			// Locate the source row, clamping (replicate) or giving up
			// (zeros) on axes where this row lies in the padding.
			so, rem, inside := 0, row, true
			for ax := r - 2; ax >= 0; ax-- {
				i := rem%ds[ax] - bf[ax]
				rem /= ds[ax]
				if i < 0 || i >= ss[ax] {
					inside = false
					i = min(max(i, 0), ss[ax]-1)
				}
				so += i * sst[ax]
			}
			if !inside && !rep {
				clear(out)
				continue
			}
			in := s[so : so+sn]
			copy(out[front:front+sn], in)
			var lv, rv T // zero
			if rep {
				lv, rv = in[0], in[sn-1]
			}
			for j := 0; j < front; j++ {
				out[j] = lv
			}
			for j := front + sn; j < dn; j++ {
				out[j] = rv
			}
		}
	})
}

func (be *Backend) UpsampleNearest(dst, src *tensor.Tensor, scale [3]int) error {
	if err := tensor.CheckUpsample(dst, src, scale); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	ss := src.Shape()
	r := len(ss)
	g := [6]int{ss[r-3], ss[r-2], ss[r-1], scale[0], scale[1], scale[2]}
	return bySize(dst, src,
		func(d, s []uint8) { upsampleRows(be, d, s, g) },
		func(d, s []uint16) { upsampleRows(be, d, s, g) },
		func(d, s []uint32) { upsampleRows(be, d, s, g) },
		func(d, s []uint64) { upsampleRows(be, d, s, g) })
}

// upsampleRows: g is the source (T, H, W) and the scales.
func upsampleRows[T word](be *Backend, d, s []T, g [6]int) {
	t, h, w, ft, fh, fw := g[0], g[1], g[2], g[3], g[4], g[5]
	ow := w * fw
	rows := len(d) / ow // (prefix, t', h')
	be.parallel(rows, max(1, 4096/ow), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			oh := row % (h * fh)
			ot := (row / (h * fh)) % (t * ft)
			pre := row / (h * fh * t * ft)
			in := s[((pre*t+ot/ft)*h+oh/fh)*w:][:w]
			out := d[row*ow : (row+1)*ow]
			if fw == 1 {
				copy(out, in)
				continue
			}
			for j, v := range in {
				for k := 0; k < fw; k++ {
					out[j*fw+k] = v
				}
			}
		}
	})
}

func (be *Backend) AvgPool3d(dst, src *tensor.Tensor, kernel [3]int) error {
	dt := dst.DType()
	if !isCompute(dt) || src.DType() != dt {
		return unsupported("avg_pool3d", dt)
	}
	if err := tensor.CheckAvgPool3d(dst, src, kernel); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	ss := src.Shape()
	r := len(ss)
	if dst.Numel() == 0 {
		return nil
	}
	return be.inF32(dst, []*tensor.Tensor{src}, func(_ *temps, in [][]float32, out []float32) {
		xf := in[0]
		T, H, W := ss[r-3], ss[r-2], ss[r-1]
		kt, kh, kw := kernel[0], kernel[1], kernel[2]
		ot, oh, ow := T/kt, H/kh, W/kw
		inv := 1 / float64(kt*kh*kw)
		rows := len(out) / ow
		be.parallel(rows, max(1, 1024/ow), func(lo, hi int) {
			for row := lo; row < hi; row++ {
				y := row % oh
				t := (row / oh) % ot
				pre := row / (oh * ot)
				for x := 0; x < ow; x++ {
					var s float64
					for a := 0; a < kt; a++ {
						for b := 0; b < kh; b++ {
							base := ((pre*T+t*kt+a)*H+y*kh+b)*W + x*kw
							for _, v := range xf[base : base+kw] {
								s += float64(v)
							}
						}
					}
					out[row*ow+x] = float32(s * inv)
				}
			}
		})
	})
}

func (be *Backend) Embedding(dst, table, ids *tensor.Tensor) error {
	V, D, err := tensor.CheckEmbedding(dst, table, ids)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	n := ids.Numel()
	ib, err := raw(ids)
	if err != nil {
		return err
	}
	idx := make([]int, n)
	switch ids.DType() {
	case tensor.I64:
		for i, v := range tensor.ViewAs[int64](ib) {
			idx[i] = int(v)
			if v < 0 || v >= int64(V) {
				return fmt.Errorf("cpu: embedding id %d at %d outside a table of %d rows", v, i, V)
			}
		}
	case tensor.I32:
		for i, v := range tensor.ViewAs[int32](ib) {
			idx[i] = int(v)
			if v < 0 || int(v) >= V {
				return fmt.Errorf("cpu: embedding id %d at %d outside a table of %d rows", v, i, V)
			}
		}
	}
	bs, err := rawAll(dst, table)
	if err != nil {
		return err
	}
	db, tb := bs[0], bs[1]
	row := D * table.DType().Size()
	be.parallel(n, max(1, (1<<16)/max(row, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			copy(db[i*row:(i+1)*row], tb[idx[i]*row:(idx[i]+1)*row])
		}
	})
	return nil
}
