// Package rocblas runs matrix products on the GPU through the vendor BLAS
// library, loaded at run time: rocBLAS on AMD (librocblas.so.{5,4,0}) and
// cuBLAS on NVIDIA (libcublas.so.{13,12}), the library HIP's NVIDIA platform
// maps rocBLAS/hipBLAS onto. Nothing of either SDK is needed to build.
//
// The package knows nothing of devices or memory: matrices are device
// pointers (uintptr) and a stream is the runtime's stream handle (hipStream_t
// or CUstream) as a uintptr. Calls must come from an OS thread on which the
// device is current (hipSetDevice / cuCtxSetCurrent): the caller pins its GPU
// goroutine with runtime.LockOSThread.
//
// Inputs are f32, f16 or bf16; accumulation is always f32. On NVIDIA, f32
// products are exact f32 unless the handle is put in fast mode (TF32).
//
// The library is found by soname through the system loader, then in the
// usual install directories ($ROCM_PATH/lib, /opt/rocm/lib; $CUDA_PATH/lib64,
// /usr/local/cuda/lib64). FRAMEPACK_ROCBLAS or FRAMEPACK_CUBLAS names one
// file instead.
package rocblas

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// Vendor names the library family behind a Lib.
type Vendor = dynlib.Vendor

const (
	AMD    = dynlib.AMD    // rocBLAS
	NVIDIA = dynlib.NVIDIA // cuBLAS
)

// DType is an element type of a GEMM operand.
type DType = dynlib.DType

const (
	F32  = dynlib.F32
	F16  = dynlib.F16
	BF16 = dynlib.BF16
)

// Gemm is one strided-batched product in the libraries' own column-major
// convention:
//
//	C[i] = Alpha · op(A[i]) · op(B[i]) + Beta · C[i],  i < Batch
//
// op(A) is M×K, op(B) is K×N, C is M×N; A[i] starts StrideA elements after
// A[i-1] (0 broadcasts one matrix over the batch). A and B share one dtype;
// C may be the same or f32. LD* are leading dimensions in elements.
type Gemm struct {
	TransA, TransB bool
	M, N, K        int
	A              uintptr
	LDA            int
	StrideA        int64
	B              uintptr
	LDB            int
	StrideB        int64
	C              uintptr
	LDC            int
	StrideC        int64
	Batch          int // 0 means 1
	In, Out        DType
	Alpha, Beta    float32
}

// MatMul is a product of row-major matrices, the layout of the engine's
// tensors:
//
//	C[i] = Alpha · op(A[i]) · op(B[i]) + Beta · C[i]
//
// where A[i] is M×K row-major (K×M when TransA), B[i] is K×N (N×K when
// TransB) and C[i] is M×N. A linear layer y = x·Wᵀ is {A: x, B: W,
// TransB: true}. LD* of 0 mean packed rows; strides of 0 with Batch > 1
// mean packed matrices for C and broadcast for A and B only when the
// matching Broadcast flag is set.
type MatMul struct {
	M, N, K          int
	TransA, TransB   bool
	A, B, C          uintptr
	LDA, LDB, LDC    int
	StrideA, StrideB int64
	StrideC          int64
	BroadcastA       bool // every batch uses the same A
	BroadcastB       bool // every batch uses the same B
	Batch            int  // 0 means 1
	In, Out          DType
	Alpha, Beta      float32
}

