package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
