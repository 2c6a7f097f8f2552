package cpu

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// attnBlockFloats bounds the score block (query rows × keys) in floats.
const attnBlockFloats = 1 << 20

// Attention works on blocks of query rows of one head, in parallel: a
// block's scores against every key it may see come from one GEMM, each row
// is masked and softmaxed, and a second GEMM writes the block's output. Only
// a block of scores per worker exists at a time. A query row that sees no
// key at all gets zeros.
func (be *Backend) Attention(dst, q, k, v *tensor.Tensor, p tensor.AttnParams) error {
	dt := dst.DType()
	if !isCompute(dt) || q.DType() != dt || k.DType() != dt || v.DType() != dt {
		return unsupported("attention", dt)
	}
	dims, err := tensor.CheckAttention(dst, q, k, v, p)
	if err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	B, Lq, Hq, D, Lk, Hkv, maskBatch := dims.B, dims.Lq, dims.Hq, dims.D, dims.Lk, dims.Hkv, dims.MaskStride
	var keyMask, mask []float32
	if p.KeyMask != nil {
		b, err := raw(p.KeyMask)
		if err != nil {
			return err
		}
		keyMask = tensor.ViewAs[float32](b)
	}
	if p.Mask != nil {
		b, err := raw(p.Mask)
		if err != nil {
			return err
		}
		mask = tensor.ViewAs[float32](b)
	}
	scale := p.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(D)))
	}
	return be.inF32(dst, []*tensor.Tensor{q, k, v}, func(tm *temps, in [][]float32, out []float32) {
		qf, kf, vf := in[0], in[1], in[2]
		if Lk == 0 || D == 0 {
			clear(out)
			return
		}
		// visible is the number of leading keys query i may see at most.
		visible := func(i int) int {
			n := Lk
			if p.Causal {
				n = min(n, i+1)
			}
			if p.FrameLen > 0 {
				n = min(n, (i/p.FrameLen+1)*p.FrameLen)
			}
			return n
		}
		bq := max(1, min(Lq, 128, attnBlockFloats/Lk))
		nb := (Lq + bq - 1) / bq
		group := Hq / Hkv
		qld, kld := Hq*D, Hkv*D
		scratch := make([][]float32, min(be.threads, B*Hq*nb))
		for w := range scratch {
			scratch[w] = tm.alloc(bq * Lk)
		}
		// One task is one block of query rows of one head: a GEMM for its
		// scores, the masked softmax of each row, a GEMM for its output.
		be.tasks(B*Hq*nb, func(worker, task int) {
			b, h, i0 := task/(Hq*nb), (task/nb)%Hq, (task%nb)*bq
			hk := h / group
			qh := qf[(b*Lq*Hq+h)*D:]
			kh := kf[(b*Lk*Hkv+hk)*D:]
			vh := vf[(b*Lk*Hkv+hk)*D:]
			oh := out[(b*Lq*Hq+h)*D:]
			n := min(bq, Lq-i0)
			lk := visible(i0 + n - 1) // keys any row of the block sees
			if lk <= 0 {
				for r := 0; r < n; r++ {
					clear(oh[(i0+r)*qld : (i0+r)*qld+D])
				}
				return
			}
			s := scratch[worker][:n*lk]
			be.gemmSerial(false, true, n, lk, D, scale, qh[i0*qld:], qld, kh, kld, 0, s, lk)
			for r := 0; r < n; r++ {
				i := i0 + r
				var km, am []float32
				if keyMask != nil {
					km = keyMask[b*Lk : b*Lk+lk]
				}
				if mask != nil {
					am = mask[b*maskBatch+i*Lk : b*maskBatch+i*Lk+lk]
				}
				maskedSoftmax(s[r*lk:(r+1)*lk], visible(i), km, am)
			}
			be.gemmSerial(false, false, n, D, lk, 1, s, lk, vh, kld, 0, oh[i0*qld:], qld)
		})
	})
}

// maskedSoftmax turns a row of scores into probabilities over its first n
// keys, dropping keys whose keyMask is 0 and adding the additive mask. A row
// with no visible key becomes zeros.
func maskedSoftmax(row []float32, n int, keyMask, add []float32) {
	negInf := float32(math.Inf(-1))
	for j := n; j < len(row); j++ {
		row[j] = negInf
	}
	if add != nil {
		for j := range row[:n] {
			row[j] += add[j]
		}
	}
	if keyMask != nil {
		for j := range row[:n] {
			if keyMask[j] == 0 {
				row[j] = negInf
			}
		}
	}
	m := rowMax(row)
	if m == negInf {
		clear(row)
		return
	}
	softmaxFrom(row, row, m)
}

func (be *Backend) RoPE(dst, x, cos, sin *tensor.Tensor) error {
	dt := dst.DType()
	if !isCompute(dt) || x.DType() != dt || cos.DType() != tensor.F32 || sin.DType() != tensor.F32 {
		return unsupported("rope", dt)
	}
	if x.Rank() != 4 || dst.Numel() != x.Numel() || x.Dim(3)%2 != 0 {
		return fmt.Errorf("cpu: rope of %v into %v", x, dst)
	}
	B, L, H, D := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	if cos.Numel() != L*D || sin.Numel() != L*D {
		return fmt.Errorf("cpu: rope of %v with cos %v, sin %v", x, cos, sin)
	}
	return be.inF32(dst, []*tensor.Tensor{x, cos, sin}, func(_ *temps, in [][]float32, out []float32) {
		xf, cf, sf := in[0], in[1], in[2]
		be.parallel(B*L, max(1, 4096/max(H*D, 1)), func(lo, hi int) {
			for bl := lo; bl < hi; bl++ {
				l := bl % L
				c, s := cf[l*D:(l+1)*D], sf[l*D:(l+1)*D]
				for h := 0; h < H; h++ {
					base := (bl*H + h) * D
					xs, ys := xf[base:base+D], out[base:base+D]
					for i := 0; i < D; i += 2 {
						a, b := xs[i], xs[i+1]
						ys[i] = a*c[i] - b*s[i]
						ys[i+1] = b*c[i+1] + a*s[i+1]
					}
				}
			}
		})
	})
}
