package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// arena holds the weights of one block in one allocation, each weight a
// view of it at its offset: on the backend when the block is resident; in
// host memory when it streams (page-locked when the backend has such
// memory), copied to the backend in one transfer before each use.
type arena struct {
	ps    []param // the block's weights, in order; their fields hold the views
	offs  []int64
	size  int64
	dev   *tensor.Tensor        // U8 storage on the backend while resident
	host  *tensor.HostBuffer    // host storage of a streamed block
	pinIt tensor.PinnedUploader // set when host is pinned memory from it
	// mapped: streamed from the checkpoint's mapping (Options.StreamFromFile),
	// no storage of its own outside a use.
	mapped bool
}

// arenaAlign keeps every weight 256-byte aligned, as a device allocation.
const arenaAlign = 256

func newArena(ps []param, dt tensor.DType) *arena {
	a := &arena{ps: ps, offs: make([]int64, len(ps))}
	for i, p := range ps {
		a.offs[i] = a.size
		n := int64(tensor.Numel(p.shape)) * int64(dt.Size())
		a.size += (n + arenaAlign - 1) / arenaAlign * arenaAlign
	}
	return a
}

// slice is the bytes of weight i within data.
func (a *arena) slice(data []byte, i int, dt tensor.DType) []byte {
	n := int64(tensor.Numel(a.ps[i].shape)) * int64(dt.Size())
	return data[a.offs[i] : a.offs[i]+n]
}

// bind points the fields of ps (the params of a copy of the block, in the
// arena's order) at views of buf on be (be nil: host tensors).
func (a *arena) bind(ps []param, be tensor.Backend, buf tensor.Buffer, dt tensor.DType) error {
	for i, p := range ps {
		n := int64(tensor.Numel(p.shape)) * int64(dt.Size())
		if be == nil {
			t, err := tensor.FromBytes(dt, a.slice(buf.(*tensor.HostBuffer).Data(), i, dt), p.shape...)
			if err != nil {
				return err
			}
			*p.t = t
			continue
		}
		v, ok := viewOf(be, buf, a.offs[i], n)
		if !ok {
			return fmt.Errorf("hunyuan: backend %s cannot view part of a buffer: %w", be.Name(), tensor.ErrUnsupported)
		}
		*p.t = tensor.Wrap(be, v, dt, p.shape...)
	}
	return nil
}

// free releases the arena's storage; the views become invalid.
func (a *arena) free() {
	tensor.Release(a.dev)
	a.dev = nil
	if a.host != nil && a.pinIt != nil {
		a.pinIt.FreePinned(a.host)
	}
	a.host, a.pinIt = nil, nil
	for _, p := range a.ps {
		*p.t = nil
	}
}

// blockParams lists the weights of block i (the double blocks first) as
// fields of b, a *doubleBlock or *singleBlock.
func (m *Model) blockParams(i int, b any) []param {
	var list []param
	p := newParams(&list)
	switch b := b.(type) {
	case *doubleBlock:
		b.params(p.sub(fmt.Sprintf("transformer_blocks.%d", i)), m.cfg)
	case *singleBlock:
		b.params(p.sub(fmt.Sprintf("single_transformer_blocks.%d", i-len(m.blocks))), m.cfg)
	}
	return list
}

// block is block i of the model (the double blocks first).
func (m *Model) block(i int) any {
	if i < len(m.blocks) {
		return &m.blocks[i]
	}
	return &m.singleBlocks[i-len(m.blocks)]
}

func (m *Model) numBlocks() int { return len(m.blocks) + len(m.singleBlocks) }

