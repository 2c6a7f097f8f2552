package memory

import (
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/memtest"
)

func TestHostBudgetFromMeminfo(t *testing.T) {
	// 64 GiB machine, 50 GiB available: the margin is max(2, 64/8) = 8 GiB.
	root := fakeSys(t, 64*GiB, 50*GiB, 0, 0)
	h, err := HostFor(root, Size{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Limit() != 42*GiB {
		t.Fatalf("default limit %s, want 42.0 GiB", FormatBytes(h.Limit()))
	}
	for flag, want := range map[string]int64{"16G": 16 * GiB, "50%": 32 * GiB, "0.25": 16 * GiB, "20000M": 20000 * MiB} {
		h, err := HostFor(root, size(t, flag))
		if err != nil || h.Limit() != want {
			t.Errorf("--ram-limit %s: %v, %v; want %s", flag, h, err, FormatBytes(want))
		}
	}
	for _, bad := range []string{"100G", "0", "0%"} {
		if _, err := HostFor(root, size(t, bad)); err == nil || !strings.Contains(err.Error(), "--ram-limit") {
			t.Errorf("--ram-limit %s: error %v, want one naming the flag", bad, err)
		}
	}
	// Little available: never below a quarter of it.
	if got := DefaultRAMLimit(16*GiB, 2*GiB); got != GiB/2 {
		t.Errorf("DefaultRAMLimit(16G, 2G) = %s", FormatBytes(got))
	}
	// No /proc/meminfo: unlimited unless a size is given.
	h, err = HostFor(t.TempDir(), Size{})
	if err != nil || h.Limit() != 0 || h.Available() < TiB {
		t.Errorf("no meminfo: %v %v", h, err)
	}
}

// A model moving between placements is charged what it holds now, once.
func TestHostModelCountedOnce(t *testing.T) {
	h := NewHost(16*GiB, 32*GiB, "test")
	h.Set("text_encoder", 15*GiB, "heap")
	h.Set("text_encoder", 15*GiB, "heap") // charged again: replaces
	if h.InUse() != 15*GiB || h.Available() != GiB {
		t.Fatalf("in use %s, available %s", FormatBytes(h.InUse()), FormatBytes(h.Available()))
	}
	h.Set("text_encoder", 0, "")
	h.Set("transformer", 12*GiB, "pinned")
	if h.InUse() != 12*GiB || h.Held("text_encoder") != 0 {
		t.Fatalf("in use %s after the text encoder left", FormatBytes(h.InUse()))
	}
	s := h.Stats()
	if s.Peak != 15*GiB {
		t.Errorf("peak %s, want 15.0 GiB (the two were never held together)", FormatBytes(s.Peak))
	}
	line := s.String()
	for _, w := range []string{"limit 16.0 GiB", "transformer 12.0 GiB pinned", "text_encoder 0 B"} {
		if !strings.Contains(line, w) {
			t.Errorf("report %q lacks %q", line, w)
		}
	}
	t.Log(line)
}

// The plan streams from pinned memory when the weights fit the host budget,
// from the mapped file otherwise.
func TestPlanStreamByRAMLimit(t *testing.T) {
	const streamed = 24 * GiB // the transformer under a 6 GiB device cap
	for _, c := range []struct {
		limit int64
		other int64 // what another model holds
		want  StreamSource
	}{
		{0, 0, StreamPinned},               // unlimited
		{64 * GiB, 0, StreamPinned},        // plenty
		{26 * GiB, 0, StreamPinned},        // 24 + 2 reserve: just fits
		{26*GiB - 1, 0, StreamMapped},      // one byte short
		{16 * GiB, 0, StreamMapped},        // --ram-limit 16G
		{40 * GiB, 15 * GiB, StreamMapped}, // the text encoder still held
		{48 * GiB, 15 * GiB, StreamPinned}, // room for both
	} {
		h := NewHost(c.limit, 128*GiB, "test")
		h.Set("text_encoder", c.other, "heap")
		got, why := h.PlanStream("transformer", streamed)
		if got != c.want {
			t.Errorf("limit %s, other %s: %v (%s), want %v", FormatBytes(c.limit), FormatBytes(c.other), got, why, c.want)
		}
	}
	// What the model holds now is replaced by the new placement.
	h := NewHost(30*GiB, 128*GiB, "test")
	h.Set("transformer", 24*GiB, "pinned")
	if got, why := h.PlanStream("transformer", streamed); got != StreamPinned {
		t.Errorf("reload of a pinned transformer: %v (%s)", got, why)
	}
}

// On an APU the device's memory is system memory: the device budget and
// the host budget are one pool, and a byte on the device is a byte less
// for the host.
func TestUnifiedOnePool(t *testing.T) {
	root, d := strixHalo(t, "0000:c3:00.0")
	b, err := BudgetFor(d, root)
	if err != nil {
		t.Fatal(err)
	}
	h, err := HostFor(root, size(t, "48G"))
	if err != nil {
		t.Fatal(err)
	}
	mb := Budgeted(memtest.NewDevice("apu", b.Total), b)
	h.Unify(mb)
	if !h.Unified() || mb.Budget().Cap != 48*GiB {
		t.Fatalf("unified: %v, device cap %s, want the 48 GiB pool", h.Unified(), FormatBytes(mb.Budget().Cap))
	}
	buf, err := mb.Alloc(20 * GiB) // the transformer resident on the APU
	if err != nil {
		t.Fatal(err)
	}
	h.Set("text_encoder", 10*GiB, "heap")
	if h.InUse() != 30*GiB || h.Available() != 18*GiB {
		t.Fatalf("one pool: in use %s, available %s; want 30 and 18 GiB", FormatBytes(h.InUse()), FormatBytes(h.Available()))
	}
	// Streaming 24 GiB pinned does not fit beside the device's 20: the plan
	// sees the device's bytes.
	if got, _ := h.PlanStream("transformer", 24*GiB); got != StreamMapped {
		t.Errorf("plan with 20 GiB on the device: %v", got)
	}
	mb.Free(buf)
	if h.InUse() != 10*GiB {
		t.Errorf("after the device freed: in use %s", FormatBytes(h.InUse()))
	}
	line := h.Stats().String()
	if !strings.Contains(line, "one pool") {
		t.Errorf("report %q does not say one pool", line)
	}
	t.Log(line)
}
