package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/envconfig"
)

// TestDoctorRetrySearches: doctor lists a remembered conv3d search timeout
// and --retry-searches forgets it, keeping the choices.
func TestDoctorRetrySearches(t *testing.T) {
	xdg := t.TempDir()
	cache := filepath.Join(xdg, "framepack", "conv3d.json")
	os.MkdirAll(filepath.Dir(cache), 0o755)
	key := `{"device":"gfx1100","dtype":"f16","layout":"ncdhw","x":[1,3,1,64,64],"w":[128,3,3,3,3],"bias":true,"stride":[1,1,1],"padding":[0,0,0]}`
	os.WriteFile(cache, []byte(`{"version":1,"choices":{"gfx1100|f16|ncdhw|x1x3x1x64x64|w128x3x3x3x3|s1x1x1|p0x0x0|bias":{"key":`+key+`,"tier":"optimized","updated":"2026-11-27T00:00:00Z"}},
"search_timeouts":{"gfx1100|optimized":{"device":"gfx1100","tier":"optimized","key":`+key+`,"deadline_s":30,"updated":"2026-11-27T00:00:00Z"}}}`), 0o600)
	run := func(args ...string) string {
		cmd := exec.Command(cliBinary(t), args...)
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+xdg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := run("doctor"); !strings.Contains(out, "search off: gfx1100: tier optimized's search of") {
		t.Fatalf("doctor does not list the timeout:\n%s", out)
	}
	if out := run("doctor", "--retry-searches"); !strings.Contains(out, "forgot 1 conv3d search timeouts") {
		t.Fatalf("--retry-searches:\n%s", out)
	}
	out := run("doctor")
	if strings.Contains(out, "search off") || !strings.Contains(out, "gfx1100|f16|ncdhw|x1x3x1x64x64") {
		t.Fatalf("after --retry-searches the timeout must be gone and the choice kept:\n%s", out)
	}
}

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
