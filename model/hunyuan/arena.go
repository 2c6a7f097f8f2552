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
	ws    []weights.Weight // the block's weights, in the order loadBlock asks
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

func newArena(ws []weights.Weight) *arena {
	a := &arena{ws: ws, offs: make([]int64, len(ws))}
	for i, w := range ws {
		a.offs[i] = a.size
		a.size += (w.Bytes() + arenaAlign - 1) / arenaAlign * arenaAlign
	}
	return a
}

// slice is the bytes of weight j within data.
func (a *arena) slice(data []byte, j int) []byte {
	return data[a.offs[j] : a.offs[j]+a.ws[j].Bytes()]
}

// views is a weights.Source that hands out the arena's weights, in order,
// as views of buf on be (be nil: host tensors).
type views struct {
	a    *arena
	be   tensor.Backend
	buf  tensor.Buffer
	next int
}

func (v *views) Make(w weights.Weight) (*tensor.Tensor, error) {
	j := v.next
	if j >= len(v.a.ws) || v.a.ws[j].Name != w.Name {
		return nil, fmt.Errorf("hunyuan: block weight %q is not the arena's weight %d", w.Name, j)
	}
	v.next++
	if v.be == nil {
		return tensor.FromBytes(w.DType, v.a.slice(v.buf.(*tensor.HostBuffer).Data(), j), w.Shape...)
	}
	b, ok := tensor.ViewOf(v.be, v.buf, v.a.offs[j], w.Bytes())
	if !ok {
		return nil, fmt.Errorf("hunyuan: backend %s cannot view part of a buffer: %w", v.be.Name(), tensor.ErrUnsupported)
	}
	return tensor.Wrap(v.be, b, w.DType, w.Shape...), nil
}

// bind points the fields of blk (block i or a copy of it) at views of buf
// on be (be nil: host tensors). The views are not owned: the arena's
// storage is.
func (m *Model) bind(i int, blk any, be tensor.Backend, buf tensor.Buffer) error {
	p := weights.NewBuilder(&views{a: m.arenas[i], be: be, buf: buf}, m.dt)
	m.loadBlock(p, i, blk)
	return p.Err()
}

// free releases the arena's storage; the views become invalid.
func (a *arena) free() {
	tensor.Release(a.dev)
	a.dev = nil
	if a.host != nil && a.pinIt != nil {
		a.pinIt.FreePinned(a.host)
	}
	a.host, a.pinIt = nil, nil
}

// loadBlock reads the weights of block i (the double blocks first) through
// p into blk, a *doubleBlock or *singleBlock.
func (m *Model) loadBlock(p *weights.Builder, i int, blk any) {
	if m.opts.FP8 {
		p = p.FP8()
	}
	var ls []*linear
	switch b := blk.(type) {
	case *doubleBlock:
		b.load(p.Sub(fmt.Sprintf("transformer_blocks.%d", i)), m.cfg)
		ls = []*linear{&b.QKV, &b.AddQKV, &b.ToOut0, &b.ToAddOut, &b.FF.Proj, &b.FF.Out, &b.FFContext.Proj, &b.FFContext.Out}
	case *singleBlock:
		b.load(p.Sub(fmt.Sprintf("single_transformer_blocks.%d", i-len(m.blocks))), m.cfg)
		ls = []*linear{&b.QKVMLP, &b.ProjOut}
	}
	for _, l := range ls {
		l.FP8Compute = m.opts.FP8Compute && l.Scale != nil
		if l.Scale != nil {
			l.LoRA = m.lowRank[l.key]
		}
	}
}

// block is block i of the model (the double blocks first).
func (m *Model) block(i int) any {
	if i < len(m.blocks) {
		return &m.blocks[i]
	}
	return &m.singleBlocks[i-len(m.blocks)]
}

func (m *Model) numBlocks() int { return len(m.blocks) + len(m.singleBlocks) }

// makeBlocks lays out every block's weights (listed by loadBlock on a plan)
// and queues them on ld, which fills them from src. Blocks are resident on
// the backend, or, under Options.HostBlocks, kept in host memory except a
// prefix of at most Options.KeepBlockBytes. The weights are usable once ld
// has finished.
func (m *Model) makeBlocks(src weights.Filler, ld *weights.Loader) error {
	keep := m.opts.KeepBlockBytes
	if keep == AutoKeep {
		keep = m.autoKeep()
	}
	pin, pinned := tensor.As[tensor.PinnedUploader](m.be)
	// From the file: only where the blocks have a file and a host copy
	// would be a second one (a host-backed backend computes on host memory).
	mapped := m.opts.StreamFromFile && m.file != nil && !tensor.IsHostBacked(m.be)
	var kept int64
	m.arenas = make([]*arena, m.numBlocks())
	for i := range m.arenas {
		plan := weights.NewPlan().In(m.dt)
		m.loadBlock(plan, i, m.block(i))
		a := newArena(plan.Weights())
		m.arenas[i] = a
		resident := !m.opts.HostBlocks || kept+a.size <= keep
		if !resident && mapped && !m.opts.LoRA.TouchesAny(a.ws) {
			// A broken file fails Load, not a forward pass.
			if err := m.file.Check(a.ws); err != nil {
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
			for j, w := range a.ws {
				ld.CopyToHost(w, a.slice(a.host.Data(), j))
			}
			if err := m.bind(i, m.block(i), nil, a.host); err != nil {
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
		for j, w := range a.ws {
			ld.Copy(w, dev.Buffer(), a.offs[j])
		}
		if err := m.bind(i, m.block(i), m.be, dev.Buffer()); err != nil {
			return err
		}
		if err := ld.Err(); err != nil {
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
		must("stream weights", m.bind(u.i, b, m.be, u.dev.Buffer()))
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

// readAhead starts reading block i's bytes of the checkpoint in the
// background (best effort). The advice is given from a goroutine: the
// kernel may block while it queues the reads, and the forward pass should
// not wait for that.
func (m *Model) readAhead(i int) {
	src, ws := m.file, m.arenas[i].ws
	go func() {
		for _, w := range ws {
			if src.WillNeed(w) != nil {
				return // closed meanwhile: nothing to read ahead for
			}
		}
	}()
}

// uploadMapped copies block i's weights from the mapped checkpoint into
// dst (laid out as the block's arena): straight from the mapping when the
// stored dtype is the compute dtype, else converted in bounded chunks; each
// tensor's pages are released once uploaded.
func (m *Model) uploadMapped(i int, dst tensor.Buffer) error {
	a := m.arenas[i]
	for j, w := range a.ws {
		if err := m.file.Upload(w, dst, a.offs[j]); err != nil {
			return err
		}
	}
	return nil
}
