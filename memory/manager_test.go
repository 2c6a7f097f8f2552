package memory

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/memory/memtest"
	"github.com/framepack-go/framepack/tensor"
)

// newSim is a simulated device of devTotal with a budget of cp (preserve
// pres), a manager logging into the returned buffer.
func newSim(devTotal, cp, pres int64) (*memtest.Device, *Backend, *Manager, *bytes.Buffer) {
	dev := memtest.NewDevice("sim", devTotal)
	mb := Budgeted(dev, Budget{Device: "sim", Total: devTotal, Cap: cp, Preserve: pres})
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return dev, mb, NewManager(mb, log), &logBuf
}

// weightSet registers a model of groups of the given byte sizes.
func weightSet(t testing.TB, mb *Backend, owner string, sizes ...int64) *WeightSet {
	ws := NewWeightSet(mb, owner)
	for i, n := range sizes {
		if err := ws.Add(fmt.Sprintf("%s.%d", owner, i), "weight", memtest.HostTensor(tensor.U8, int(n))); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func TestWeightSetStreaming(t *testing.T) {
	_, mb, _, _ := newSim(8*GiB, 4*GiB, GiB)
	ws := weightSet(t, mb, "m", GiB, GiB, GiB, GiB)
	if ws.DeviceBytes() != 4*GiB || ws.State() != OnHost {
		t.Fatal("new set")
	}
	if _, err := ws.Acquire("m.0"); err == nil {
		t.Fatal("Acquire on the host must fail")
	}
	// Keep 2.5 GiB: two groups stay, two stream.
	if err := ws.Place(Streamed, 5*GiB/2); err != nil {
		t.Fatal(err)
	}
	if mb.Held("m") != 2*GiB {
		t.Fatalf("kept %s", FormatBytes(mb.Held("m")))
	}
	// 2 GiB in use, 1 GiB preserved: 1 GiB of room, so acquiring group 1
	// uploads group 2 ahead.
	g1, err := ws.Acquire("m.1")
	if err != nil {
		t.Fatal(err)
	}
	if mb.Held("m") != 3*GiB {
		t.Fatalf("prefetch: held %s", FormatBytes(mb.Held("m")))
	}
	g1.Release() // kept
	g2, _ := ws.Acquire("m.2")
	// No room beside the preserved amount for group 3 now.
	if mb.Held("m") != 3*GiB {
		t.Fatalf("no prefetch expected: held %s", FormatBytes(mb.Held("m")))
	}
	if g2.T("weight").Bytes() != GiB {
		t.Fatal("group tensor")
	}
	err = tensor.Catch(func() { g2.T("nope") })
	if err == nil || !strings.Contains(err.Error(), "group m.2 has no weight nope") {
		t.Fatalf("missing weight: %v", err)
	}
	g2.Release() // streamed: freed
	if mb.Held("m") != 2*GiB {
		t.Fatalf("after release: held %s", FormatBytes(mb.Held("m")))
	}
	g3, _ := ws.Acquire("m.3")
	if err := ws.Place(OnHost, 0); err == nil {
		t.Fatal("moving while a group is in use must fail")
	}
	g3.Release()
	if err := ws.Place(Resident, 0); err != nil || mb.Held("m") != 4*GiB {
		t.Fatalf("resident: %v, held %s", err, FormatBytes(mb.Held("m")))
	}
	// Streamed from resident frees the tail.
	if err := ws.Place(Streamed, GiB); err != nil || mb.Held("m") != GiB {
		t.Fatalf("streamed 1 GiB: %v, held %s", err, FormatBytes(mb.Held("m")))
	}
	if err := ws.Place(Unloaded, 0); err != nil || mb.Held("m") != 0 || mb.Stats().InUse != 0 {
		t.Fatalf("unloaded: %v, %v", err, mb)
	}
	if err := ws.Place(Resident, 0); err == nil || !strings.Contains(err.Error(), "unloaded") {
		t.Fatalf("placing an unloaded set: %v", err)
	}
	if err := ws.Add("x", "y", memtest.HostTensor(tensor.U8, 1)); err == nil {
		t.Fatal("Add after unload")
	}
}

func TestWeightSetResidentRollsBack(t *testing.T) {
	_, mb, _, _ := newSim(8*GiB, 3*GiB, GiB)
	ws := weightSet(t, mb, "m", GiB, GiB, GiB, GiB)
	err := ws.Place(Resident, 0)
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "uploading group m.3") {
		t.Fatalf("4 GiB under a 3 GiB cap: %v", err)
	}
	if mb.Held("m") != 0 || ws.State() != OnHost {
		t.Fatal("a failed Resident move left weights on the device")
	}
}

func TestManagerEvictsLeastRecentlyUsed(t *testing.T) {
	_, mb, mgr, logBuf := newSim(24*GiB, 10*GiB, 2*GiB)
	for _, m := range []struct {
		name string
		size int64
	}{{"a", 4 * GiB}, {"b", 3 * GiB}, {"c", 5 * GiB}} {
		if err := mgr.Add(m.name, weightSet(t, mb, m.name, m.size), OnHost); err != nil {
			t.Fatal(err)
		}
	}
	must(t, mgr.Load("a"))
	must(t, mgr.Load("b"))
	must(t, mgr.Load("a")) // a used more recently than b
	must(t, mgr.Load("c")) // needs 5, has 3: evicts b only
	if mgr.State("b") != OnHost || mgr.State("a") != Resident || mgr.State("c") != Resident {
		t.Fatalf("states a %v b %v c %v", mgr.State("a"), mgr.State("b"), mgr.State("c"))
	}
	if !strings.Contains(logBuf.String(), "evicting b to make room for load c") {
		t.Fatalf("log:\n%s", logBuf)
	}
	if !strings.Contains(logBuf.String(), "b resident → on host, freed 3.0 GiB") {
		t.Fatalf("log:\n%s", logBuf)
	}
	err := mgr.Add("huge", weightSet(t, mb, "huge", 11*GiB), OnHost)
	must(t, err)
	err = mgr.Load("huge")
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "needs 11.0 GiB") {
		t.Fatalf("loading a model larger than the cap: %v", err)
	}
	must(t, mgr.LoadExclusive("b"))
	if mb.Held("a")+mb.Held("c") != 0 || mb.Held("b") != 3*GiB {
		t.Fatalf("exclusive: %v", mb)
	}
	if mgr.Add("b", weightSet(t, mb, "b2", 1), OnHost) == nil {
		t.Fatal("duplicate registration")
	}
}

