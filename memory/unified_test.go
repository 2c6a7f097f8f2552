package memory

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeSys builds a /proc and /sys tree: a discrete amdgpu card0 at
// 0000:03:00.0 with 24 GiB, an APU card1 at 0000:c3:00.0 with a 512 MiB
// carve-out and gtt GiB of GTT, and a connector entry.
func fakeSys(t *testing.T, memTotal, memAvail, gtt, gttUsed int64) string {
	root := t.TempDir()
	write := func(p, s string) {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kb := func(n int64) string { return itoa(n / KiB) }
	write("proc/meminfo", "MemTotal:       "+kb(memTotal)+" kB\nMemFree:         1000 kB\nMemAvailable:   "+kb(memAvail)+" kB\nBuffers: 0 kB\n")
	card := func(name, slot string, vram, vramUsed, gtt, gttUsed int64) {
		d := "sys/class/drm/" + name + "/device/"
		write(d+"uevent", "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME="+slot+"\n")
		write(d+"mem_info_vram_total", itoa(vram)+"\n")
		write(d+"mem_info_vram_used", itoa(vramUsed)+"\n")
		write(d+"mem_info_gtt_total", itoa(gtt)+"\n")
		write(d+"mem_info_gtt_used", itoa(gttUsed)+"\n")
	}
	card("card0", "0000:03:00.0", 24*GiB, GiB, 32*GiB, 0)
	card("card1", "0000:c3:00.0", 512*MiB, 100*MiB, gtt, gttUsed)
	write("sys/class/drm/card1-DP-1/status", "connected\n")
	write("sys/class/drm/card2/device/uevent", "DRIVER=i915\n")
	return root
}

// strixHalo is the sysfs of a Strix Halo (128 GiB: 124 GiB to the system,
// 110 GiB available, 96 GiB GTT with 2 GiB used) and its GPU at busID.
func strixHalo(t *testing.T, busID string) (string, DeviceInfo) {
	return fakeSys(t, 124*GiB, 110*GiB, 96*GiB, 2*GiB),
		DeviceInfo{Name: "AMD Radeon 8060S", Arch: "gfx1151", Integrated: true, PCIBusID: busID, TotalMem: 512 * MiB}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestUnifiedBudgetFromSysfs(t *testing.T) {
	root, d := strixHalo(t, "0000:C3:00.0") // the bus id in another case than sysfs'
	b, err := BudgetFor(d, root)
	if err != nil {
		t.Fatal(err)
	}
	total := 512*MiB + 96*GiB
	if !b.Integrated || b.Total != total || b.Cap != DefaultCap(total) || b.Preserve != DefaultPreserve {
		t.Fatalf("budget %v", b)
	}
	if !strings.Contains(b.Source, "card1") || !strings.Contains(b.Source, "GTT 96.0 GiB") {
		t.Fatalf("source %q", b.Source)
	}

	// Little available: the cap follows MemAvailable less the host reserve
	// (max(4 GiB, 124/8 GiB) = 15.5 GiB) plus the free carve-out.
	root = fakeSys(t, 124*GiB, 40*GiB, 96*GiB, 2*GiB)
	b, err = BudgetFor(d, root)
	if err != nil {
		t.Fatal(err)
	}
	want := (512*MiB - 100*MiB) + (40*GiB - 124*GiB/8)
	if b.Cap != want {
		t.Fatalf("cap %s, want %s", FormatBytes(b.Cap), FormatBytes(want))
	}

	// Without a PCI address the card whose VRAM is nearest the carve-out
	// the runtime reports is chosen.
	d.PCIBusID = ""
	s, err := ReadSysMem(root, "", 512*MiB)
	if err != nil || s.Card != "card1" || s.GTTTotal != 96*GiB {
		t.Fatalf("card by carve-out: %+v %v", s, err)
	}
	// The integrated flag may be missing: gfx1151 is known to be an APU.
	d.Integrated = false
	if b, _ := BudgetFor(d, root); !b.Integrated {
		t.Fatal("gfx1151 not treated as integrated")
	}
}

func TestUnifiedBudgetWithoutSysfs(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte("MemTotal: 33554432 kB\nMemAvailable: 25165824 kB\n"), 0o644)
	d := DeviceInfo{Name: "APU", Arch: "gfx1103", TotalMem: 2 * GiB}
	b, err := BudgetFor(d, root)
	if err != nil {
		t.Fatal(err)
	}
	// 32 GiB total, 24 GiB available, reserve 4 GiB: min(DefaultCap(32), 20).
	if b.Total != 32*GiB || b.Cap != 20*GiB || !strings.Contains(b.Source, "no amdgpu sysfs") {
		t.Fatalf("budget %v", b)
	}
	if _, err := BudgetFor(d, t.TempDir()); err == nil {
		t.Fatal("missing /proc/meminfo must be an error")
	}
}

func TestDiscreteIgnoresSysfs(t *testing.T) {
	d := DeviceInfo{Name: "Radeon RX 7900 XTX", Arch: "gfx1100", TotalMem: 24 * GiB, FreeMem: 23*GiB + 900*MiB}
	b, err := BudgetFor(d, "/nonexistent")
	if err != nil || b.Integrated || b.Cap != 20*GiB {
		t.Fatalf("discrete budget %v %v", b, err)
	}
}
