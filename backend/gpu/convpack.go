package gpu

import (
	"github.com/framepack-go/framepack/internal/packcache"
	"github.com/framepack-go/framepack/tensor"
)

// The optimized tier's channels-last copies of convolution weights, kept
// per backend: a decoder running chunk by chunk convolves with the same
// weights again and again, and packing each weight once saves a pack and a
// scratch allocation on every later call.
//
// A copy is keyed by the allocation holding the weight (a view's root, not
// its address, which a later allocation may reuse), the weight's byte
// offset in it, its shape and the packed dtype, and is returned only while
// that allocation is neither freed nor uploaded into again; freeing it
// drops the copies at once. Weights must not be rewritten on the device by
// kernels (uploads are tracked). The copies are allocated on the budget
// like the tier's scratch, stay within packKeepBytes, and go on Trim and
// when a convolution runs out of memory.

// packKeepBytes bounds the kept copies of a backend: half of
// DefaultChunkBytes, so that they sit inside the conv3d reserve a decode
// plans beside (internal/device's ConvScratch) with room for a chunk left.
const packKeepBytes = DefaultChunkBytes / 2

// packKey names a packed weight.
type packKey struct {
	buf   *Buffer // the allocation holding the weight
	off   int64   // the weight's byte offset in buf
	shape [5]int
	dt    tensor.DType
	form  packForm
}

// packForm is what a kept copy holds.
type packForm uint8

const (
	packedLast   packForm = iota // (K, kT, kH, kW, C): the optimized tier's
	tapsNHWC                     // (kT, K, kH, kW, C): the conv2d tier's taps in NHWC
	tapsNCHW                     // (kT, K, C, kH, kW): in NCHW
	tapsNHWCLast                 // tapsNHWC made from a weight packed channels-last
	tapsNCHWLast                 // tapsNCHW likewise
)

type packCache = packcache.Cache[packKey, *tensor.Tensor]

func newPackCache() *packCache {
	return packcache.New[packKey, *tensor.Tensor](packKeepBytes, tensor.Release)
}

// dropPacks lets go of the copies made from allocation db, being freed.
func (b *Backend) dropPacks(db *Buffer) {
	b.packs.Drop(func(k packKey) bool { return k.buf == db })
}

// KeptWeightBytes is what the conv3d tier's kept weight copies hold on the
// device (counted by the budget they were allocated on); Trim frees them.
func (b *Backend) KeptWeightBytes() int64 { return b.packs.Bytes() }

// packKeyOf is the key of w's packed copy and the test that a copy made
// now stays valid: w's allocation neither freed nor uploaded into since.
// It marks the allocation so that its free drops the copies. ok is false
// for a weight outside device memory.
func packKeyOf(w *tensor.Tensor, g geom, tdt tensor.DType) (k packKey, live func() bool, ok bool) {
	db, ok := w.Buffer().(*Buffer)
	if !ok {
		return packKey{}, nil, false
	}
	root, off := db.allocation()
	gen := root.gen.Load()
	root.packed.Store(true)
	k = packKey{buf: root, off: off, shape: [5]int{g.Cout, g.Cin, g.kT, g.kH, g.kW}, dt: tdt}
	return k, func() bool { return !root.freed.Load() && root.gen.Load() == gen }, true
}

// packedWeight is w (K, C, kvol) packed as (K, kvol, C), the kept copy when
// there is one, and done, which ends this use of it. A copy made here is
// kept when keep is set, the cache has room for it and the budget keeps a
// chunk's scratch free beside it; otherwise it is this call's scratch, as
// before.
func (t *optimized) packedWeight(alloc tensor.Backend, g geom, tdt tensor.DType, w *tensor.Tensor, keep bool) (*tensor.Tensor, func(), error) {
	kvol := g.kT * g.kH * g.kW
	n := int64(g.Cout) * int64(g.Cin) * int64(kvol)
	var key packKey
	var live func() bool
	if keep {
		key, live, keep = packKeyOf(w, g, tdt)
	}
	if keep {
		if wl, done, hit := t.be.packs.Get(key); hit {
			return wl, done, nil
		}
		bytes := n * int64(tdt.Size())
		keep = t.be.packs.Room(key, bytes) && t.roomToKeep(alloc, bytes)
	}
	wl, err := scratch(alloc, tdt, n)
	if err != nil {
		return nil, nil, err
	}
	// A pack with K "batches" of one frame.
	if err := t.o.Profile.time("conv3d.pack", t.be, 0, func() error {
		return t.lk.pack(tdt, Ptr(wl), Ptr(w), g.Cout, g.Cin, 1, kvol, 0, 1)
	}); err != nil {
		tensor.Release(wl)
		return nil, nil, err
	}
	if keep {
		if done, ok := t.be.packs.Add(key, wl, wl.Bytes(), live); ok {
			return wl, done, nil
		}
	}
	return wl, func() { tensor.Release(wl) }, nil
}

// roomToKeep reports whether alloc's budget, when it has one, still has a
// chunk's scratch (the chain's chunk bound) free once bytes more are kept.
func (t *optimized) roomToKeep(alloc tensor.Backend, bytes int64) bool {
	av, ok := alloc.(tensor.Budgeted)
	return !ok || av.Available()-bytes >= t.o.chunkBytes()
}
