package memory

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Byte units. framepack's sizes are binary, as nvidia-smi, rocm-smi and
// FramePack's "GB" are: 1G = 1 GiB = 1024³ bytes.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// FormatBytes writes n in the largest binary unit that keeps it ≥ 1, one
// decimal: "0 B", "512 B", "3.1 GiB".
func FormatBytes(n int64) string {
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	switch {
	case n >= TiB:
		return fmt.Sprintf("%s%.1f TiB", neg, float64(n)/float64(TiB))
	case n >= GiB:
		return fmt.Sprintf("%s%.1f GiB", neg, float64(n)/float64(GiB))
	case n >= MiB:
		return fmt.Sprintf("%s%.1f MiB", neg, float64(n)/float64(MiB))
	case n >= KiB:
		return fmt.Sprintf("%s%.1f KiB", neg, float64(n)/float64(KiB))
	}
	return fmt.Sprintf("%s%d B", neg, n)
}

// ParseSize reads a memory size as the --vram-limit and --preserve flags
// take it:
//
//   - a number with a binary unit: "20G", "20GB", "20GiB", "20000M",
//     "1.5g", "512MiB", "4096K", "1T", "123456789B" (G, GB and GiB all mean
//     1024³ bytes);
//   - a fraction of total: "0.8" or "80%".
//
// Zero is 0 bytes however it is written ("0", "0%", "0G"), so every
// spelling of it means the same: fine for --preserve, and refused for
// --vram-limit by the budget's check that the cap is above 0. A bare
// number above 1 is refused (it is most likely a size missing its unit),
// as are negative, empty and unknown-unit values.
func ParseSize(s string, total int64) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty memory size")
	}
	if strings.HasSuffix(s, "%") {
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return 0, fmt.Errorf("memory size %q: a percentage must be in [0, 100]", in)
		}
		if v == 0 {
			return 0, nil
		}
		return fraction(in, v/100, total)
	}
	// Split the number from its unit.
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("memory size %q: want a number and a unit such as 20G, 20000M, or a fraction such as 0.8", in)
	}
	if v < 0 {
		return 0, fmt.Errorf("memory size %q is negative", in)
	}
	var mult int64
	switch unit {
	case "":
		if v == 0 {
			return 0, nil
		}
		if v > 1 {
			return 0, fmt.Errorf("memory size %q has no unit: write %sG for gibibytes, %sM for mebibytes, or a fraction such as 0.8", in, num, num)
		}
		return fraction(in, v, total)
	case "b":
		mult = 1
	case "k", "kb", "kib":
		mult = KiB
	case "m", "mb", "mib":
		mult = MiB
	case "g", "gb", "gib":
		mult = GiB
	case "t", "tb", "tib":
		mult = TiB
	default:
		return 0, fmt.Errorf("memory size %q: unknown unit %q (want B, K, M, G or T)", in, s[i:])
	}
	b := v * float64(mult)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("memory size %q is too large", in)
	}
	return int64(math.Round(b)), nil
}

func fraction(in string, f float64, total int64) (int64, error) {
	if f <= 0 {
		return 0, fmt.Errorf("memory size %q: a fraction must be above 0", in)
	}
	if total <= 0 {
		return 0, fmt.Errorf("memory size %q is a fraction, but the device's total memory is unknown", in)
	}
	return int64(f * float64(total)), nil
}