func TestLoadPreserving(t *testing.T) {
	_, mb, mgr, logBuf := newSim(24*GiB, 20*GiB, 6*GiB)
	must(t, mgr.Add("vae", weightSet(t, mb, "vae", GiB/2), OnHost))
	must(t, mgr.Add("small", weightSet(t, mb, "small", 4*GiB, 4*GiB, 4*GiB), OnHost))
	must(t, mgr.Add("big", weightSet(t, mb, "big", 4*GiB, 4*GiB, 4*GiB, 4*GiB, 4*GiB), OnHost))
	must(t, mgr.Load("vae"))
	must(t, mgr.LoadPreserving("small")) // 12 GiB + 6 preserved + 0.5 vae fits in 20
	if mgr.State("small") != Resident || mgr.State("vae") != Resident {
		t.Fatal("small should be resident beside the vae")
	}
	must(t, mgr.LoadPreserving("big")) // 20 GiB: evicts both, keeps 14 GiB → three groups
	if mgr.State("big") != Streamed || mb.Held("big") != 12*GiB || mb.Held("small") != 0 || mb.Held("vae") != 0 {
		t.Fatalf("big streamed: %v", mb)
	}
	if !strings.Contains(logBuf.String(), "does not fit beside 6.0 GiB preserved; streaming it with 14.0 GiB kept") {
		t.Fatalf("log:\n%s", logBuf)
	}
	must(t, mgr.Unload("big"))
	if mb.Stats().InUse != 0 || mgr.State("big") != Unloaded {
		t.Fatalf("after unload: %v", mb)
	}
}

// leaky "forgets" to free one allocation when it leaves the device.
type leaky struct {
	mb   *Backend
	held []*tensor.Tensor
}

func (l *leaky) DeviceBytes() int64 { return 2 * MiB }
func (l *leaky) Place(st State, _ int64) error {
	switch st {
	case Resident:
		for range 2 {
			t, err := tensor.Alloc(l.mb, tensor.U8, int(MiB))
			if err != nil {
				return err
			}
			l.mb.Charge("leaky", t)
			l.held = append(l.held, t)
		}
	default:
		tensor.Release(l.held[0])
	}
	return nil
}

func TestUnloadDetectsLeftoverBytes(t *testing.T) {
	_, mb, mgr, _ := newSim(GiB, GiB/2, 0)
	must(t, mgr.Add("leaky", &leaky{mb: mb}, OnHost))
	must(t, mgr.Load("leaky"))
	err := mgr.Unload("leaky")
	if err == nil || !strings.Contains(err.Error(), "still holds 1.0 MiB") {
		t.Fatalf("a leaking unload: %v", err)
	}
}

