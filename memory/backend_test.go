package memory

import (
	"errors"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/testutil/memtest"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tensor/backendtest"
)

func testBudget(cp int64) Budget {
	return Budget{Device: "sim", Total: 24 * GiB, Cap: cp, Preserve: cp / 4}
}

func TestBudgetedRefusesAboveCap(t *testing.T) {
	dev := memtest.NewDevice("sim", 24*GiB)
	mb := Budgeted(dev, testBudget(20*GiB))

	a, err := mb.Alloc(12 * GiB)
	if err != nil {
		t.Fatal(err)
	}
	before := dev.Allocs()
	_, err = mb.Alloc(9 * GiB) // fits on the device, not under the cap
	var oom *OOMError
	if !errors.As(err, &oom) || !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("want an OOMError wrapping ErrOutOfMemory, got %v", err)
	}
	for _, s := range []string{"9.0 GiB", "12.0 GiB in use", "20.0 GiB cap", "sim"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if dev.Allocs() != before {
		t.Fatal("the inner backend saw a refused allocation")
	}
	b, err := mb.Alloc(8 * GiB) // exactly up to the cap
	if err != nil {
		t.Fatal(err)
	}
	mb.Free(a)
	mb.Free(b)
	s := mb.Stats()
	if s.InUse != 0 || s.Peak != 20*GiB || s.Refused != 1 || s.Allocs != 2 || dev.Used() != 0 {
		t.Fatalf("stats after freeing: %+v, device used %d", s, dev.Used())
	}
	if _, err := mb.Alloc(-1); err == nil {
		t.Fatal("a negative allocation must fail")
	}
}

func TestBudgetedInnerFailureUndone(t *testing.T) {
	dev := memtest.NewDevice("sim", 4*GiB) // smaller than the cap
	mb := Budgeted(dev, testBudget(20*GiB))
	if _, err := mb.Alloc(5 * GiB); !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("device OOM: %v", err)
	}
	if mb.Stats().InUse != 0 {
		t.Fatal("a failed inner allocation stayed counted")
	}
}

func TestOwnersAndString(t *testing.T) {
	dev := memtest.NewDevice("sim", 24*GiB)
	mb := Budgeted(dev, testBudget(20*GiB))
	mb.AddOwner("transformer")
	w, _ := tensor.Alloc(mb, tensor.BF16, 1024, 1024, 600) // 1.2 GiB
	act, _ := tensor.Alloc(mb, tensor.F32, 1024, 1024, 512)
	mb.Charge("vae", w)
	want := "device sim: cap 20.0 GiB, in use 3.2 GiB, peak 3.2 GiB; transformer 0 B, vae 1.2 GiB"
	if got := mb.String(); got != want {
		t.Fatalf("String() = %q\nwant       %q", got, want)
	}
	mb.Charge("transformer", w) // moves
	if mb.Held("vae") != 0 || mb.Held("transformer") != w.Bytes() {
		t.Fatal("Charge did not move the storage between owners")
	}
	tensor.Release(w)
	tensor.Release(act)
	if mb.Held("transformer") != 0 || mb.Stats().InUse != 0 {
		t.Fatalf("after release: %v", mb)
	}
	mb.ResetPeak()
	if mb.Stats().Peak != 0 {
		t.Fatal("ResetPeak")
	}
	if err := mb.Trim(); err != nil || dev.Trims() != 1 {
		t.Fatal("Trim is not forwarded to the inner backend")
	}
}

// ChargeSince charges what was allocated after the mark and charged to
// nobody, leaving earlier and already charged storage alone.
func TestChargeSince(t *testing.T) {
	mb := Budgeted(memtest.NewDevice("sim", GiB), testBudget(GiB))
	before, _ := tensor.Alloc(mb, tensor.F32, 256)
	mark := mb.Mark()
	w1, _ := tensor.Alloc(mb, tensor.F32, 1024)
	w2, _ := tensor.Alloc(mb, tensor.F16, 1024)
	other, _ := tensor.Alloc(mb, tensor.F32, 64)
	mb.Charge("vae", other)
	mb.ChargeSince("text_encoder", mark)
	if got := mb.Held("text_encoder"); got != w1.Bytes()+w2.Bytes() {
		t.Fatalf("text_encoder holds %d bytes, want %d", got, w1.Bytes()+w2.Bytes())
	}
	if mb.Held("vae") != other.Bytes() {
		t.Fatal("ChargeSince took storage already charged to another owner")
	}
	tensor.Release(w1)
	tensor.Release(w2)
	if mb.Held("text_encoder") != 0 {
		t.Fatalf("after release: %v", mb)
	}
	tensor.Release(before)
	tensor.Release(other)
}

// A budgeted CPU backend runs ops through a Scope like the CPU backend.
func TestBudgetedCPUScope(t *testing.T) {
	mb := Budgeted(cpu.New(), Budget{Device: "cpu", Cap: 1 * MiB, Preserve: 0})
	s := tensor.NewScope(mb)
	x := s.Full(tensor.F32, 2, 64, 64) // 16 KiB
	y := s.Add(x, s.To(tensor.FromFloat32([]float32{1}, 1, 1)))
	if v := tensor.Float32s(y)[0]; v != 3 {
		t.Fatalf("2+1 = %v", v)
	}
	err := tensor.Catch(func() { s.Empty(tensor.F32, 512, 1024) }) // 2 MiB
	if !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("2 MiB under a 1 MiB cap: %v", err)
	}
	s.Close()
	if mb.Stats().InUse != 0 {
		t.Fatalf("scope closed, %s still in use", FormatBytes(mb.Stats().InUse))
	}
}

func TestFailNth(t *testing.T) {
	f := FailNth(memtest.NewDevice("sim", GiB), 3)
	for i := 1; i <= 5; i++ {
		_, err := f.Alloc(10)
		if (i == 3) != (err != nil) {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if i == 3 && (!errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "alloc.nth=3")) {
			t.Fatalf("injected failure: %v", err)
		}
	}
	if f.Allocs() != 5 {
		t.Fatalf("Allocs = %d", f.Allocs())
	}
}

// Room never goes negative: a cap that the weights already fill is an
// out-of-memory error naming what holds it.
func TestRoom(t *testing.T) {
	mb := Budgeted(cpu.New(), Budget{Device: "cpu", Cap: 8 * MiB})
	w, err := tensor.Alloc(mb, tensor.F32, 1<<20) // 4 MiB of "weights"
	if err != nil {
		t.Fatal(err)
	}
	defer tensor.Release(w)
	if room, err := mb.Room(1 * MiB); err != nil || room != 3*MiB {
		t.Fatalf("Room(1 MiB) under 8 MiB with 4 MiB in use = %s, %v; want 3.0 MiB", FormatBytes(room), err)
	}
	room, err := mb.Room(576 * MiB)
	if room != 0 || !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "4.0 MiB in use, 576.0 MiB set aside") {
		t.Fatalf("Room(576 MiB) under an 8 MiB cap = %s, %v", FormatBytes(room), err)
	}
}

// TestBudgetedOps runs the op suite through a budget: every kernel is the
// inner backend's, on buffers the budget counted.
func TestBudgetedOps(t *testing.T) {
	mb := Budgeted(cpu.New(), Budget{Device: "test", Cap: 1 << 40})
	backendtest.Run(t, mb)
	if st := mb.Stats(); st.Allocs == 0 {
		t.Error("the suite allocated nothing through the budget")
	}
}
