package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testmode"
)

// TestPrecompiledCurrent fails when the shipped kernels are stale: every
// module must have an artifact for every target, built from its current
// source (go generate ./kernels rebuilds what changed), intact.
func TestPrecompiledCurrent(t *testing.T) {
	m, err := ReadManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range Modules() {
		ma, ok := m.Modules[mod]
		if !ok {
			t.Errorf("%s: not precompiled (run go generate ./kernels)", mod)
			continue
		}
		h, err := SourceHash(mod)
		if err != nil {
			t.Fatal(err)
		}
		if h != ma.SourceSHA256 {
			t.Errorf("%s: precompiled from another source (run go generate ./kernels)", mod)
			continue
		}
		for tg := range ma.Targets {
			if !strings.HasSuffix(tg, CubinSuffix) {
				continue
			}
			code, kind, ok, err := Precompiled(mod, tg)
			if err != nil || !ok || kind != "cubin" {
				t.Errorf("%s %s: unreadable cubin (%v)", mod, tg, err)
			} else if err := checkArtifact(code, kind, tg); err != nil {
				t.Errorf("%s %s: %v", mod, tg, err)
			}
		}
		for _, tg := range append(append([]string{}, NVIDIATargets...), AMDTargets...) {
			code, kind, ok, err := Precompiled(mod, tg)
			if err != nil || !ok {
				t.Errorf("%s %s: missing or unreadable (%v; run go generate ./kernels)", mod, tg, err)
				continue
			}
			if err := checkArtifact(code, kind, tg); err != nil {
				t.Errorf("%s %s: %v", mod, tg, err)
			}
		}
	}
	t.Logf("precompiled kernels: %s", Summary())
}

// checkArtifact checks that an artifact is what its kind says, for target.
func checkArtifact(code []byte, kind, target string) error {
	switch kind {
	case "ptx":
		if !bytes.Contains(code, []byte("\n.target "+target+"\n")) {
			return fmt.Errorf("PTX without the line .target %s", target)
		}
	case "co":
		// An AMDGPU ELF (e_machine 224) with a code object ABI.
		if len(code) < 64 || !bytes.Equal(code[:4], []byte("\x7fELF")) {
			return fmt.Errorf("not an ELF file")
		}
		if mach := binary.LittleEndian.Uint16(code[18:]); mach != 224 {
			return fmt.Errorf("ELF machine %d, not AMDGPU (224)", mach)
		}
	case "cubin":
		if len(code) < 64 || !bytes.Equal(code[:4], []byte("\x7fELF")) {
			return fmt.Errorf("not an ELF file")
		}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	return nil
}

func TestTargetChoice(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"gfx90a:sramecc+:xnack-", "gfx90a"},
		{"gfx1151", "gfx1151"},
	} {
		if got := AMDTarget(c.in); got != c.want {
			t.Errorf("AMDTarget(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	m, _ := ReadManifest()
	if len(m.Modules) == 0 {
		t.Skip("no precompiled kernels")
	}
	mod := Modules()[0]
	// exact is the artifact for an arch shipped as is: its cubin when
	// there is one, else its PTX.
	exact := func(arch string) string {
		if _, ok := m.Modules[mod].Targets[arch+CubinSuffix]; ok {
			return arch + CubinSuffix
		}
		return arch
	}
	for _, c := range []struct {
		major, minor int
		want         string
		ok           bool
	}{
		{9, 0, exact("sm_90"), true},
		{8, 9, exact("sm_89"), true},
		{8, 7, "sm_86", true}, // Orin: the sm_86 PTX, compiled forward by the driver
		{10, 0, "sm_90", true},
		{12, 0, "sm_90", true}, // the newest PTX, never a cubin of another arch
		{7, 5, "", false},
	} {
		got, ok := NVIDIATarget(mod, c.major, c.minor)
		if got != c.want || ok != c.ok {
			t.Errorf("NVIDIATarget(%d.%d) = %q, %v; want %q, %v", c.major, c.minor, got, ok, c.want, c.ok)
		}
	}
}

// TestPrecompiledReproducible rebuilds one module for one NVIDIA and one AMD
// target with the installed clang-19 and compares with what is shipped, so
// the artifacts are known to come from these sources and this compiler.
func TestPrecompiledReproducible(t *testing.T) {
	clang, err := exec.LookPath("clang++-19")
	if err != nil {
		t.Skip("clang++-19 not installed (apt-get install clang-19 lld-19 clang-tools-19)")
	}
	if _, err := exec.LookPath("ld.lld-19"); err != nil {
		if _, err := os.Stat("/usr/lib/llvm-19/bin/lld"); err != nil {
			t.Skip("lld-19 not installed: clang-19 links AMD code objects with it")
		}
	}
	const mod = "norm"
	src, err := Source(mod)
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic: a rebuild that matched on this machine with the same
	// compiler, source and shipped artifacts matches again (the default
	// suite takes it as done).
	m, err := ReadManifest()
	if err != nil {
		t.Fatal(err)
	}
	key := []string{clangVersion(t, clang), toolStamps([]string{clang, "ld.lld-19", "/usr/lib/llvm-19/bin/lld"}), src,
		strings.Join(CompileArgs("ptx", "sm_90", "IN", "OUT"), " "), strings.Join(CompileArgs("co", "gfx1100", "IN", "OUT"), " "),
		m.Modules[mod].Targets["sm_90"].SHA256, m.Modules[mod].Targets["gfx1100"].SHA256}
	check := checkKey(key...)
	if testmode.Passed(check) {
		t.Logf("matched before on this machine with the same compiler, source and artifacts; %s=1 rebuilds", testmode.Env)
		return
	}
	dir := t.TempDir()
	for _, c := range []struct{ kind, target string }{{"ptx", "sm_90"}, {"co", "gfx1100"}} {
		in := filepath.Join(dir, SourceFileName(mod, c.target))
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		want, kind, ok, err := Precompiled(mod, c.target)
		if err != nil || !ok || kind != c.kind {
			t.Fatalf("%s %s: not shipped (%v)", mod, c.target, err)
		}
		out := filepath.Join(dir, mod+"."+c.target)
		if msg, err := exec.Command(clang, CompileArgs(c.kind, c.target, in, out)...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", mod, c.target, err, msg)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s %s: rebuilt artifact (%d bytes) differs from the shipped one (%d bytes): run go generate ./kernels with this compiler", mod, c.target, len(got), len(want))
		}
	}
	if !t.Failed() {
		testmode.Record(check)
	}
}
