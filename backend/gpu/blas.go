package gpu

import "strings"

// BLASChoice is the GEMM library a GPU architecture uses for the Linear
// layers by default, and why.
type BLASChoice struct {
	// Lt: hipBLASLt (cuBLASLt on NVIDIA) for bf16/f16 Linear layers, with
	// the bias in its epilogue, where the library loads; rocBLAS (cuBLAS)
	// for the rest and whenever it does not.
	Lt  bool
	Why string
}

// BLASFor is the table of BLASChoice by architecture (hipDeviceProp's
// gcnArchName, or "sm_XX"): hipBLASLt on RDNA3 (gfx110x), RDNA3.5
// (gfx115x: rocBLAS has no tuned bf16 kernels there, and measures 5.1
// TFLOP/s against hipBLASLt's 36.9) and RDNA4 (gfx12); rocBLAS / cuBLAS
// elsewhere, hipBLASLt / cuBLASLt there on request (FRAMEPACK_BLAS=lt).
func BLASFor(arch string) BLASChoice {
	a, _, _ := strings.Cut(strings.ToLower(arch), ":")
	switch {
	case strings.HasPrefix(a, "gfx115"):
		return BLASChoice{Lt: true, Why: a + " (RDNA3.5): hipBLASLt, rocBLAS as the fallback; rocBLAS has no tuned bf16 kernels here (5.1 against hipBLASLt's 36.9 TFLOP/s)"}
	case strings.HasPrefix(a, "gfx110"):
		return BLASChoice{Lt: true, Why: a + " (RDNA3): hipBLASLt, rocBLAS as the fallback"}
	case strings.HasPrefix(a, "gfx12"):
		return BLASChoice{Lt: true, Why: a + " (RDNA4): hipBLASLt, rocBLAS as the fallback"}
	case strings.HasPrefix(a, "sm_"):
		return BLASChoice{Why: a + " (NVIDIA): cuBLAS; cuBLASLt with FRAMEPACK_BLAS=lt"}
	}
	return BLASChoice{Why: a + ": rocBLAS; hipBLASLt with FRAMEPACK_BLAS=lt"}
}
