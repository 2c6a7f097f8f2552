package rocblas

import (
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/internal/dynlib"
)

// Lib is a loaded BLAS library. It stays loaded for the life of the process.
type Lib struct {
	vendor  Vendor
	path    string // the file the loader picked
	version string
}

// Vendor is the library family: AMD (rocBLAS) or NVIDIA (cuBLAS).
func (l *Lib) Vendor() Vendor { return l.vendor }

// Path is the file that was loaded.
func (l *Lib) Path() string { return l.path }

// Version is the library's own version string.
func (l *Lib) Version() string { return l.version }

func (l *Lib) String() string {
	return fmt.Sprintf("%s %s (%s)", libs.Libraries[l.vendor].Name, l.version, l.path)
}

// Handle is a library handle bound to one stream. A Handle is not safe for
// concurrent use.
type Handle struct {
	lib    *Lib
	h      uintptr
	fast   bool
	closed bool
}

// Lib is the library the handle belongs to.
func (h *Handle) Lib() *Lib { return h.lib }

// SetFastF32 lets f32 products use reduced-precision tensor cores (TF32 on
// NVIDIA, about 3e-4 relative error instead of 1e-6). Off by default. AMD:
// rocBLAS has no such mode on the consumer GPUs we target; no effect.
func (h *Handle) SetFastF32(on bool) { h.fast = on }

// libs loads each vendor's library, found as Libraries says.
var libs = dynlib.NewLoader[*Lib]("rocblas",
	dynlib.ROCm("rocBLAS", "FRAMEPACK_ROCBLAS", "librocblas.so.5", "librocblas.so.4", "librocblas.so.0"),
	dynlib.CUDA("cuBLAS", "FRAMEPACK_CUBLAS", []string{"libcublas.so.13", "libcublas.so.12"},
		dynlib.CUDADirs(cudaTargetLib)...))

// cudaTargetLib is where a CUDA toolkit keeps the x86-64 libraries when
// lib64 is not a link to it.
const cudaTargetLib = "/usr/local/cuda/targets/x86_64-linux/lib"

// EnvPath names the environment variable that points a vendor's loader at
// one library file, bypassing the search.
func EnvPath(v Vendor) string { return libs.EnvPath(v) }

// Open loads rocBLAS, or cuBLAS when rocBLAS is absent. A caller that knows
// its platform (the hip package reports it) should use OpenVendor.
func Open() (*Lib, error) { return dynlib.First([]Vendor{AMD, NVIDIA}, OpenVendor) }

// OpenVendor loads the given vendor's library. The error names every file
// tried and why each failed.
func OpenVendor(v Vendor) (*Lib, error) { return libs.Open(v) }

var errClosed = errors.New("rocblas: handle is closed")