// makeBlocks lays out every block's weights and fills them with fill
// (which writes weight j of block i, given as a param, into its bytes).
// Blocks are resident on the backend, or, under Options.HostBlocks, kept
// in host memory except a prefix of at most Options.KeepBlockBytes.
func (m *Model) makeBlocks(fill func(i int, p param, dst []byte) error) error {
	keep := m.opts.KeepBlockBytes
	if keep == AutoKeep {
		keep = m.autoKeep()
	}
	pin, pinned := tensor.As[tensor.PinnedUploader](m.be)
	// From the file: only where the blocks have a file and a host copy
	// would be a second one (a host-backed backend computes on host memory).
	mapped := m.opts.StreamFromFile && m.file != nil && !tensor.IsHostBacked(m.be)
	var scratch []byte // host bytes of a resident block on a device
	var kept int64
	m.arenas = make([]*arena, m.numBlocks())
	for i := range m.arenas {
		a := newArena(m.blockParams(i, m.block(i)), m.dt)
		m.arenas[i] = a
		fillAll := func(data []byte) error {
			for j, p := range a.ps {
				if err := fill(i, p, a.slice(data, j, m.dt)); err != nil {
					return err
				}
			}
			return nil
		}
		resident := !m.opts.HostBlocks || kept+a.size <= keep
		if !resident && mapped {
			if err := m.checkMapped(i); err != nil {
				return err
			}
			a.mapped = true
			continue
		}
		if !resident {
			if pinned {
				// Page-locked memory may run out before system memory does:
				// the rest then streams from ordinary memory (copies that do
				// not overlap compute).
				if hb, err := pin.AllocPinned(a.size); err == nil {
					a.host, a.pinIt = hb, pin
				} else {
					pinned = false
				}
			}
			if a.host == nil {
				a.host = tensor.NewHostBuffer(a.size)
			}
			if err := fillAll(a.host.Data()); err != nil {
				return err
			}
			if err := a.bind(a.ps, nil, a.host, m.dt); err != nil {
				return err
			}
			continue
		}
		kept += a.size
		dev, err := tensor.Alloc(m.be, tensor.U8, int(a.size))
		if err != nil {
			return fmt.Errorf("hunyuan: block %d weights (%d MiB): %w", i, a.size>>20, err)
		}
		a.dev = dev
		if hb, ok := dev.Buffer().(*tensor.HostBuffer); ok && tensor.IsHostBacked(m.be) {
			if err := fillAll(hb.Data()); err != nil {
				return err
			}
		} else {
			if int64(len(scratch)) < a.size {
				scratch = make([]byte, a.size)
			}
			if err := fillAll(scratch[:a.size]); err != nil {
				return err
			}
			if err := m.be.Upload(dev.Buffer(), 0, scratch[:a.size]); err != nil {
				return fmt.Errorf("hunyuan: uploading block %d: %w", i, err)
			}
		}
		if err := a.bind(a.ps, m.be, dev.Buffer(), m.dt); err != nil {
			return err
		}
	}
	return nil
}

// autoKeep is the room the backend's budget leaves for resident block
// weights beside its preserved amount, 0 without a budget.
func (m *Model) autoKeep() int64 {
	if mb, ok := tensor.As[*memory.Backend](m.be); ok {
		return max(0, mb.Available()-mb.Budget().Preserve)
	}
	return 0
}

// use is one block's weights made usable for one call.
type use struct {
	m    *Model
	i    int
	dev  *tensor.Tensor // the streamed copy; nil when resident
	wait func() error
}

// acquire makes block i's weights usable on the backend: resident weights
// as they are, streamed ones uploaded (asynchronously when the backend can;
// wait before use). prefetch: give up, returning nil, when the budget has
// no room now.
func (m *Model) acquire(i int, prefetch bool) *use {
	a := m.arenas[i]
	u := &use{m: m, i: i}
	if a.mapped {
		if prefetch {
			// The copy happens when the block is used; what can run ahead
			// is reading its pages from disk.
			m.readAhead(i)
			return nil
		}
		dev, err := tensor.Alloc(m.be, tensor.U8, int(a.size))
		if err != nil {
			must("stream weights", fmt.Errorf("block %d (%d MiB): %w", i, a.size>>20, err))
		}
		if err := m.uploadMapped(i, dev.Buffer()); err != nil {
			tensor.Release(dev)
			must("stream weights", fmt.Errorf("block %d: %w", i, err))
		}
		u.dev = dev
		return u
	}
	if a.dev != nil || a.host == nil || tensor.IsHostBacked(m.be) {
		return u
	}
	dev, err := tensor.Alloc(m.be, tensor.U8, int(a.size))
	if err != nil {
		if prefetch {
			return nil
		}
		must("stream weights", fmt.Errorf("block %d (%d MiB): %w", i, a.size>>20, err))
	}
	u.dev = dev
	if a.pinIt != nil {
		u.wait, err = a.pinIt.UploadAsync(dev.Buffer(), 0, a.host.Data())
	} else {
		err = m.be.Upload(dev.Buffer(), 0, a.host.Data())
	}
	if err != nil {
		tensor.Release(dev)
		must("stream weights", fmt.Errorf("block %d: %w", i, err))
	}
	return u
}

