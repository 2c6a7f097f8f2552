package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/envconfig"
)

// doctor --arch poses as a GPU: its conv3d tier order and GEMM library,
// and why, by the architecture's facts.
func TestDoctorArch(t *testing.T) {
	t.Setenv(envconfig.Conv3d, "")
	t.Setenv(envconfig.BLAS, "")
	for _, c := range []struct {
		arch, tiers, gemm string
		why               []string
	}{
		{"gfx1100", "conv2d → gemm → naive → cpu", "hipBLASLt, rocBLAS as the fallback", []string{"RDNA3", "rocm-libraries#1329", "--conv-search on"}},
		{"gfx1151", "conv2d → gemm → naive → cpu", "36.9 TFLOP/s", []string{"RDNA3.5", "TheRock#5581", "TheRock#5845"}},
		{"gfx1201", "optimized → gemm → naive → cpu", "hipBLASLt, rocBLAS as the fallback", []string{"RDNA4"}},
		{"gfx942", "optimized → gemm → naive → cpu", "rocBLAS", []string{"Instinct"}},
		{"sm_90", "optimized → gemm → naive → cpu", "cuBLAS", []string{"NVIDIA"}},
	} {
		out := doctorOutput(t, "doctor", "--arch", c.arch)
		t.Logf("doctor --arch %s:\n%s", c.arch, out)
		for _, want := range append([]string{"as " + c.arch, "conv3d tiers: " + c.tiers, c.gemm}, c.why...) {
			if !strings.Contains(out, want) {
				t.Errorf("doctor --arch %s: no %q in\n%s", c.arch, want, out)
			}
		}
	}
	// A setting overrides the architecture's order, and says so.
	t.Setenv(envconfig.Conv3d, "optimized,conv2d,cpu")
	out := doctorOutput(t, "doctor", "--arch", "gfx1100")
	if !strings.Contains(out, "conv3d tiers: optimized → conv2d → cpu") || !strings.Contains(out, "FRAMEPACK_CONV3D") {
		t.Errorf("with FRAMEPACK_CONV3D:\n%s", out)
	}
	t.Setenv(envconfig.Conv3d, "conv3")
	if err := runRoot(t, new(bytes.Buffer), "doctor", "--arch", "gfx1100"); err == nil || !strings.Contains(err.Error(), "unknown tier") {
		t.Errorf("a bad FRAMEPACK_CONV3D: %v", err)
	}
}

func doctorOutput(t *testing.T, args ...string) string {
	t.Helper()
	var b bytes.Buffer
	if err := runRoot(t, &b, args...); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func runRoot(t *testing.T, out *bytes.Buffer, args ...string) error {
	t.Helper()
	root := newRoot()
	root.SetOut(out)
	root.SetErr(out)
	root.SetArgs(args)
	return root.Execute()
}
