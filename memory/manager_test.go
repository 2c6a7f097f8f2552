package memory

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/memtest"
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

// model is a Placeable of weight groups of the given byte sizes, charged
// to its owner: Resident puts every group on the device, Streamed the
// longest prefix within the limit (less when the budget refuses more), as
// FramePack fills a model module by module; OnHost and Unloaded none. A
// failed move leaves the groups where they were.
type model struct {
	mb    *Backend
	owner string
	sizes []int64
	dev   []*tensor.Tensor
}

func newModel(mb *Backend, owner string, sizes ...int64) *model {
	return &model{mb: mb, owner: owner, sizes: sizes}
}

func (m *model) DeviceBytes() int64 {
	var n int64
	for _, s := range m.sizes {
		n += s
	}
	return n
}

func (m *model) Place(st State, limit int64) error {
	keep := 0
	switch st {
	case Resident:
		keep = len(m.sizes)
	case Streamed:
		for cum := int64(0); keep < len(m.sizes) && cum+m.sizes[keep] <= limit; keep++ {
			cum += m.sizes[keep]
		}
	}
	m.shrink(keep) // free first, so that a move never holds both
	had := len(m.dev)
	for len(m.dev) < keep {
		t, err := tensor.Alloc(m.mb, tensor.U8, int(m.sizes[len(m.dev)]))
		if err != nil {
			if st == Streamed && errors.Is(err, tensor.ErrOutOfMemory) {
				break // keep less; the rest streams
			}
			m.shrink(had)
			return fmt.Errorf("%s: uploading group %d: %w", m.owner, len(m.dev), err)
		}
		m.mb.Charge(m.owner, t)
		m.dev = append(m.dev, t)
	}
	return nil
}

func (m *model) shrink(n int) {
	for len(m.dev) > n {
		tensor.Release(m.dev[len(m.dev)-1])
		m.dev = m.dev[:len(m.dev)-1]
	}
}

func TestManagerEvictsLeastRecentlyUsed(t *testing.T) {
	_, mb, mgr, logBuf := newSim(24*GiB, 10*GiB, 2*GiB)
	for _, m := range []struct {
		name string
		size int64
	}{{"a", 4 * GiB}, {"b", 3 * GiB}, {"c", 5 * GiB}} {
		if err := mgr.Add(m.name, newModel(mb, m.name, m.size), OnHost); err != nil {
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
	err := mgr.Add("huge", newModel(mb, "huge", 11*GiB), OnHost)
	must(t, err)
	err = mgr.Load("huge")
	if !errors.Is(err, tensor.ErrOutOfMemory) || !strings.Contains(err.Error(), "needs 11.0 GiB") {
		t.Fatalf("loading a model larger than the cap: %v", err)
	}
	if mgr.Add("b", newModel(mb, "b2", 1), OnHost) == nil {
		t.Fatal("duplicate registration")
	}
}

func TestLoadPreserving(t *testing.T) {
	_, mb, mgr, logBuf := newSim(24*GiB, 20*GiB, 6*GiB)
	must(t, mgr.Add("vae", newModel(mb, "vae", GiB/2), OnHost))
	must(t, mgr.Add("small", newModel(mb, "small", 4*GiB, 4*GiB, 4*GiB), OnHost))
	must(t, mgr.Add("big", newModel(mb, "big", 4*GiB, 4*GiB, 4*GiB, 4*GiB, 4*GiB), OnHost))
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
	must(t, mgr.Add("transformer", newModel(mb, "transformer", 7*GiB, 7*GiB), OnHost))
	must(t, mgr.Add("vae", newModel(mb, "vae", GiB/2), OnHost))
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

// gated is a model whose placement waits for a signal, to hold a load in
// progress.
type gated struct {
	*model
	started, proceed chan struct{}
}

func (g *gated) Place(st State, limit int64) error {
	if st == Resident {
		close(g.started)
		<-g.proceed
	}
	return g.model.Place(st, limit)
}

// LoadAsync builds a model beside the others without holding the Manager:
// another model loads and unloads while it builds; it is never evicted or
// moved meanwhile; it starts only when it fits with the reserve left.
func TestLoadAsync(t *testing.T) {
	_, mb, mm, logs := newSim(1000, 1000, 100)
	big := &gated{newModel(mb, "transformer", 300, 300), make(chan struct{}), make(chan struct{})}
	text := newModel(mb, "text", 200)
	for name, m := range map[string]Placeable{"transformer": big, "text": text} {
		if err := mm.Add(name, m, Unloaded); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := mm.LoadAsync("transformer", 500); ok {
		t.Fatal("started with 600 + 500 reserved > 1000 free")
	}
	wait, ok := mm.LoadAsync("transformer", 300)
	if !ok {
		t.Fatal("did not start with 600 + 300 reserved ≤ 1000 free")
	}
	<-big.started
	if _, ok := mm.LoadAsync("transformer", 0); ok {
		t.Error("a second LoadAsync of a model being loaded started")
	}
	// The Manager is free while it builds: another model loads and leaves.
	if err := mm.Load("text"); err != nil {
		t.Fatal(err)
	}
	if err := mm.Unload("transformer"); err == nil || !strings.Contains(err.Error(), "being loaded") {
		t.Errorf("unloading a model being loaded: %v", err)
	}
	mm.EvictExcept("text")
	close(big.proceed)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if mm.State("transformer") != Resident || mb.Held("transformer") != 600 || mb.Held("text") != 200 {
		t.Errorf("transformer %s holding %d, text holding %d", mm.State("transformer"), mb.Held("transformer"), mb.Held("text"))
	}
	if err := mm.Unload("transformer"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "in the background") {
		t.Errorf("no log of the background load:\n%s", logs)
	}
}

// A background load refused by the budget fails with the budget's error and
// leaves nothing behind.
func TestLoadAsyncRefused(t *testing.T) {
	_, mb, mm, _ := newSim(1000, 1000, 0)
	big := &gated{newModel(mb, "transformer", 300, 300), make(chan struct{}), make(chan struct{})}
	other := newModel(mb, "vae", 500)
	mm.Add("transformer", big, Unloaded)
	mm.Add("vae", other, Unloaded)
	wait, ok := mm.LoadAsync("transformer", 0)
	if !ok {
		t.Fatal("not started")
	}
	<-big.started
	if err := mm.Load("vae"); err != nil { // takes what the reserve did not keep
		t.Fatal(err)
	}
	close(big.proceed)
	err := wait()
	if !errors.Is(err, tensor.ErrOutOfMemory) {
		t.Fatalf("error %v, want out of memory", err)
	}
	if mm.State("transformer") != Unloaded || mb.Held("transformer") != 0 {
		t.Errorf("transformer %s holding %d after a failed load", mm.State("transformer"), mb.Held("transformer"))
	}
}
