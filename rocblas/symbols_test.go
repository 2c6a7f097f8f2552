package rocblas

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/dynlibtest"
)

// Every function the shim calls must be exported by each library version
// found here.
func TestSymbolsResolve(t *testing.T) { dynlibtest.CheckSymbols(t, libs, AMD, NVIDIA) }

// The same for cuBLASLt and hipBLASLt. No Debian package ships libhipblaslt
// (bookworm has no ROCm BLAS at all), so in CI the AMD half skips unless
// FRAMEPACK_HIPBLASLT or FRAMEPACK_LIBROOT points at one (a ROCm package
// unpacked with dpkg -x, say).
func TestLtSymbolsResolve(t *testing.T) { dynlibtest.CheckSymbols(t, ltLibs, AMD, NVIDIA) }
