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
		t.Skip("clang++-19 not installed (apt-get install clang-19 lld-19 clang-tools-19): the offline AMD compile check needs it")
	}
	// clang runs other programs for an offload build: its own cc1, lld
	// (package lld-19) and clang-offload-bundler (package clang-tools-19,
	// only a Recommends of clang-19). Ask it which (-###) and skip, naming
	// them, when one is missing, rather than fail on a half-installed clang.
	dir := t.TempDir()
	probe := filepath.Join(dir, "probe.hip")
	if err := os.WriteFile(probe, []byte("__attribute__((global)) void k() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := offlineArgs(probe, filepath.Join(dir, "probe.co"))
	plan, err := exec.Command(clang, append([]string{"-###"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("clang++-19 -### %s: %v\n%s", strings.Join(args, " "), err, plan)
	}
	tools := offlineTools(string(plan))
	if len(tools) == 0 {
		t.Fatalf("clang++-19 -### names no commands:\n%s", plan)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s, which clang++-19 runs for an AMD offload build, is not installed (apt-get install clang-19 lld-19 clang-tools-19): %v", tool, err)
		}
	}
	t.Logf("clang++-19 runs %v", tools)
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
			args := offlineArgs(in, out)
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

// offlineArgs are clang++-19's arguments for the offline compile of in.
func offlineArgs(in, out string) []string {
	args := []string{"-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only", "-O3", "-c", in, "-o", out}
	for _, a := range offloadArchs {
		args = append(args, "--offload-arch="+a)
	}
	return args
}

// offlineTools are the distinct programs in clang's -### output: each
// command it would run is a line whose first quoted word is the program.
func offlineTools(plan string) []string {
	seen := map[string]bool{}
	var tools []string
	for _, line := range strings.Split(plan, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, `"`) {
			continue
		}
		end := strings.Index(line[1:], `"`)
		if end < 0 {
			continue
		}
		if tool := line[1 : 1+end]; !seen[tool] {
			seen[tool] = true
			tools = append(tools, tool)
		}
	}
	return tools
}
