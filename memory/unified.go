package memory

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DeviceInfo is what the GPU runtime reports about a device.
type DeviceInfo struct {
	Name string // "AMD Radeon 8060S Graphics", "NVIDIA H100 80GB HBM3"
	Arch string // gcnArchName without features ("gfx1151") or "sm_90"
	// Integrated is hipDeviceProp_t.integrated (cudaDeviceProp.integrated).
	Integrated bool
	// PCIBusID is "0000:c3:00.0" when known; it picks the sysfs card.
	PCIBusID string
	// TotalMem and FreeMem are what hipMemGetInfo reports. On an APU this
	// is the BIOS carve-out, not what the device can use.
	TotalMem, FreeMem int64
}

// apuArchs are AMD integrated GPUs, recognised even when the runtime does
// not set the integrated property.
var apuArchs = map[string]bool{
	"gfx90c": true, "gfx1013": true, "gfx1033": true, "gfx1035": true, "gfx1036": true, "gfx1037": true,
	"gfx1103": true, "gfx1150": true, "gfx1151": true, "gfx1152": true, "gfx1153": true,
}

// IsIntegrated reports whether the device shares system memory.
func (d DeviceInfo) IsIntegrated() bool {
	arch, _, _ := strings.Cut(d.Arch, ":") // "gfx1151:xnack-" → "gfx1151"
	return d.Integrated || apuArchs[arch]
}

// SysMem is system memory and, for an amdgpu device, its sysfs counters.
type SysMem struct {
	MemTotal, MemAvailable int64 // /proc/meminfo
	// Card is the sysfs DRM card the counters come from ("card1"), empty
	// when none was found; the counters are then -1.
	Card                string
	VRAMTotal, VRAMUsed int64 // mem_info_vram_total / _used
	GTTTotal, GTTUsed   int64 // mem_info_gtt_total / _used
}

// ReadSysMem reads /proc/meminfo and the amdgpu counters under root ("/" on
// a real system; a fake tree in tests). The card is the amdgpu card whose
// PCI address is pciBusID or, without one, whose VRAM is nearest to
// carveOut (the total the runtime reports). Missing sysfs counters are not
// an error; a missing /proc/meminfo is.
func ReadSysMem(root, pciBusID string, carveOut int64) (SysMem, error) {
	s := SysMem{VRAMTotal: -1, VRAMUsed: -1, GTTTotal: -1, GTTUsed: -1}
	mi, err := readMeminfo(filepath.Join(root, "proc", "meminfo"))
	if err != nil {
		return s, err
	}
	s.MemTotal, s.MemAvailable = mi["MemTotal"], mi["MemAvailable"]
	if s.MemTotal <= 0 {
		return s, fmt.Errorf("%s: no MemTotal", filepath.Join(root, "proc", "meminfo"))
	}
	if _, ok := mi["MemAvailable"]; !ok { // kernels before 3.14
		s.MemAvailable = mi["MemFree"] + mi["Buffers"] + mi["Cached"]
	}

	type card struct {
		name, dir, slot string
		vram            int64
	}
	var cards []card
	dirs, _ := filepath.Glob(filepath.Join(root, "sys", "class", "drm", "card*"))
	for _, d := range dirs {
		name := filepath.Base(d)
		if strings.Contains(name, "-") { // connectors: card1-DP-1
			continue
		}
		dev := filepath.Join(d, "device")
		ue, err := os.ReadFile(filepath.Join(dev, "uevent"))
		if err != nil || !strings.Contains(string(ue), "DRIVER=amdgpu") {
			continue
		}
		vram, err := readCounter(filepath.Join(dev, "mem_info_vram_total"))
		if err != nil {
			continue
		}
		c := card{name: name, dir: dev, vram: vram}
		for _, line := range strings.Split(string(ue), "\n") {
			if v, ok := strings.CutPrefix(line, "PCI_SLOT_NAME="); ok {
				c.slot = strings.TrimSpace(v)
			}
		}
		cards = append(cards, c)
	}
	if len(cards) == 0 {
		return s, nil
	}
	pick := -1
	if pciBusID != "" {
		for i, c := range cards {
			if strings.EqualFold(c.slot, pciBusID) {
				pick = i
			}
		}
		if pick < 0 {
			return s, nil // the device is not an amdgpu card we can see
		}
	} else {
		sort.Slice(cards, func(i, j int) bool { return abs64(cards[i].vram-carveOut) < abs64(cards[j].vram-carveOut) })
		pick = 0
	}
	c := cards[pick]
	s.Card = c.name
	s.VRAMTotal = c.vram
	read := func(name string) int64 {
		v, err := readCounter(filepath.Join(c.dir, name))
		if err != nil {
			return -1
		}
		return v
	}
	s.VRAMUsed = read("mem_info_vram_used")
	s.GTTTotal = read("mem_info_gtt_total")
	s.GTTUsed = read("mem_info_gtt_used")
	return s, nil
}

