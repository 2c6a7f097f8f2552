package kernels

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/internal/testmode"
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
	// The compile is deterministic: one that passed on this machine with
	// the same compiler, arguments and sources passes again, and the
	// default suite takes it as done. Without that, the shipped code
	// objects for these targets, built from these sources by this very
	// compiler (TestPrecompiledCurrent; TestPrecompiledReproducible rebuilds
	// one bit for bit), prove that every module compiles.
	version := clangVersion(t, clang)
	key := []string{version, toolStamps(tools), strings.Join(offlineArgs("IN", "OUT"), " ")}
	srcs := map[string]string{}
	for _, m := range Modules() {
		src, err := Source(m)
		if err != nil {
			t.Fatal(err)
		}
		srcs[m] = src
		key = append(key, m, src)
	}
	check := checkKey(key...)
	if testmode.Passed(check) {
		t.Logf("passed before on this machine with the same compiler, arguments and sources; %s=1 compiles again", testmode.Env)
		return
	}
	if !testmode.Full() {
		if why := shippedFor(version, offloadArchs); why == "" {
			t.Logf("the shipped code objects for %v were built from these sources by this compiler (%s); %s=1 compiles again",
				offloadArchs, version, testmode.Env)
			return
		} else {
			t.Logf("compiling: %s", why)
		}
	}
	var wg sync.WaitGroup
	for _, m := range Modules() {
		src := srcs[m]
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
	if !t.Failed() {
		testmode.Record(check)
	}
}

// clangVersion is the first line of clang's --version, as the manifest
// records the compiler.
func clangVersion(t *testing.T, clang string) string {
	t.Helper()
	out, err := exec.Command(clang, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", clang, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// toolStamps identifies the installed programs: each one's path, size and
// modification time (a package upgrade changes them).
func toolStamps(tools []string) string {
	var b strings.Builder
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			p = tool
		}
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", p, st.Size(), st.ModTime().UnixNano())
		}
	}
	return b.String()
}

// checkKey is the cache key of a check on these inputs.
func checkKey(parts ...string) string {
	bs := make([][]byte, len(parts))
	for i, p := range parts {
		bs[i] = []byte(p)
	}
	return testmode.Key(bs...)
}

// shippedFor is "" when every module has a shipped code object for each
// target, built from its current source by the compiler version, else
// why not.
func shippedFor(version string, targets []string) string {
	m, err := ReadManifest()
	if err != nil {
		return err.Error()
	}
	if m.Compiler != version {
		return fmt.Sprintf("the shipped kernels were built by %q, not by this %q", m.Compiler, version)
	}
	for _, mod := range Modules() {
		h, err := SourceHash(mod)
		if err != nil {
			return err.Error()
		}
		ma, ok := m.Modules[mod]
		if !ok || ma.SourceSHA256 != h {
			return mod + " is not shipped from its current source"
		}
		for _, tg := range targets {
			if a, ok := ma.Targets[tg]; !ok || a.Kind != "co" {
				return fmt.Sprintf("%s has no shipped code object for %s", mod, tg)
			}
		}
	}
	return ""
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
