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

// Size is a memory size as a flag or an option gives it: a number of bytes,
// or a fraction of a total that is known only once the device (or the
// machine) is read. The zero Size is unset: the default applies. Sizes are
// parsed once, where a flag is read (Size is a pflag.Value: Set, String,
// Type), and resolved against the total by Of; text and JSON carry a Size
// as it was written.
type Size struct {
	text  string  // as written; "" when unset
	bytes int64   // a size in bytes (frac == 0)
	frac  float64 // a fraction of the total, in (0, 1]
}

// Bytes is a size of n bytes (n ≥ 0).
func Bytes(n int64) Size {
	text := fmt.Sprintf("%dB", n)
	for _, u := range []struct {
		n    int64
		unit string
	}{{TiB, "T"}, {GiB, "G"}, {MiB, "M"}, {KiB, "K"}} {
		if n > 0 && n%u.n == 0 {
			text = fmt.Sprintf("%d%s", n/u.n, u.unit)
			break
		}
	}
	return Size{text: text, bytes: max(n, 0)}
}

// Fraction is the fraction f of the total, in (0, 1]; the total is known
// when the size is resolved (Of).
func Fraction(f float64) Size {
	return Size{text: strconv.FormatFloat(f, 'g', -1, 64), frac: f}
}

// ParseSize reads a memory size as the --vram-limit, --preserve and
// --ram-limit flags take it:
//
//   - a number with a binary unit: "20G", "20GB", "20GiB", "20000M",
//     "1.5g", "512MiB", "4096K", "1T", "123456789B" (G, GB and GiB all mean
//     1024³ bytes);
//   - a fraction of the total: "0.8" or "80%".
//
// Zero is 0 bytes however it is written ("0", "0%", "0G"), so every
// spelling of it means the same: fine for --preserve, and refused for
// --vram-limit by the budget's check that the cap is above 0. A bare
// number above 1 is refused (it is most likely a size missing its unit),
// as are negative, empty and unknown-unit values.
func ParseSize(s string) (Size, error) {
	in := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Size{}, fmt.Errorf("empty memory size")
	}
	if strings.HasSuffix(s, "%") {
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(s, "%")), 64)
		if err != nil || math.IsNaN(v) || v < 0 || v > 100 {
			return Size{}, fmt.Errorf("memory size %q: a percentage must be in [0, 100]", in)
		}
		return Size{text: s, frac: v / 100}, nil
	}
	// Split the number from its unit.
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') && s[i-1] != '.' {
		i--
	}
	num, unit := strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Size{}, fmt.Errorf("memory size %q: want a number and a unit such as 20G, 20000M, or a fraction such as 0.8", in)
	}
	if v < 0 {
		return Size{}, fmt.Errorf("memory size %q is negative", in)
	}
	var mult int64
	switch unit {
	case "":
		if v > 1 {
			return Size{}, fmt.Errorf("memory size %q has no unit: write %sG for gibibytes, %sM for mebibytes, or a fraction such as 0.8", in, num, num)
		}
		return Size{text: s, frac: v}, nil
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
		return Size{}, fmt.Errorf("memory size %q: unknown unit %q (want B, K, M, G or T)", in, s[i:])
	}
	b := v * float64(mult)
	if b > math.MaxInt64/2 {
		return Size{}, fmt.Errorf("memory size %q is too large", in)
	}
	return Size{text: s, bytes: int64(math.Round(b))}, nil
}

// IsSet reports whether the size was given.
func (z Size) IsSet() bool { return z.text != "" }

// Fixed is the size in bytes when it does not depend on the total (ok
// false for a fraction above 0, or an unset size). Zero is fixed in every
// spelling.
func (z Size) Fixed() (n int64, ok bool) {
	return z.bytes, z.IsSet() && z.frac == 0
}

// Same reports whether z and o mean the same size however each was
// written ("6G" and "6GiB", "0.5" and "50%"); two unset sizes are the same.
func (z Size) Same(o Size) bool {
	return z.IsSet() == o.IsSet() && z.bytes == o.bytes && z.frac == o.frac
}

// Of is the size in bytes against a total of total bytes (≤ 0: unknown,
// which a fraction cannot be resolved against). An unset size is 0.
func (z Size) Of(total int64) (int64, error) {
	if z.frac == 0 {
		return z.bytes, nil
	}
	if total <= 0 {
		return 0, fmt.Errorf("memory size %q is a fraction, but the device's total memory is unknown", z.text)
	}
	return int64(z.frac * float64(total)), nil
}

// String is the size as it was written ("" when unset).
func (z Size) String() string { return z.text }

// Set parses s into z, as a flag is read; "" unsets z (the default).
func (z *Size) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		*z = Size{}
		return nil
	}
	v, err := ParseSize(s)
	if err != nil {
		return err
	}
	*z = v
	return nil
}

// Type names the flag's value in a command's help.
func (z *Size) Type() string { return "size" }

// MarshalText writes the size as it was written.
func (z Size) MarshalText() ([]byte, error) { return []byte(z.text), nil }

// UnmarshalText reads a size as Set does.
func (z *Size) UnmarshalText(b []byte) error { return z.Set(string(b)) }

// CheckCap refuses a --vram-limit in bytes below MinCap, whatever the
// device (a fraction is checked against the device's total when the budget
// is made: Budget.With).
func CheckCap(limit Size) error {
	if v, ok := limit.Fixed(); ok && v < MinCap {
		return capBelowMin(limit, v)
	}
	return nil
}

func capBelowMin(limit Size, v int64) error {
	return fmt.Errorf("%s (%s) is below the %s the engine needs at least", limit, FormatBytes(v), FormatBytes(MinCap))
}

// CheckHostLimit refuses a --ram-limit of 0 bytes, whatever the machine.
func CheckHostLimit(limit Size) error {
	if v, ok := limit.Fixed(); ok && v <= 0 {
		return fmt.Errorf("%s: the host budget must be above 0", limit)
	}
	return nil
}
