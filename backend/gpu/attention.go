package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/miopen"
	"github.com/framepack-go/framepack/tensor"
)

// Attention, in order of preference:
//   - with AttnParams.FP8 on an FP8 GPU, cuDNN's FP8 attention
//     (attention_fp8.go);
//   - cuDNN's fused attention (graph API, cuDNN ≥ 9.13) on NVIDIA for the
//     unmasked bf16/f16 case with a head dim that is a multiple of 8 up to
//     256; FRAMEPACK_ATTN=kernel or Options.NoFusedAttention skip it. A
//     shape cuDNN refuses falls back to the kernels below.
//
// f32 attention at head dim 128 on NVIDIA, unmasked or with a key mask,
// runs the register-tiled f32 kernel (attention_f32.go); other f32 calls go
// through the vendor BLAS in chunks of queries (attention_blas.go) where
// the BLAS is open and the budget has room for the scores. Options.
// GenericAttention sends both to the generic kernel.
//
// Attention kernels (kernels/attention*.hip):
//   - attn_flash_*: NVIDIA sm_80+, bf16/f16, head dim 64 or 128, no mask, a
//     positive scale: the transformer's case. 128 queries per block.
//   - attn_mma_*: the same devices and dtypes with any mask: 64 queries per
//     block.
//   - attn_*_TPQ: the generic kernel, everything else (any dtype, head dim
//     up to 512), also forced by Options.GenericAttention or
//     FRAMEPACK_ATTN=generic.
// The tensor-core kernels are their own module, so a device that uses them
// compiles no generic kernel until a call needs one.

const (
	// genericQT is the generic kernel's queries per thread (AT_QT).
	genericQT = 2
	// flashBQ, flashBK: queries per block and keys per tile of attn_flash
	// (FA_BQ, MMA_BK); its 128 threads hold Q and two K/V stages in shared
	// memory, rows padded by 8 halves.
	flashBQ, flashBK = 128, 64
	// mmaWarps: warps of attn_mma, 16 queries each.
	mmaWarps = 4
)

// attnNoFlash sends unmasked calls to attn_mma too, attnNoFused skips
// cuDNN (tests, benchmarks).
var attnNoFlash, attnNoFused = false, false

func (b *Backend) Attention(dst, q, k, v *tensor.Tensor, p tensor.AttnParams) error {
	dt := dst.DType()
	s := floatSuffix(dt)
	if s == "" || q.DType() != dt || k.DType() != dt || v.DType() != dt {
		return unsupported("attention", dt)
	}
	dims, err := tensor.CheckAttention(dst, q, k, v, p)
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	B, Lq, Hq, D, Lk, Hkv, maskStride := dims.B, dims.Lq, dims.Hq, dims.D, dims.Lk, dims.Hkv, dims.MaskStride
	if D > 512 {
		return fmt.Errorf("gpu: attention with head dim %d > 512: %w", D, tensor.ErrUnsupported)
	}
	if dst.Numel() == 0 {
		return nil
	}
	if Lk == 0 {
		return b.Fill(dst, 0)
	}
	if Hq > 65535 || B > 65535 {
		return fmt.Errorf("gpu: attention with %d heads × batch %d: %w", Hq, B, tensor.ErrUnsupported)
	}
	ps, err := b.ptrs(dst, q, k, v, p.KeyMask, p.Mask)
	if err != nil {
		return err
	}
	scale := p.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(D)))
	}
	causal := int32(0)
	if p.Causal {
		causal = 1
	}
	st := packInt64s(int64(B), int64(Lq), int64(Lk), int64(Hq), int64(Hkv), int64(D), int64(max(p.FrameLen, 0)), int64(maskStride))
	st = binary.LittleEndian.AppendUint32(st, math.Float32bits(scale*math.Log2E))
	st = binary.LittleEndian.AppendUint32(st, uint32(causal))
	masked := p.Causal || p.FrameLen > 0 || p.KeyMask != nil || p.Mask != nil
	// The tensor-core kernels move q, k, v, out in 16-byte pieces.
	aligned := (ps[0]|ps[1]|ps[2]|ps[3])%16 == 0
	if !masked && aligned && b.useFusedAttention(dt, D) {
		d := miopen.AttnDesc{B: B, Lq: Lq, Lk: Lk, Hq: Hq, Hkv: Hkv, D: D, DType: blasType(dt)}
		if p.FP8 && Hq == Hkv && b.NativeFP8() {
			err := b.fp8Attention(d, dt, ps[1], ps[2], ps[3], ps[0], scale)
			if err == nil || !errors.Is(err, miopen.ErrNoFusedAttention) {
				return err
			}
		}
		err := b.fusedAttention(d, ps[1], ps[2], ps[3], ps[0], scale)
		if err == nil || !errors.Is(err, miopen.ErrNoFusedAttention) {
			return err
		}
	}
	if aligned && b.tensorCoreAttention(dt, D) {
		if !masked && scale > 0 && !attnNoFlash {
			// The flash kernel's row offsets are 32-bit: Hq·D and
			// 128·Hq·D elements.
			if int64(flashBQ)*int64(Hq)*int64(D) < 1<<31 {
				a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Struct(st, 8)
				grid := hip.Dim3{uint32((Lq + flashBQ - 1) / flashBQ), uint32(Hq), uint32(B)}
				shm := (flashBQ + 4*flashBK) * (D + 8) * 2
				return b.launch("attention_mma", fmt.Sprintf("attn_flash_%s_%d", s, D), grid, hip.Dim3{128}, shm, a)
			}
		}
		a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Ptr(ps[4]).Ptr(ps[5]).Struct(st, 8)
		bq := 16 * mmaWarps
		grid := hip.Dim3{uint32((Lq + bq - 1) / bq), uint32(Hq), uint32(B)}
		name := fmt.Sprintf("attn_mma_%s_%d_w%d", s, D, mmaWarps)
		return b.launch("attention_mma", name, grid, hip.Dim3{uint32(32 * mmaWarps)}, 4*64*(D+8)*2, a)
	}
	if dt == tensor.F32 {
		if ran, err := b.tiledF32Attention(dims, ps, st, p); ran || err != nil {
			return err
		}
		if ran, err := b.blasAttention(dims, ps, scale, p); ran || err != nil {
			return err
		}
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Ptr(ps[4]).Ptr(ps[5]).Struct(st, 8)
	tpq := 2
	for tpq*32 < D {
		tpq *= 2
	}
	qpb := 128 / tpq * genericQT
	grid := hip.Dim3{uint32((Lq + qpb - 1) / qpb), uint32(Hq), uint32(B)}
	return b.launch("attention", fmt.Sprintf("attn_%s_%d", s, tpq), grid, hip.Dim3{128}, 0, a)
}

