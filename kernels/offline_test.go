package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// offloadArchs are the AMD targets CI compiles every module for: RDNA3
// (gfx1100) and Strix Halo (gfx1151).
var offloadArchs = []string{"gfx1100", "gfx1151"}

// TestOfflineAMD compiles every module for gfx1100 and gfx1151 with
// Debian's clang-19, without device libraries or HIP headers, as
// shared/spec/gpu-apis.md §6.3 describes. It catches AMD compile errors on
// machines without an AMD GPU. Needs the apt packages clang-19 and lld-19.
func TestOfflineAMD(t *testing.T) {
	clang, err := exec.LookPath("clang++-19")
	if err != nil {
		t.Skip("clang++-19 not installed (apt-get install clang-19 lld-19): the offline AMD compile check needs it")
	}
	// AMD device code is linked by lld, a separate package.
	if _, err := os.Stat("/usr/lib/llvm-19/bin/lld"); err != nil {
		if _, err := exec.LookPath("ld.lld-19"); err != nil {
			t.Skip("lld-19 not installed (apt-get install lld-19): clang-19 links AMD code objects with it")
		}
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	for _, m := range Modules() {
		src, err := Source(m)
		if err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(dir, m+".hip")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := filepath.Join(dir, m+".co")
			args := []string{"-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", "-c", in, "-o", out}
			for _, a := range offloadArchs {
				args = append(args, "--offload-arch="+a)
			}
			msg, err := exec.Command(clang, args...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: clang-19 %s: %v\n%s", m, strings.Join(args, " "), err, msg)
				return
			}
			st, err := os.Stat(out)
			if err != nil || st.Size() == 0 {
				t.Errorf("%s: no code object (%v)", m, err)
				return
			}
			t.Logf("%s: %d-byte code object for %v", m, st.Size(), offloadArchs)
		}()
	}
	wg.Wait()
}

func TestSources(t *testing.T) {
	mods := Modules()
	if len(mods) == 0 {
		t.Fatal("no kernel modules embedded")
	}
	for _, m := range mods {
		src, err := Source(m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(src, "KERNEL") || strings.Contains(src, "#include") {
			t.Errorf("%s: want kernels and no #include", m)
		}
	}
}