// ColumnMajor is m as one call of the column-major API. A row-major matrix
// is its own transpose in column-major storage, so C = op(A)·op(B) becomes
// Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap, M and N swap, and each keeps its
// own transpose flag.
func (m MatMul) ColumnMajor() Gemm {
	batch := m.Batch
	if batch == 0 {
		batch = 1
	}
	// Row lengths of the stored matrices.
	aCols, bCols := m.K, m.N
	if m.TransA {
		aCols = m.M
	}
	if m.TransB {
		bCols = m.K
	}
	lda, ldb, ldc := orDefault(m.LDA, aCols), orDefault(m.LDB, bCols), orDefault(m.LDC, m.N)
	aRows, bRows := m.M, m.K
	if m.TransA {
		aRows = m.K
	}
	if m.TransB {
		bRows = m.N
	}
	sa, sb, sc := m.StrideA, m.StrideB, m.StrideC
	if sa == 0 && !m.BroadcastA {
		sa = int64(aRows) * int64(lda)
	}
	if sb == 0 && !m.BroadcastB {
		sb = int64(bRows) * int64(ldb)
	}
	if sc == 0 {
		sc = int64(m.M) * int64(ldc)
	}
	if m.BroadcastA {
		sa = 0
	}
	if m.BroadcastB {
		sb = 0
	}
	return Gemm{
		TransA: m.TransB, TransB: m.TransA,
		M: m.N, N: m.M, K: m.K,
		A: m.B, LDA: ldb, StrideA: sb,
		B: m.A, LDB: lda, StrideB: sa,
		C: m.C, LDC: ldc, StrideC: sc,
		Batch: batch, In: m.In, Out: m.Out,
		Alpha: m.Alpha, Beta: m.Beta,
	}
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Validate checks g against the column-major rules both libraries enforce,
// so a bad call gets a clear error instead of a status code.
func (g Gemm) Validate() error {
	batch := g.Batch
	if batch == 0 {
		batch = 1
	}
	switch {
	case g.M < 0 || g.N < 0 || g.K < 0 || batch < 0:
		return fmt.Errorf("rocblas: negative size in gemm m=%d n=%d k=%d batch=%d", g.M, g.N, g.K, batch)
	case g.In != F32 && g.In != F16 && g.In != BF16:
		return fmt.Errorf("rocblas: unsupported input dtype %v", g.In)
	case g.Out != g.In && g.Out != F32:
		return fmt.Errorf("rocblas: output dtype %v with %v inputs (want %v or f32)", g.Out, g.In, g.In)
	}
	for _, v := range []int{g.M, g.N, g.K, batch, g.LDA, g.LDB, g.LDC} {
		if v > math.MaxInt32 {
			return fmt.Errorf("rocblas: gemm size %d exceeds the 32-bit API (m=%d n=%d k=%d batch=%d); split the product", v, g.M, g.N, g.K, batch)
		}
	}
	rowsA, rowsB := g.M, g.K // rows of the stored (column-major) matrices
	if g.TransA {
		rowsA = g.K
	}
	if g.TransB {
		rowsB = g.N
	}
	if g.LDA < max(1, rowsA) {
		return fmt.Errorf("rocblas: lda=%d < %d (rows of A, transA=%v)", g.LDA, max(1, rowsA), g.TransA)
	}
	if g.LDB < max(1, rowsB) {
		return fmt.Errorf("rocblas: ldb=%d < %d (rows of B, transB=%v)", g.LDB, max(1, rowsB), g.TransB)
	}
	if g.LDC < max(1, g.M) {
		return fmt.Errorf("rocblas: ldc=%d < m=%d", g.LDC, g.M)
	}
	if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 {
		return fmt.Errorf("rocblas: negative batch stride")
	}
	if batch > 1 && g.StrideC < int64(g.LDC)*int64(g.N) {
		return fmt.Errorf("rocblas: strideC=%d overlaps batches (ldc·n=%d)", g.StrideC, int64(g.LDC)*int64(g.N))
	}
	if g.M*g.N > 0 && batch > 0 && g.C == 0 {
		return fmt.Errorf("rocblas: nil C")
	}
	if g.M*g.N*g.K > 0 && batch > 0 && (g.A == 0 || g.B == 0) {
		return fmt.Errorf("rocblas: nil A or B")
	}
	return nil
}

// FLOPs is the operation count of a product, 2·m·n·k per batch.
func (g Gemm) FLOPs() float64 {
	b := g.Batch
	if b == 0 {
		b = 1
	}
	return 2 * float64(g.M) * float64(g.N) * float64(g.K) * float64(b)
}

// Error is a status returned by the vendor library.
type Error = dynlib.CallError
