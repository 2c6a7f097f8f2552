package memory

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	total := 24 * GiB
	good := []struct {
		in   string
		want int64
	}{
		{"20G", 20 * GiB},
		{"20GB", 20 * GiB},
		{"20GiB", 20 * GiB},
		{"20 gb", 20 * GiB},
		{"20000M", 20000 * MiB},
		{"20000MB", 20000 * MiB},
		{"1.5G", 3 * GiB / 2},
		{"512MiB", 512 * MiB},
		{"4096K", 4 * MiB},
		{"1T", TiB},
		{"123B", 123},
		{"0.8", int64(0.8 * float64(total))},
		{"1", total},
		{"80%", int64(0.8 * float64(total))},
		{" 6G ", 6 * GiB},
		// Zero is 0 bytes in every spelling.
		{"0", 0},
		{"0.0", 0},
		{"0%", 0},
		{"0G", 0},
		{"0B", 0},
	}
	for _, c := range good {
		z, err := ParseSize(c.in)
		got := int64(-1)
		if err == nil {
			got, err = z.Of(total)
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"20", "no unit"},
		{"-5G", "negative"},
		{"20X", "unknown unit"},
		{"G", "want a number"},
		{"abc", "want a number"},
		{"-0.5", "negative"},
		{"-1%", "percentage"},
		{"150%", "percentage"},
		{"1.2.3G", "want a number"},
	}
	for _, c := range bad {
		_, err := ParseSize(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseSize(%q) error = %v; want one mentioning %q", c.in, err, c.msg)
		}
	}
	// --vram-limit 0 in any spelling: the budget refuses a zero cap; a
	// zero --preserve is accepted in any spelling.
	for _, s := range []string{"0", "0G", "0%"} {
		zero := size(t, s)
		if _, err := (Budget{Total: total, Cap: total}).With(zero, Size{}); err == nil || !strings.Contains(err.Error(), "needs at least") {
			t.Errorf("--vram-limit %s: %v, want the cap refused", zero, err)
		}
		if err := CheckCap(zero); err == nil || !strings.Contains(err.Error(), s+" (0 B) is below the 64.0 MiB") {
			t.Errorf("CheckCap(%s) = %v, want the cap refused before any device is read", zero, err)
		}
		if err := CheckHostLimit(zero); err == nil || !strings.Contains(err.Error(), "must be above 0") {
			t.Errorf("CheckHostLimit(%s) = %v, want it refused", zero, err)
		}
		if b, err := (Budget{Total: total, Cap: total}).With(Size{}, zero); err != nil || b.Preserve != 0 {
			t.Errorf("--preserve %s: %v, %v; want 0 B preserved", zero, b, err)
		}
	}
	if _, err := size(t, "0.5").Of(0); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Errorf("a fraction of an unknown total: %v", err)
	}
}

// size parses s, failing the test on an error.
func size(t *testing.T, s string) Size {
	t.Helper()
	if s == "" {
		return Size{}
	}
	z, err := ParseSize(s)
	if err != nil {
		t.Fatalf("ParseSize(%q): %v", s, err)
	}
	return z
}

// TestSizeValue: a Size keeps its text, tells a size in bytes from a
// fraction, and reads as a flag and as text.
func TestSizeValue(t *testing.T) {
	for _, c := range []struct {
		z     Size
		text  string
		bytes int64
		fixed bool
	}{
		{Bytes(20 * GiB), "20G", 20 * GiB, true},
		{Bytes(3*GiB + GiB/2), "3584M", 3*GiB + GiB/2, true},
		{Bytes(1000), "1000B", 1000, true},
		{Bytes(0), "0B", 0, true},
		{Fraction(0.9), "0.9", 0, false},
		{size(t, " 80% "), "80%", 0, false},
		{size(t, "1.5G"), "1.5G", 3 * GiB / 2, true},
		{Size{}, "", 0, false},
	} {
		n, ok := c.z.Fixed()
		if c.z.String() != c.text || n != c.bytes || ok != c.fixed || c.z.IsSet() != (c.text != "") {
			t.Errorf("%q: String %q, Fixed %d %v, IsSet %v; want %q, %d %v", c.text, c.z, n, ok, c.z.IsSet(), c.text, c.bytes, c.fixed)
		}
	}
	if n, err := Fraction(0.5).Of(24 * GiB); err != nil || n != 12*GiB {
		t.Errorf("Fraction(0.5).Of(24G) = %d, %v", n, err)
	}
	var z Size
	if err := z.Set("6G"); err != nil || z.String() != "6G" || z.Type() != "size" {
		t.Errorf("Set(6G): %v %q", err, z)
	}
	if err := z.Set("lots"); err == nil || z.String() != "6G" {
		t.Errorf("Set(lots): %v, the size became %q", err, z)
	}
	if err := z.Set(""); err != nil || z.IsSet() {
		t.Errorf("Set(\"\"): %v, still set to %q", err, z)
	}
	b, err := json.Marshal(struct{ P Size }{size(t, "50%")})
	if err != nil || string(b) != `{"P":"50%"}` {
		t.Errorf("JSON: %s %v", b, err)
	}
	var back struct{ P Size }
	if err := json.Unmarshal(b, &back); err != nil || back.P != size(t, "50%") {
		t.Errorf("JSON back: %v %v", back.P, err)
	}
	for _, c := range []struct {
		a, b Size
		same bool
	}{
		{size(t, "6G"), size(t, "6GiB"), true},
		{size(t, "6G"), Bytes(6 * GiB), true},
		{size(t, "0.5"), size(t, "50%"), true},
		{Size{}, Size{}, true},
		{size(t, "6G"), size(t, "6.5G"), false},
		{size(t, "0.5"), size(t, "0.6"), false},
		{Bytes(0), Size{}, false},
	} {
		if c.a.Same(c.b) != c.same || c.b.Same(c.a) != c.same {
			t.Errorf("%q.Same(%q) = %v, want %v", c.a, c.b, c.a.Same(c.b), c.same)
		}
	}
}