// tensorCoreAttention: NVIDIA sm_80+, bf16/f16, head dim 64 or 128, and no
// request for the generic kernel.
func (b *Backend) tensorCoreAttention(dt tensor.DType, D int) bool {
	if b.dev.Vendor != hip.NVIDIA || b.dev.ComputeMajor < 8 || b.opts.GenericAttention {
		return false
	}
	return (dt == tensor.BF16 || dt == tensor.F16) && (D == 64 || D == 128)
}

// useFusedAttention: NVIDIA, bf16/f16, a head dim cuDNN's engines take,
// and no request for our own kernels.
func (b *Backend) useFusedAttention(dt tensor.DType, D int) bool {
	if b.dev.Vendor != hip.NVIDIA || b.opts.NoFusedAttention || b.opts.GenericAttention || attnNoFused {
		return false
	}
	return (dt == tensor.BF16 || dt == tensor.F16) && D%8 == 0 && D <= 256
}

// withDNN runs fn with cuDNN's handle, under its lock, on a thread bound to
// the device; an error wrapping miopen.ErrNoFusedAttention when cuDNN is
// absent.
func (b *Backend) withDNN(fn func(h *miopen.Handle) error) error {
	b.dnnMu.Lock()
	defer b.dnnMu.Unlock()
	unbind, err := b.dev.Bind()
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	defer unbind()
	h, err := b.dnnHandle()
	if err != nil {
		return err
	}
	return fn(h)
}

// planAttention plans d on cuDNN, logging a refusal once per shape (fallback
// names what runs it instead).
func (b *Backend) planAttention(h *miopen.Handle, d miopen.AttnDesc, fallback string) (miopen.AttnPlan, error) {
	plan, err := h.PlanAttention(d)
	if err != nil && !b.dnnRefused[d] {
		b.dnnRefused[d] = true
		b.log.Info("gpu: cuDNN refused an attention shape, "+fallback+" runs it", "why", err)
	}
	return plan, err
}

// fusedAttention runs d through cuDNN with its workspace from the
// backend's allocator. An error wrapping miopen.ErrNoFusedAttention means
// cuDNN cannot take d (logged once per shape) and nothing was queued.
func (b *Backend) fusedAttention(d miopen.AttnDesc, q, k, v, o uintptr, scale float32) error {
	b.idle.queued()
	return b.withDNN(func(h *miopen.Handle) error {
		plan, err := b.planAttention(h, d, "framepack's kernel")
		if err != nil {
			return err
		}
		wsPtr, release, err := b.workspace(plan.WorkspaceBytes)
		if err != nil {
			return err
		}
		defer release()
		b.fusedCalls.Add(1)
		if err := h.Attention(d, q, k, v, o, scale, wsPtr); err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
		return nil
	})
}

// workspace is n bytes from the allocator (0 and nothing to release for
// none); release is stream-ordered: the memory is reused only by later work.
func (b *Backend) workspace(n int64) (uintptr, func(), error) {
	if n <= 0 {
		return 0, func() {}, nil
	}
	ws, err := b.alloc.alloc(n)
	if err != nil {
		return 0, nil, err
	}
	return ws.ptr, func() { b.alloc.free(ws) }, nil
}

// dnnHandle opens cuDNN on the backend's stream the first time; an error
// wrapping miopen.ErrNoFusedAttention when it is absent.
func (b *Backend) dnnHandle() (*miopen.Handle, error) {
	if b.dnn == nil && b.dnnErr == nil {
		b.dnnRefused = map[miopen.AttnDesc]bool{}
		lib, err := miopen.OpenVendor(miopen.NVIDIA)
		if err == nil {
			b.dnn, err = lib.NewHandle(uintptr(b.stream))
		}
		if err != nil {
			b.dnnErr = fmt.Errorf("gpu: cuDNN: %w: %w", err, miopen.ErrNoFusedAttention)
			b.log.Info("gpu: no cuDNN fused attention, framepack's kernel runs attention", "why", err)
		} else {
			b.log.Info("gpu: attention through cuDNN fused attention", "lib", b.dnn.Lib().String())
		}
	}
	return b.dnn, b.dnnErr
}

// FusedAttentionCalls counts the attention calls cuDNN ran.
func (b *Backend) FusedAttentionCalls() int64 { return b.fusedCalls.Load() }
