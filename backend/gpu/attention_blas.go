package gpu

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/rocblas"
	"github.com/framepack-go/framepack/tensor"
)

// f32 attention through the vendor BLAS, a chunk of queries at a time: per
// batch and chunk, S = q·kᵀ·scale·log2 e for every head in one
// strided-batched GEMM, a row softmax in place (attn_rows_f32, with the
// masks), O = P·v in a second GEMM, and O scattered into the output. The
// GEMMs run exact f32 (no TF32), several times faster than the flash
// kernel's scalar f32 products; the price is the score scratch, taken from
// the allocator: as many queries per chunk as half the free budget holds,
// up to attnBLASScratch bytes. Without room for a few rows, or without
// the BLAS, the flash kernel runs instead.

const (
	// attnBLASScratch caps the scores' scratch: enough rows per chunk to
	// keep the GEMMs large, little of the budget.
	attnBLASScratch = 4 << 30
	// attnBLASMinRows: fewer queries per chunk than this (or Lq) go to the
	// flash kernel.
	attnBLASMinRows = 16
)

// attnChunkRows, when > 0, sets the queries per chunk; attnRoomCap, when
// ≥ 0, caps the free budget the chunk is chosen from (tests).
var (
	attnChunkRows       = 0
	attnRoomCap   int64 = -1
)

// blasAttention runs an f32 attention through the BLAS; ran false (and
// nothing queued) when it cannot: no BLAS, or no room for the scratch.
func (b *Backend) blasAttention(d tensor.AttnDims, ps []uintptr, scale float32, p tensor.AttnParams) (ran bool, err error) {
	if b.blas == nil || b.opts.GenericAttention {
		return false, nil
	}
	B, Lq, Lk, Hq, Hkv, D := d.B, d.Lq, d.Lk, d.Hq, d.Hkv, d.D
	g := Hq / Hkv // query heads per key/value head
	// The scores' rows padded to 64 floats: aligned for the GEMMs' fast
	// kernels and the softmax's 16-byte loads.
	ldS := (Lk + 63) / 64 * 64
	// One query row of scratch: its scores and its output for Hkv heads.
	row := 4 * int64(Hkv) * (int64(ldS) + int64(D))
	rows := int64(attnChunkRows)
	if rows <= 0 {
		room := b.alloc.room()
		if attnRoomCap >= 0 {
			room = min(room, attnRoomCap)
		}
		rows = min(room/2, attnBLASScratch) / row
		if rows < int64(min(Lq, attnBLASMinRows)) {
			return false, nil
		}
	}
	Lc := int(min(rows, int64(Lq)))
	// The GEMMs' sizes and leading dimensions are 32-bit.
	if int64(Lc)*int64(ldS) > math.MaxInt32 || int64(Hq)*int64(D) > math.MaxInt32 {
		return false, nil
	}
	ws, err := b.alloc.alloc(row * int64(Lc))
	if errors.Is(err, tensor.ErrOutOfMemory) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	defer b.alloc.free(ws)
	sPtr := ws.ptr
	oPtr := ws.ptr + uintptr(4*int64(Hkv)*int64(Lc)*int64(ldS))
	causal := int32(0)
	if p.Causal {
		causal = 1
	}
	const f = 4 // bytes of an f32
	for bi := 0; bi < B; bi++ {
		kb := ps[2] + uintptr(f*int64(bi)*int64(Lk)*int64(Hkv)*int64(D))
		vb := ps[3] + uintptr(f*int64(bi)*int64(Lk)*int64(Hkv)*int64(D))
		for q0 := 0; q0 < Lq; q0 += Lc {
			n := min(Lc, Lq-q0)
			b.blasAttnChunks.Add(1)
			for r := 0; r < g; r++ {
				// Query heads r, r+g, … share key/value heads 0, 1, …
				qoff := f * ((int64(bi)*int64(Lq)+int64(q0))*int64(Hq) + int64(r)) * int64(D)
				err := b.blasMatMul(rocblas.MatMul{M: n, N: Lk, K: D, TransB: true,
					A: ps[1] + uintptr(qoff), LDA: Hq * D, StrideA: int64(g) * int64(D),
					B: kb, LDB: Hkv * D, StrideB: int64(D),
					C: sPtr, LDC: ldS, StrideC: int64(n) * int64(ldS),
					Batch: Hkv, In: rocblas.F32, Out: rocblas.F32, Alpha: scale * math.Log2E})
				if err != nil {
					return true, err
				}
				st := packInt64s(int64(Lk), int64(ldS), int64(q0), int64(bi), int64(n)*int64(ldS), int64(max(p.FrameLen, 0)), int64(d.MaskStride))
				st = binary.LittleEndian.AppendUint32(st, uint32(causal))
				st = append(st, 0, 0, 0, 0) // struct padding to 8
				a := (&hip.Args{}).Ptr(sPtr).Ptr(ps[4]).Ptr(ps[5]).Struct(st, 8)
				if err := b.launch("attention", "attn_rows_f32", hip.Dim3{uint32(n), uint32(Hkv)}, hip.Dim3{1024}, 0, a); err != nil {
					return true, err
				}
				err = b.blasMatMul(rocblas.MatMul{M: n, N: D, K: Lk,
					A: sPtr, LDA: ldS, StrideA: int64(n) * int64(ldS),
					B: vb, LDB: Hkv * D, StrideB: int64(D),
					C: oPtr, LDC: D, StrideC: int64(n) * int64(D),
					Batch: Hkv, In: rocblas.F32, Out: rocblas.F32, Alpha: 1})
				if err != nil {
					return true, err
				}
				// O (Hkv, n, D) into out[bi, q0+i, hk·g+r, :].
				args := []int64{int64(Hkv) * int64(n) * int64(D), 3, qoff / f, 0}
				args = append(args, fixed([]int{Hkv, n, D})...)
				args = append(args, fixed([]int{g * D, Hq * D, 1})...)
				args = append(args, fixed([]int{n * D, D, 1})...)
				ca := (&hip.Args{}).Ptr(ps[0]).Ptr(oPtr).Struct(packInt64s(args...), 8)
				if err := b.launchLinear("elementwise", "copy_b4", args[0], 256, 1, ca); err != nil {
					return true, err
				}
			}
		}
	}
	b.blasAttnCalls.Add(1)
	return true, nil
}

// blasMatMul runs one product on the vendor BLAS.
func (b *Backend) blasMatMul(m rocblas.MatMul) error {
	if m.Batch <= 1 {
		m.Batch, m.StrideA, m.StrideB, m.StrideC = 1, 0, 0, 0
	}
	b.blasMu.Lock()
	defer b.blasMu.Unlock()
	return b.blasCall(func() error { return b.blas.MatMul(m) })
}

// BLASAttentionCalls counts the attention calls run through the BLAS.
func (b *Backend) BLASAttentionCalls() int64 { return b.blasAttnCalls.Load() }
