// Package envconfig reads the FRAMEPACK_* settings that change how the
// engine runs, in one place. The packages that open something (a device, a
// backend, a BLAS) read a Config once when they open it and keep what it
// says in their options; no kernel or op path reads the environment.
package envconfig

import (
	"os"
	"strings"
)

// The variables (docs/architecture.md lists them for users).
const (
	GPU     = "FRAMEPACK_GPU"      // hip, cuda or none: which GPU platform to try
	BLAS    = "FRAMEPACK_BLAS"     // gonum: do not load OpenBLAS; lt: GPU Linear through cuBLASLt / hipBLASLt; plain: never (rocBLAS / cuBLAS)
	Kernels = "FRAMEPACK_KERNELS"  // compile: compile every kernel module at run time
	Attn    = "FRAMEPACK_ATTN"     // kernel: no cuDNN attention; generic: the portable kernel only
	OpByOp  = "FRAMEPACK_OP_BY_OP" // 1: the fused kernels are not used
	Faults  = "FRAMEPACK_FAULTS"   // fault injection (package convchain)
	// CUDNNConv: legacy, graph or auto: the cuDNN API convolutions are
	// planned with.
	CUDNNConv = "FRAMEPACK_CUDNN_CONV"
	// Conv3d: the conv3d chain's tier order, comma separated ("conv2d",
	// "optimized,conv2d,gemm,naive,cpu"), or auto: the architecture's.
	Conv3d = "FRAMEPACK_CONV3D"
)

// Config is the settings as read.
type Config struct {
	// GPU is FRAMEPACK_GPU, lower case ("" for auto).
	GPU string
	// GonumBLAS: FRAMEPACK_BLAS=gonum.
	GonumBLAS bool
	// Lt: FRAMEPACK_BLAS=lt; PlainBLAS: FRAMEPACK_BLAS=plain (no Lt
	// library where the architecture's table would use one).
	Lt, PlainBLAS bool
	// RuntimeCompile: FRAMEPACK_KERNELS=compile.
	RuntimeCompile bool
	// KernelAttention: FRAMEPACK_ATTN=kernel or generic (framepack's
	// attention kernels instead of cuDNN's); GenericAttention: =generic
	// (the portable kernel also where a tensor-core one exists).
	KernelAttention, GenericAttention bool
	// OpByOp: FRAMEPACK_OP_BY_OP=1.
	OpByOp bool
	// Faults is FRAMEPACK_FAULTS as it is (convchain.ParseFaults reads it).
	Faults string
	// CUDNNConv is FRAMEPACK_CUDNN_CONV as it is (miopen.ParseConvAPI reads
	// it).
	CUDNNConv string
	// Conv3d is FRAMEPACK_CONV3D as it is (convchain.ParseOrder reads it).
	Conv3d string
}

// Read reads the settings now.
func Read() Config {
	attn := os.Getenv(Attn)
	return Config{
		GPU:              strings.ToLower(os.Getenv(GPU)),
		GonumBLAS:        strings.ToLower(os.Getenv(BLAS)) == "gonum",
		Lt:               strings.ToLower(os.Getenv(BLAS)) == "lt",
		PlainBLAS:        strings.ToLower(os.Getenv(BLAS)) == "plain",
		RuntimeCompile:   os.Getenv(Kernels) == "compile",
		KernelAttention:  attn == "kernel" || attn == "generic",
		GenericAttention: attn == "generic",
		OpByOp:           os.Getenv(OpByOp) == "1",
		Faults:           os.Getenv(Faults),
		CUDNNConv:        os.Getenv(CUDNNConv),
		Conv3d:           os.Getenv(Conv3d),
	}
}