// hostReserve is the system memory an integrated device's budget leaves to
// the OS and to the engine's host side: max(4 GiB, an eighth of memory).
func hostReserve(memTotal int64) int64 { return max(4*GiB, memTotal/8) }

// UnifiedBudget is the budget of an integrated GPU, drawn from system
// memory rather than the carve-out the runtime reports:
//
//   - Total is the carve-out plus GTT (GTT at most MemTotal) when the amdgpu
//     counters are there, else MemTotal;
//   - what can be had now is the free carve-out plus the free GTT, the GTT
//     part at most MemAvailable less a host reserve (max(4 GiB, MemTotal/8)),
//     since GTT pages are system memory the OS and our host side need too;
//     without counters, MemAvailable less the reserve;
//   - Cap is DefaultCap(Total), lowered to what can be had now.
func UnifiedBudget(d DeviceInfo, s SysMem) Budget {
	reserve := hostReserve(s.MemTotal)
	hostFree := max(0, s.MemAvailable-reserve)
	var total, avail int64
	var src string
	if s.Card != "" && s.VRAMTotal >= 0 && s.GTTTotal >= 0 {
		gtt := min(s.GTTTotal, s.MemTotal)
		total = s.VRAMTotal + gtt
		gttFree := gtt
		if s.GTTUsed >= 0 {
			gttFree = max(0, gtt-s.GTTUsed)
		}
		vramFree := s.VRAMTotal
		if s.VRAMUsed >= 0 {
			vramFree = max(0, s.VRAMTotal-s.VRAMUsed)
		}
		avail = vramFree + min(gttFree, hostFree)
		src = fmt.Sprintf("amdgpu sysfs %s: carve-out %s + GTT %s; system memory %s, %s available",
			s.Card, FormatBytes(s.VRAMTotal), FormatBytes(gtt), FormatBytes(s.MemTotal), FormatBytes(s.MemAvailable))
	} else {
		total = s.MemTotal
		avail = hostFree
		src = fmt.Sprintf("system memory %s, %s available (no amdgpu sysfs counters)", FormatBytes(s.MemTotal), FormatBytes(s.MemAvailable))
	}
	cp := min(DefaultCap(total), avail)
	return Budget{
		Device:     deviceLabel(d),
		Total:      total,
		Cap:        cp,
		Preserve:   min(DefaultPreserve, cp/2),
		Integrated: true,
		Source:     src,
	}
}

// BudgetFor is the default budget of a device: NewBudget from the runtime's
// figures for a discrete GPU, UnifiedBudget from system memory (read under
// root, "/" normally) for an integrated one.
func BudgetFor(d DeviceInfo, root string) (Budget, error) {
	if !d.IsIntegrated() {
		return NewBudget(deviceLabel(d), d.TotalMem, d.FreeMem), nil
	}
	s, err := ReadSysMem(root, d.PCIBusID, d.TotalMem)
	if err != nil {
		return Budget{}, fmt.Errorf("budget of integrated GPU %s: %w", deviceLabel(d), err)
	}
	return UnifiedBudget(d, s), nil
}

func deviceLabel(d DeviceInfo) string {
	switch {
	case d.Name != "" && d.Arch != "":
		return d.Name + " (" + d.Arch + ")"
	case d.Name != "":
		return d.Name
	}
	return d.Arch
}

// readMeminfo reads a /proc file of "Key: value [kB]" lines (meminfo,
// self/status) into values by key, kB made bytes.
func readMeminfo(path string) (map[string]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && strings.EqualFold(fields[1], "kB") {
			v *= KiB
		}
		out[key] = v
	}
	return out, sc.Err()
}

func readCounter(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