func TestRunPolicy(t *testing.T) {
	_, mb, mgr, logBuf := newSim(24*GiB, 20*GiB, 6*GiB)
	must(t, mgr.Add("transformer", weightSet(t, mb, "transformer", 7*GiB, 7*GiB), OnHost))
	must(t, mgr.Add("vae", weightSet(t, mb, "vae", GiB/2), OnHost))
	must(t, mgr.Load("transformer"))
	must(t, mgr.Load("vae"))

	// A decode whose activations take 16 GiB for a full tile, halving with
	// each smaller tile.
	tile := int64(16 * GiB)
	runs := 0
	decode := func() error {
		runs++
		s := tensor.NewScope(mb)
		defer s.Close()
		s.Empty(tensor.U8, int(tile)) // panics with an OpError on OOM; Run catches it
		return nil
	}
	err := mgr.Run(Attempt{Op: "vae decode", Keep: []string{"vae"}, Run: decode,
		Smaller: func() bool { tile /= 2; return tile >= GiB }})
	must(t, err)
	// 14.5 GiB in use: 16 GiB fails; after evicting the transformer 19.5 GiB
	// are free and the retry fits.
	if runs != 2 || mb.Held("transformer") != 0 || tile != 16*GiB {
		t.Fatalf("runs %d, tile %s, %v", runs, FormatBytes(tile), mb)
	}
	if !strings.Contains(logBuf.String(), "vae decode: out of memory; evicting models, trimming pools and retrying") {
		t.Fatalf("log:\n%s", logBuf)
	}

	// 24 GiB tiles never fit in 19.5 GiB: evict (nothing), then smaller.
	tile, runs = 48*GiB, 0
	must(t, mgr.Run(Attempt{Op: "vae decode", Keep: []string{"vae"}, Run: decode,
		Smaller: func() bool { tile /= 2; return tile >= GiB }}))
	if runs != 4 || tile != 12*GiB {
		t.Fatalf("runs %d, tile %s", runs, FormatBytes(tile))
	}
	if !strings.Contains(logBuf.String(), "still out of memory; retrying with smaller tiles (step 2)") {
		t.Fatalf("log:\n%s", logBuf)
	}

	// Nothing small enough: the CPU.
	tile, runs = 1<<50, 0
	onCPU := false
	must(t, mgr.Run(Attempt{Op: "vae decode", Run: decode, Smaller: func() bool { tile /= 2; return tile >= 1<<48 },
		CPU: func() error { onCPU = true; return nil }}))
	if !onCPU || !strings.Contains(logBuf.String(), "running it on the CPU") {
		t.Fatalf("CPU fallback not taken; log:\n%s", logBuf)
	}
	if mb.Held("vae") != 0 {
		t.Fatal("an attempt without Keep may evict the vae")
	}

	// No CPU path: a clear error wrapping the OOM.
	err = mgr.Run(Attempt{Op: "vae decode", Run: decode})
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "vae decode: out of memory on sim after trying [evicted 0 B and trimmed], and no CPU fallback") {
		t.Fatalf("no fallback: %v", err)
	}
	// Other errors are returned as they are, without retries.
	runs = 0
	boom := errors.New("boom")
	err = mgr.Run(Attempt{Op: "x", Run: func() error { runs++; return boom }})
	if err != boom || runs != 1 {
		t.Fatalf("a non-OOM error: %v after %d runs", err, runs)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testLogger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Out of memory at any one allocation of a tiled decode: the policy's
// retry completes it, and nothing panics.
func TestRunOOMAtEveryAllocation(t *testing.T) {
	// Count the allocations of one decode first.
	decode := func(be tensor.Backend, tiles int) func() error {
		return func() error {
			for range tiles {
				func() {
					s := tensor.NewScope(be)
					defer s.Close() // frees the tile's allocations when one fails too
					for range 5 {
						s.Empty(tensor.U8, int(MiB))
					}
				}()
			}
			return nil
		}
	}
	counter := FailNth(memtest.NewDevice("sim", GiB), 0)
	must(t, decode(counter, 4)())
	n := counter.Allocs()
	for nth := 1; nth <= n; nth++ {
		dev := FailNth(memtest.NewDevice("sim", GiB), nth)
		mb := Budgeted(dev, Budget{Device: "sim", Cap: GiB / 2, Preserve: 0})
		var logBuf bytes.Buffer
		mgr := NewManager(mb, testLogger(&logBuf))
		err := mgr.Run(Attempt{Op: "vae decode", Run: decode(mb, 4)})
		if err != nil {
			t.Fatalf("allocation %d failing: %v", nth, err)
		}
		if !strings.Contains(logBuf.String(), "out of memory; evicting models, trimming pools and retrying") || dev.Allocs() != n+1+nth-1 {
			t.Fatalf("allocation %d failing: %d allocations, log:\n%s", nth, dev.Allocs(), logBuf.String())
		}
		if mb.Stats().InUse != 0 {
			t.Fatalf("allocation %d failing: %s left allocated", nth, FormatBytes(mb.Stats().InUse))
		}
	}
}
