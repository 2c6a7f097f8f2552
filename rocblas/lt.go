package rocblas

import (
	"fmt"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// cuBLASLt / hipBLASLt: GEMMs with fused epilogues (bias, GELU) and FP8
// E4M3 inputs with per-tensor scales. Loaded at run time like the rest; not
// used by the backend unless asked (Lt is to be used where it measures
// faster than the plain GEMM).

// LtLib is a loaded cuBLASLt or hipBLASLt.
type LtLib struct {
	vendor  Vendor
	path    string
	version string
}

// Vendor is the library family.
func (l *LtLib) Vendor() Vendor { return l.vendor }

func (l *LtLib) String() string {
	return fmt.Sprintf("%s %s (%s)", ltLibs.Libraries[l.vendor].Name, l.version, l.path)
}

var ltLibs = dynlib.NewLoader[*LtLib]("rocblas",
	dynlib.ROCm("hipBLASLt", "FRAMEPACK_HIPBLASLT", "libhipblaslt.so.1", "libhipblaslt.so.0"),
	dynlib.CUDA("cuBLASLt", "FRAMEPACK_CUBLASLT", []string{"libcublasLt.so.13", "libcublasLt.so.12"},
		dynlib.CUDADirs(cudaTargetLib)...))

// OpenLt loads the vendor's Lt library. The error names every file tried.
func OpenLt(v Vendor) (*LtLib, error) { return ltLibs.Open(v) }

// LtType is the element type of an Lt operand.
type LtType int

const (
	LtF32 LtType = iota
	LtF16
	LtBF16
	LtF8E4M3 // OCP E4M3 ("fn"); A and B only
)

func (t LtType) size() int {
	switch t {
	case LtF32:
		return 4
	case LtF8E4M3:
		return 1
	}
	return 2
}

func (t LtType) String() string {
	return [...]string{"f32", "f16", "bf16", "f8e4m3"}[t]
}

// Epilogue is what the GEMM applies to its result before storing it.
type Epilogue int

const (
	EpilogueNone     Epilogue = iota
	EpilogueBias              // + bias (one value an output column)
	EpilogueGELU              // GELU, tanh approximation
	EpilogueGELUBias          // GELU(· + bias)
)

// LtLinear is a row-major Linear: D (M, N) = epilogue(X (M, K) · W (N, K)ᵀ ·
// xScale·wScale [+ bias (N)]). X and W are device pointers of XType and
// WType (both F8E4M3 or both the output's 16-bit type, or f32); XScale and
// WScale point to one f32 on the device each (0: 1), as FP8 needs; Bias
// has DType. Accumulation is f32. FP8 needs an FP8 GPU (NVIDIA sm_89+,
// AMD with OCP FP8) and K, N multiples of 16.
//
// With RowScales, XScale points to M f32 values (one per row of X: a
// token's scale) and WScale to N (one per row of W: an output channel's),
// and element (m, n) of the product is scaled by xScale[m]·wScale[n]: the
// libraries' outer-vector scaling (cuBLASLt 12.9+ on Hopper and later,
// hipBLASLt of ROCm 7).
type LtLinear struct {
	M, N, K        int
	X, W, D, Bias  uintptr
	XType, WType   LtType
	DType          LtType
	XScale, WScale uintptr
	RowScales      bool
	Epilogue       Epilogue
}

// Validate checks the description before any library call.
func (g LtLinear) Validate() error {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return fmt.Errorf("rocblas: lt linear %dx%dx%d: negative size", g.M, g.N, g.K)
	}
	if g.XType != g.WType {
		return fmt.Errorf("rocblas: lt linear: x is %s, w %s: want the same type", g.XType, g.WType)
	}
	if g.DType == LtF8E4M3 {
		return fmt.Errorf("rocblas: lt linear: f8e4m3 output is not supported")
	}
	if g.XType == LtF8E4M3 {
		if g.K%16 != 0 || g.N%16 != 0 {
			return fmt.Errorf("rocblas: lt linear fp8 %dx%dx%d: K and N must be multiples of 16", g.M, g.N, g.K)
		}
	} else if g.XType != g.DType && g.XType != LtF32 {
		return fmt.Errorf("rocblas: lt linear: %s inputs with %s output", g.XType, g.DType)
	}
	if (g.XScale != 0 || g.WScale != 0) && g.XType != LtF8E4M3 {
		return fmt.Errorf("rocblas: lt linear: scales are for fp8 inputs only")
	}
	if g.RowScales && (g.XScale == 0 || g.WScale == 0) {
		return fmt.Errorf("rocblas: lt linear: row scales need both scale vectors")
	}
	if (g.Epilogue == EpilogueBias || g.Epilogue == EpilogueGELUBias) != (g.Bias != 0) {
		return fmt.Errorf("rocblas: lt linear: epilogue %d with bias pointer %#x", g.Epilogue, g.Bias)
	}
	if g.M > 0 && g.N > 0 && g.K > 0 && (g.X == 0 || g.W == 0 || g.D == 0) {
		return fmt.Errorf("rocblas: lt linear: nil operand")
	}
	return nil
}

// LtHandle is an Lt handle with its workspace, bound to a stream. Not safe
// for concurrent use.
type LtHandle struct {
	lib       *LtLib
	h         uintptr
	stream    uintptr
	workspace uintptr
	wsBytes   int64
	closed    bool
}

// LtWorkspace is the workspace an LtHandle wants (32 MiB covers every
// algorithm cuBLASLt picks on Hopper).
const LtWorkspace = 32 << 20
