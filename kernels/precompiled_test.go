package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
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
	for _, c := range []struct {
		major, minor int
		want         string
		ok           bool
	}{
		{9, 0, "sm_90", true},
		{8, 9, "sm_89", true},
		{8, 7, "sm_86", true}, // Orin: the sm_86 PTX, compiled forward by the driver
		{10, 0, "sm_90", true},
		{12, 0, "sm_90", true},
		{7, 5, "", false},
	} {
		got, ok := NVIDIATarget(mod, c.major, c.minor)
		if got != c.want || ok != c.ok {
			t.Errorf("NVIDIATarget(%d.%d) = %q, %v; want %q, %v", c.major, c.minor, got, ok, c.want, c.ok)
		}
	}
}
