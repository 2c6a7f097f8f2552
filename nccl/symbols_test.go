package nccl

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/dynlibtest"
)

// Every function the shim calls must be exported by each NCCL and RCCL
// found here. No package of this CI's Debian ships either (RCCL is ROCm's,
// NCCL is in non-free), so each half skips, naming where it looked, unless
// FRAMEPACK_NCCL / FRAMEPACK_RCCL or FRAMEPACK_LIBROOT points at one
// (PyTorch's site-packages/nvidia/nccl/lib, a ROCm package unpacked with
// dpkg -x).
func TestSymbolsResolve(t *testing.T) { dynlibtest.CheckSymbols(t, libs, AMD, NVIDIA) }

func TestUniqueIDText(t *testing.T) {
	var id UniqueID
	for i := range id {
		id[i] = byte(i * 7)
	}
	back, err := ParseUniqueID(id.String())
	if err != nil || back != id {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "zz", id.String()[:20]} {
		if _, err := ParseUniqueID(bad); err == nil {
			t.Errorf("ParseUniqueID(%q): want an error", bad)
		}
	}
}

func TestMulticastOff(t *testing.T) {
	if env := ChildEnv(); len(env) != 1 || env[0] != "NCCL_NVLS_ENABLE=0" {
		t.Errorf("ChildEnv %v", env)
	}
}