func TestDefaultCap(t *testing.T) {
	cases := []struct{ total, want int64 }{
		{24 * GiB, 20 * GiB},
		{16 * GiB, 16*GiB - 16*GiB/6},
		{80 * GiB, 80*GiB - 80*GiB/6},
		{8 * GiB, 6 * GiB},
		{3 * GiB, 3 * GiB / 2}, // the reserve is at most half
		{0, 0},
	}
	for _, c := range cases {
		if got := DefaultCap(c.total); got != c.want {
			t.Errorf("DefaultCap(%s) = %s, want %s", FormatBytes(c.total), FormatBytes(got), FormatBytes(c.want))
		}
	}
}

func TestNewBudget(t *testing.T) {
	b := NewBudget("gfx1100", 24*GiB, 0)
	if b.Cap != 20*GiB || b.Preserve != 6*GiB {
		t.Fatalf("24 GiB card: %v", b)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	// Another process holds 10 GiB: the cap follows what is free.
	b = NewBudget("gfx1100", 24*GiB, 14*GiB)
	if b.Cap != 14*GiB-512*MiB {
		t.Fatalf("cap with 14 GiB free: %s", FormatBytes(b.Cap))
	}
	// A small card keeps preserve under half the cap.
	b = NewBudget("small", 4*GiB, 0)
	if b.Cap != 2*GiB || b.Preserve != GiB {
		t.Fatalf("4 GiB card: %v", b)
	}
}

func TestBudgetWith(t *testing.T) {
	base := NewBudget("gfx1100", 24*GiB, 0)
	b, err := base.With(size(t, "18G"), Size{})
	if err != nil || b.Cap != 18*GiB || b.Preserve != 6*GiB {
		t.Fatalf("--vram-limit 18G: %v %v", b, err)
	}
	b, err = base.With(size(t, "0.5"), size(t, "2G"))
	if err != nil || b.Cap != 12*GiB || b.Preserve != 2*GiB {
		t.Fatalf("--vram-limit 0.5 --preserve 2G: %v %v", b, err)
	}
	b, err = base.With(size(t, "4G"), Size{})
	if err != nil || b.Preserve != 2*GiB {
		t.Fatalf("--vram-limit 4G lowers the default preserve to half: %v %v", b, err)
	}
	for _, c := range []struct{ limit, preserve, msg string }{
		{"30G", "", "more than the 24.0 GiB"},
		{"", "25G", "must be below the 20.0 GiB cap"},
		{"8G", "8G", "must be below the 8.0 GiB cap"},
		{"8M", "", "--vram-limit 8M (8.0 MiB) is below the 64.0 MiB the engine needs"},
		{"0.001", "", "--vram-limit 0.001 (24.6 MiB) is below the 64.0 MiB the engine needs"},
		{"", "0.9", "must be below the 20.0 GiB cap"},
	} {
		_, err := base.With(size(t, c.limit), size(t, c.preserve))
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("With(%q, %q) = %v; want an error with %q", c.limit, c.preserve, err, c.msg)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 512: "512 B", 3 * GiB / 2: "1.5 GiB", 20 * GiB: "20.0 GiB", 5 * MiB: "5.0 MiB", -2 * KiB: "-2.0 KiB"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
