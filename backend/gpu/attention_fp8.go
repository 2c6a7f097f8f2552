package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

// FP8 attention (tensor.AttnParams.FP8) through cuDNN's FP8 engine: q, k
// and v are coded in E4M3 per tensor (amax/448, as QuantizeRowsFP8 with one
// row), cuDNN writes o in E4M3 too — at v's scale, since every row of o
// averages rows of v and so |o| ≤ amax(v) — and o is widened into dst.

// amaxBlocks bounds the blocks of the amax's first pass.
const amaxBlocks = 1024

// fp8Tensor queues q = x's E4M3 codes and s = (descale, scale), two f32 on
// the device; part holds amaxBlocks f32.
func (b *Backend) fp8Tensor(dt tensor.DType, q, x, s, part uintptr, n int64) error {
	sfx := floatSuffix(dt)
	nblk := min(int64(amaxBlocks), (n+255)/256)
	if err := b.launch("norm", "amax_part_"+sfx, hip.Dim3{uint32(nblk)}, hip.Dim3{256}, 0,
		(&hip.Args{}).Ptr(part).Ptr(x).I64(n).I64(nblk)); err != nil {
		return err
	}
	if err := b.launch("norm", "fp8_tensor_scale", hip.Dim3{1}, hip.Dim3{256}, 0,
		(&hip.Args{}).Ptr(s).Ptr(part).I64(nblk)); err != nil {
		return err
	}
	return b.launchLinear("norm", "quant_tensor_fp8_"+sfx, n, 256, 1, (&hip.Args{}).Ptr(q).Ptr(x).Ptr(s).I64(n))
}

// fp8AttnConsts is P's descale and scale (1/448, 448) on the device,
// uploaded once.
func (b *Backend) fp8AttnConsts() (uintptr, error) {
	b.dnnMu.Lock()
	defer b.dnnMu.Unlock()
	if b.fp8Consts == nil {
		buf, err := b.alloc.alloc(8)
		if err != nil {
			return 0, err
		}
		c := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.0/miopen.E4M3Max))
		c = binary.LittleEndian.AppendUint32(c, math.Float32bits(miopen.E4M3Max))
		if err := b.Upload(buf, 0, c); err != nil {
			b.alloc.free(buf)
			return 0, err
		}
		b.fp8Consts = buf
	}
	return b.fp8Consts.ptr, nil
}

// fp8Attention runs the unmasked attention d (q, k, v, o device pointers
// in dt) through cuDNN's FP8 engine. An error wrapping
// miopen.ErrNoFusedAttention means cuDNN cannot take it; nothing was
// queued then.
func (b *Backend) fp8Attention(d miopen.AttnDesc, dt tensor.DType, q, k, v, o uintptr, scale float32) error {
	d.FP8 = true
	var plan miopen.AttnPlan
	err := b.withDNN(func(h *miopen.Handle) (err error) {
		plan, err = b.planAttention(h, d, "the bf16 attention")
		return err
	})
	if err != nil {
		return err
	}
	consts, err := b.fp8AttnConsts()
	if err != nil {
		return err
	}
	nq := int64(d.B) * int64(d.Lq) * int64(d.Hq) * int64(d.D)
	nk := int64(d.B) * int64(d.Lk) * int64(d.Hkv) * int64(d.D)
	// q, o, k, v, each at a 256-byte boundary (cuDNN's tensors are
	// declared 16-byte aligned).
	aq, ak := (nq+255)&^255, (nk+255)&^255
	codes, err := b.alloc.alloc(2*aq + 2*ak)
	if err != nil {
		return err
	}
	defer b.alloc.free(codes) // stream-ordered
	// f32: three (descale, scale) pairs, amax of P and of o, the partial maxima.
	f32, err := b.alloc.alloc(4 * (8 + amaxBlocks))
	if err != nil {
		return err
	}
	defer b.alloc.free(f32)
	q8, o8, k8, v8 := codes.ptr, codes.ptr+uintptr(aq), codes.ptr+uintptr(2*aq), codes.ptr+uintptr(2*aq+ak)
	sq, sk, sv, amax, part := f32.ptr, f32.ptr+8, f32.ptr+16, f32.ptr+24, f32.ptr+32
	for _, t := range []struct {
		q, x, s uintptr
		n       int64
	}{{q8, q, sq, nq}, {k8, k, sk, nk}, {v8, v, sv, nk}} {
		if err := b.fp8Tensor(dt, t.q, t.x, t.s, part, t.n); err != nil {
			return err
		}
	}
	wsPtr, release, err := b.workspace(plan.WorkspaceBytes)
	if err != nil {
		return err
	}
	defer release()
	sc := miopen.FP8Scales{DescaleQ: sq, DescaleK: sk, DescaleV: sv, DescaleS: consts, ScaleS: consts + 4,
		ScaleO: sv + 4, AmaxS: amax, AmaxO: amax + 4}
	b.idle.queued()
	if err := b.withDNN(func(h *miopen.Handle) error { return h.AttentionFP8(d, q8, k8, v8, o8, scale, sc, wsPtr) }); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	b.fp8AttnCalls.Add(1)
	// o = its codes times v's descale.
	return b.launchLinear("norm", "dequant_rows_fp8_"+floatSuffix(dt), nq, 256, 1,
		(&hip.Args{}).Ptr(o).Ptr(o8).Ptr(sv).I64(nq).I64(nq))
}

// FP8AttentionCalls counts the attention calls cuDNN's FP8 engine ran.
func (b *Backend) FP8AttentionCalls() int64 { return b.fp8AttnCalls.Load() }
