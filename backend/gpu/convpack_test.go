package gpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// TestPackKeys checks the keys of kept weight copies without a device:
// a weight is named by its allocation and offset (a view's and a view of
// that view's alike), never by its address, and its copies die with the
// allocation (freed, or uploaded into again).
func TestPackKeys(t *testing.T) {
	b := &Backend{packs: newPackCache()}
	// Buffers the allocator never handed out: freeing them calls no driver.
	arena := &Buffer{ptr: 1 << 20, n: 8192}
	g := geom{Cout: 4, Cin: 2, kT: 3, kH: 3, kW: 3}
	const wbytes = 4 * 2 * 27 * 2
	view := func(buf tensor.Buffer, off int64) tensor.Buffer {
		t.Helper()
		v, err := b.View(buf, off, wbytes)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	weight := func(buf tensor.Buffer) *tensor.Tensor { return tensor.Wrap(nil, buf, tensor.F16, 4, 2, 3, 3, 3) }
	key := func(buf tensor.Buffer, dt tensor.DType) (packKey, func() bool) {
		t.Helper()
		k, live, ok := packKeyOf(weight(buf), g, dt)
		if !ok {
			t.Fatal("no key for a device weight")
		}
		if !live() {
			t.Fatal("a fresh key is not live")
		}
		return k, live
	}
	keep := func(k packKey, live func() bool) {
		t.Helper()
		if _, _, hit := b.packs.Get(k); hit {
			t.Fatalf("%+v held before it was added", k)
		}
		done, ok := b.packs.Add(k, tensor.New(tensor.F16, wbytes/2), wbytes, live)
		if !ok {
			t.Fatalf("%+v not kept", k)
		}
		done()
	}

	v1 := view(arena, 1024)
	k1, live1 := key(v1, tensor.F16)
	if k1.buf != arena || k1.off != 1024 || k1.shape != [5]int{4, 2, 3, 3, 3} {
		t.Fatalf("key %+v: want the arena at 1024", k1)
	}
	if !arena.packed.Load() {
		t.Fatal("the allocation is not marked")
	}
	if kv, _ := key(view(v1, 0), tensor.F16); kv != k1 {
		t.Fatalf("a view of the view has key %+v, want %+v", kv, k1)
	}
	if kb, _ := key(v1, tensor.BF16); kb == k1 {
		t.Fatal("another packed dtype has the same key")
	}
	k2, live2 := key(view(arena, 2048), tensor.F16)
	if k2 == k1 {
		t.Fatal("two offsets have one key")
	}
	if _, _, ok := packKeyOf(tensor.New(tensor.F16, 4, 2, 3, 3, 3), g, tensor.F16); ok {
		t.Fatal("a host weight has a key")
	}
	keep(k1, live1)
	keep(k2, live2)

	// An upload anywhere in the allocation outdates its copies.
	v1.(*Buffer).uploaded()
	if live1() || live2() {
		t.Fatal("copies live after an upload into their allocation")
	}
	if _, _, hit := b.packs.Get(k1); hit {
		t.Fatal("copy returned after an upload")
	}
	k1, live1 = key(v1, tensor.F16)
	keep(k1, live1)

	other := &Buffer{ptr: 1 << 21, n: wbytes}
	ko, liveo := key(other, tensor.F16)
	keep(ko, liveo)

	// Freeing the allocation drops its copies at once.
	b.Free(arena)
	if live1() {
		t.Fatal("copy live after its allocation was freed")
	}
	if n := b.packs.Len(); n != 1 {
		t.Fatalf("%d copies held after the free, want 1 (another allocation's)", n)
	}
	if _, _, hit := b.packs.Get(ko); !hit {
		t.Fatal("the free dropped another allocation's copy")
	}
	if _, err := b.View(v1, 0, 16); err == nil {
		t.Fatal("a view of a view of a freed allocation was made")
	}

	// A new allocation at the freed one's address is another weight.
	arena2 := &Buffer{ptr: arena.ptr, n: arena.n}
	if k, _ := key(view(arena2, 1024), tensor.F16); k == k1 {
		t.Fatal("a new allocation at a freed one's address has its key")
	}
}

// TestKeptPackedWeights runs one causally padded convolution on the
// optimized tier, channels-last, again and again: the weight is packed
// once and its copy reused, counted by the budget, remade when the weight
// is uploaded again, dropped when the weight (or the allocation a view
// weight is part of) is freed — also when a new weight then takes the
// freed memory —, dropped when a convolution runs out of memory, and let
// go of on Trim. Every output is checked against the CPU's.
func TestKeptPackedWeights(t *testing.T) {
	g := newGPU(t, Options{Log: quiet})
	xs, ws := []int{1, 16, 5, 9, 11}, []int{32, 16, 3, 3, 3}
	outShape := []int{1, 32, 5, 9, 11}
	pad := tensor.Padding{Before: [3]int{2, 1, 1}, After: [3]int{0, 1, 1}, Mode: tensor.PadReplicate}
	p := tensor.ConvParams{Stride: [3]int{1, 1, 1}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			if err := g.Trim(); err != nil {
				t.Fatal(err)
			}
			prof := NewProfile()
			chain := wrapped(t, g, ConvOptions{Faults: only("optimized"), Layout: LayoutNDHWC, Profile: prof})
			mb := memory.Budgeted(chain, memory.Budget{Device: "test", Cap: 8 << 30})
			rng := rand.New(rand.NewPCG(11, 12))
			hx := randHost(rng, dt, 1, xs...)
			hb := randHost(rng, dt, 0.5, ws[0])
			var hw [4]*tensor.Tensor // four different weights
			for i := range hw {
				hw[i] = randHost(rng, dt, 0.1, ws...)
			}
			c := cpu.New()
			px, err := pad.Materialize(c, hx)
			if err != nil {
				t.Fatal(err)
			}
			want := make([][]float32, len(hw))
			for i, h := range hw {
				y := tensor.New(dt, outShape...)
				if err := c.Conv3d(y, px, h, hb, p); err != nil {
					t.Fatal(err)
				}
				want[i] = y.ToFloat32()
			}
			x, b := upload(t, mb, hx), upload(t, mb, hb)
			wbytes := int64(tensor.Numel(ws) * dt.Size())

			put := func(buf tensor.Buffer, off int64, h *tensor.Tensor) {
				t.Helper()
				if err := mb.Upload(buf, off, h.HostBytes()); err != nil {
					t.Fatal(err)
				}
			}
			newWeight := func(h *tensor.Tensor) *tensor.Tensor {
				t.Helper()
				w, err := tensor.Alloc(mb, dt, ws...)
				if err != nil {
					t.Fatal(err)
				}
				put(w.Buffer(), 0, h)
				return w
			}
			packs := func() int {
				for _, l := range prof.Lines() {
					if l.Class == "conv3d.pack" {
						return l.Calls
					}
				}
				return 0
			}
			// conv convolves with w on be (mb, or a wrapper of it the
			// scratch is allocated on), checks the output against the CPU
			// with weight i and returns it and the packs it took.
			conv := func(what string, be tensor.Backend, w *tensor.Tensor, i int) ([]float32, int) {
				t.Helper()
				dst, err := tensor.Alloc(mb, dt, outShape...)
				if err != nil {
					t.Fatal(err)
				}
				defer tensor.Release(dst)
				if err := mb.Fill(dst, math.NaN()); err != nil {
					t.Fatal(err)
				}
				n := packs()
				if err := chain.Conv3dPadded(tensor.Wrap(be, dst.Buffer(), dt, outShape...), x, w, b, p, pad); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				got := tensor.Float32s(dst)
				if e := numcmp.RelL2(got, want[i]); !(e <= limit(dt)) {
					t.Errorf("%s: rel_l2 %.3e > %.1e against the CPU with weight %d", what, e, limit(dt), i)
				}
				return got, packs() - n
			}
			kept := func(what string, n int64) {
				t.Helper()
				if got := g.KeptWeightBytes(); got != n {
					t.Fatalf("%s: %d bytes of weight copies kept, want %d", what, got, n)
				}
			}

			// One weight, twice: the second call packs the input only, and
			// gives the same bits.
			w := newWeight(hw[0])
			inUse := mb.Stats().InUse
			y1, n1 := conv("first", mb, w, 0)
			kept("after the first call", wbytes)
			if d := mb.Stats().InUse - inUse; d != wbytes {
				t.Errorf("the budget counts %d bytes more after the first call, want the copy's %d", d, wbytes)
			}
			y2, n2 := conv("second", mb, w, 0)
			if n2 != n1-1 {
				t.Errorf("second call took %d packs, the first %d: want one fewer (the weight's)", n2, n1)
			}
			if !slices.Equal(math32bits(y1), math32bits(y2)) {
				t.Error("the second call's output differs from the first's")
			}

			// Uploaded again: the copy is remade.
			put(w.Buffer(), 0, hw[1])
			if _, n := conv("re-uploaded", mb, w, 1); n != n1 {
				t.Errorf("after an upload: %d packs, want %d (the weight's again)", n, n1)
			}
			kept("after the upload", wbytes)

			// Freed: the copy goes with it; a new weight of the same size
			// (most likely at the same address, from the pool) gets its own.
			addr := Ptr(w)
			tensor.Release(w)
			kept("after the free", 0)
			w = newWeight(hw[2])
			defer tensor.Release(w)
			t.Logf("the new weight reuses the freed one's address: %v", Ptr(w) == addr)
			conv("new weight", mb, w, 2)
			kept("with the new weight", wbytes)

			// A weight viewed in a larger allocation, as streamed blocks hold
			// theirs; freeing the allocation drops its copy, and a new
			// allocation there gets its own.
			viewed := func(h *tensor.Tensor) (arena, vw *tensor.Tensor) {
				t.Helper()
				arena, err := tensor.Alloc(mb, tensor.U8, int(2*wbytes))
				if err != nil {
					t.Fatal(err)
				}
				put(arena.Buffer(), wbytes, h)
				vb, err := g.View(arena.Buffer(), wbytes, wbytes)
				if err != nil {
					t.Fatal(err)
				}
				return arena, tensor.Wrap(mb, vb, dt, ws...) // never released: a view
			}
			arena, vw := viewed(hw[3])
			conv("view", mb, vw, 3)
			kept("with the view", 2*wbytes)
			addr = Ptr(vw)
			tensor.Release(arena)
			kept("after the view's allocation was freed", wbytes)
			arena, vw = viewed(hw[0])
			defer tensor.Release(arena)
			t.Logf("the new view reuses the freed one's address: %v", Ptr(vw) == addr)
			conv("new view", mb, vw, 0)
			kept("with the new view", 2*wbytes)

			// Out of memory with copies kept: they go and the call is
			// retried, keeping none. The first scratch allocation fails.
			conv("out of memory", memory.FailNth(mb, 1), w, 2)
			kept("after running out of memory", 0)

			// Trim lets go of the copies and the budget of their bytes.
			conv("before trim", mb, w, 2)
			kept("before trim", wbytes)
			inUse = mb.Stats().InUse
			if err := mb.Trim(); err != nil {
				t.Fatal(err)
			}
			kept("after trim", 0)
			if d := inUse - mb.Stats().InUse; d != wbytes {
				t.Errorf("trim freed %d bytes of the budget, want the copy's %d", d, wbytes)
			}
		})
	}
}

func math32bits(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, f := range v {
		out[i] = math.Float32bits(f)
	}
	return out
}