// block returns a copy of the block with its weights usable on the
// backend, after the upload (if any) is done.
func (u *use) block() any {
	if u.wait != nil {
		must("stream weights", u.wait())
		u.wait = nil
	}
	m := u.m
	var b any
	if u.i < len(m.blocks) {
		c := m.blocks[u.i]
		b = &c
	} else {
		c := m.singleBlocks[u.i-len(m.blocks)]
		b = &c
	}
	if u.dev != nil {
		must("stream weights", m.arenas[u.i].bind(m.blockParams(u.i, b), m.be, u.dev.Buffer(), m.dt))
	}
	return b
}

// release ends the use: a streamed copy is freed (after the work queued
// on it, the backend's frees being stream-ordered).
func (u *use) release() {
	if u == nil {
		return
	}
	if u.wait != nil {
		u.wait() // never free memory a copy may still write
		u.wait = nil
	}
	tensor.Release(u.dev)
	u.dev = nil
}

// fileSource is the open checkpoint blocks stream from.
type fileSource struct {
	ck  *weights.Checkpoint
	dir string
}

// checkMapped checks at load time that block i's checkpoint tensors exist
// with their shapes and a usable dtype, so a broken file fails Load and
// not a forward pass.
func (m *Model) checkMapped(i int) error {
	for _, p := range m.arenas[i].ps {
		for _, src := range p.sources() {
			dt, shape, err := m.file.ck.Info(src.name)
			if err != nil {
				return err
			}
			if want := p.sourceShape(src); !equalShape(shape, want) {
				return fmt.Errorf("hunyuan: %s: tensor %q has shape %v, want %v", m.file.dir, src.name, shape, want)
			}
			if err := checkConvertible(dt, m.dt); err != nil {
				return fmt.Errorf("hunyuan: %s: tensor %q %v", m.file.dir, src.name, err)
			}
		}
	}
	return nil
}

// readAhead starts reading block i's bytes of the checkpoint in the
// background (best effort). The advice is given from a goroutine: the
// kernel may block while it queues the reads, and the forward pass should
// not wait for that.
func (m *Model) readAhead(i int) {
	ck := m.file.ck
	var names []string
	for _, p := range m.arenas[i].ps {
		for _, src := range p.sources() {
			names = append(names, src.name)
		}
	}
	go func() {
		for _, n := range names {
			if ck.WillNeed(n) != nil {
				return // closed meanwhile: nothing to read ahead for
			}
		}
	}()
}

// convertChunk bounds the host buffer of a converted upload (elements).
const convertChunk = 1 << 20

// uploadMapped copies block i's weights from the mapped checkpoint into
// dst (laid out as the block's arena): straight from the mapping when the
// stored dtype is the compute dtype, else converted chunk by chunk; each
// tensor's pages are released once uploaded.
func (m *Model) uploadMapped(i int, dst tensor.Buffer) error {
	a, ck, ds := m.arenas[i], m.file.ck, m.dt.Size()
	var scratch []byte
	for j, p := range a.ps {
		off := a.offs[j]
		for _, src := range p.sources() {
			h, err := ck.Host(src.name)
			if err != nil {
				return err
			}
			if want := p.sourceShape(src); !equalShape(h.Shape(), want) {
				return fmt.Errorf("hunyuan: %s: tensor %q has shape %v, want %v", m.file.dir, src.name, h.Shape(), want)
			}
			n := h.Numel()
			if h.DType() == m.dt {
				if err := m.be.Upload(dst, off, h.HostBytes()); err != nil {
					return err
				}
			} else {
				raw, ss := h.HostBytes(), h.DType().Size()
				if scratch == nil {
					scratch = make([]byte, convertChunk*ds)
				}
				for lo := 0; lo < n; lo += convertChunk {
					hi := min(lo+convertChunk, n)
					part, err := tensor.FromBytes(h.DType(), raw[lo*ss:hi*ss], hi-lo)
					if err != nil {
						return err
					}
					out := scratch[:(hi-lo)*ds]
					if err := convertInto(out, m.dt, part, tensor.Invalid); err != nil {
						return fmt.Errorf("hunyuan: %s: tensor %q %v", m.file.dir, src.name, err)
					}
					if err := m.be.Upload(dst, off+int64(lo*ds), out); err != nil {
						return err
					}
				}
			}
			off += int64(n * ds)
			if err := ck.DontNeed(src.name); err != nil {
				return err
			}
		}
	}
	return nil
}
