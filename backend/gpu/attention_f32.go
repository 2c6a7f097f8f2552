package gpu

import (
	"fmt"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// f32 attention at head dim 128 on NVIDIA sm_80+ (the transformer's attention at
// --dtype f32): one fused kernel (kernels/attention_f32.hip) with the
// products of q·kᵀ and P·v register-tiled on the FMA units in exact f32,
// the online softmax between them, no score matrix in memory. Without a
// key mask or with one; the other masks, other head dims and devices with
// less shared memory per block take the BLAS path (attention_blas.go).

const (
	// tiledF32BQ: queries per block of attn_f32_128 (AF_BQ), 256 threads.
	tiledF32BQ = 128
	// tiledF32Shared: its dynamic shared memory, Q (128 rows), K (64), P
	// (64) of 132 floats and V (64) of 128 (AF_LD, AF_LV).
	tiledF32Shared = ((tiledF32BQ+64+64)*132 + 64*128) * 4
)

// attnF32Unroll picks the kernel's unroll of its product loops (2, 4 or
// 8; measured by BenchmarkAttentionF32); attnNoTiledF32 sends f32 calls to
// the BLAS path (tests, benchmarks).
var (
	attnF32Unroll  = 4
	attnNoTiledF32 = false
)

// tiledF32Attention runs an f32 attention on attn_f32_128; ran false (and
// nothing queued) where it does not apply. ps are the pointers of dst, q,
// k, v, the key mask and the mask; st the kernel's AttnArgs.
func (b *Backend) tiledF32Attention(d tensor.AttnDims, ps []uintptr, st []byte, p tensor.AttnParams) (ran bool, err error) {
	if b.dev.Vendor != hip.NVIDIA || b.dev.ComputeMajor < 8 || b.opts.GenericAttention || attnNoTiledF32 || d.D != 128 ||
		p.Causal || p.FrameLen > 0 || p.Mask != nil || b.dev.SharedPerBlockOptin < tiledF32Shared {
		return false, nil
	}
	// 16-byte loads and stores of q, k, v and out.
	if (ps[0]|ps[1]|ps[2]|ps[3])%16 != 0 {
		return false, nil
	}
	a := (&hip.Args{}).Ptr(ps[0]).Ptr(ps[1]).Ptr(ps[2]).Ptr(ps[3]).Ptr(ps[4]).Struct(st, 8)
	grid := hip.Dim3{uint32((d.Lq + tiledF32BQ - 1) / tiledF32BQ), uint32(d.Hq), uint32(d.B)}
	if err := b.launch("attention_f32", fmt.Sprintf("attn_f32_128_u%d", attnF32Unroll), grid, hip.Dim3{256}, tiledF32Shared, a); err != nil {
		return true, err
	}
	b.tiledF32Calls.Add(1)
	return true, nil
}

// TiledF32AttentionCalls counts the f32 attention calls run on the tiled
// kernel.
func (b *Backend) TiledF32AttentionCalls() int64 { return b.tiledF32Calls.Load() }
