package gpu

import (
	"fmt"
	"sync"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// allocator hands out device memory under a hard cap. It uses the device's
// stream-ordered pool (hipMallocAsync / cuMemAllocAsync) with an unlimited
// release threshold, so freed memory stays cached until trim; devices
// without pools get plain malloc/free. A request that would take the
// buffers in use above the cap fails before the driver sees it, and the
// pool itself is trimmed whenever what it reserves exceeds the cap.
type allocator struct {
	dev    *hip.Device
	stream hip.Stream
	pooled bool
	pool   hip.MemPool

	mu     sync.Mutex
	limit  int64
	used   int64
	peak   int64
	allocs int64
}

const allocAlign = 256

func (a *allocator) init(d *hip.Device, s hip.Stream, limit int64) error {
	a.dev, a.stream = d, s
	free, total, err := d.MemGetInfo()
	if err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if limit <= 0 {
		margin := max(int64(total)/20, 256<<20)
		limit = int64(free) - margin
		if limit <= 0 {
			return fmt.Errorf("gpu: only %d MiB of %d MiB free: %w", free>>20, total>>20, tensor.ErrOutOfMemory)
		}
	}
	a.limit = limit
	if d.PoolsSupported {
		if p, err := d.DefaultPool(); err == nil && d.SetPoolReleaseThreshold(p, ^uint64(0)) == nil {
			a.pool, a.pooled = p, true
		}
	}
	return nil
}

func (a *allocator) alloc(n int64) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("gpu: allocation of %d bytes: %w", n, tensor.ErrOutOfMemory)
	}
	if n == 0 {
		return &Buffer{}, nil
	}
	size := (n + allocAlign - 1) / allocAlign * allocAlign
	a.mu.Lock()
	if a.used+size > a.limit {
		used := a.used
		a.mu.Unlock()
		return nil, fmt.Errorf("gpu: allocation of %s with %s of the %s cap in use: %w", mib(size), mib(used),
			mib(a.limit), tensor.ErrOutOfMemory)
	}
	a.used += size
	a.mu.Unlock()
	p, err := a.driverAlloc(uint64(size))
	if err != nil {
		// The pool may hold freed blocks the driver needs back.
		a.trim()
		p, err = a.driverAlloc(uint64(size))
	}
	if err == nil && a.pooled && a.overCap() {
		a.trim()
		if a.overCap() {
			a.driverFree(p)
			err = fmt.Errorf("pool reserves more than the cap after trimming (fragmentation)")
		}
	}
	if err != nil {
		a.mu.Lock()
		a.used -= size
		a.mu.Unlock()
		return nil, fmt.Errorf("gpu: allocation of %s: %w (%w)", mib(size), tensor.ErrOutOfMemory, err)
	}
	a.mu.Lock()
	a.peak = max(a.peak, a.used)
	a.allocs++
	a.mu.Unlock()
	return &Buffer{ptr: p, n: n, size: size}, nil
}

// room is how much more the cap lets be allocated now.
func (a *allocator) room() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.limit - a.used
}

func (a *allocator) overCap() bool {
	r, err := a.dev.PoolAttr(a.pool, hip.PoolReservedMemCurrent)
	return err == nil && int64(r) > a.limit
}

func (a *allocator) driverAlloc(n uint64) (uintptr, error) {
	if a.pooled {
		return a.dev.MallocAsync(n, a.stream)
	}
	return a.dev.Malloc(n)
}

func (a *allocator) driverFree(p uintptr) {
	if a.pooled {
		a.dev.FreeAsync(p, a.stream)
	} else {
		// hipFree/cuMemFree synchronise; queued work that reads p is done
		// before the memory is reused.
		a.dev.Free(p)
	}
}

func (a *allocator) free(b *Buffer) {
	if b == nil || b.freed.Load() || b.ptr == 0 || b.size == 0 {
		// Nothing the allocator handed out: empty buffers and views.
		if b != nil {
			b.freed.Store(true)
		}
		return
	}
	b.freed.Store(true)
	a.driverFree(b.ptr)
	a.mu.Lock()
	a.used -= b.size
	a.allocs--
	a.mu.Unlock()
}

func (a *allocator) trim() error {
	if err := a.dev.Sync(a.stream); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	if !a.pooled {
		return nil
	}
	if err := a.dev.TrimPool(a.pool, 0); err != nil {
		return fmt.Errorf("gpu: %w", err)
	}
	return nil
}

func (a *allocator) stats() Stats {
	a.mu.Lock()
	s := Stats{Limit: a.limit, InUse: a.used, Peak: a.peak, Allocs: a.allocs}
	a.mu.Unlock()
	if a.pooled {
		if r, err := a.dev.PoolAttr(a.pool, hip.PoolReservedMemCurrent); err == nil {
			s.Reserved = int64(r)
		}
	}
	return s
}

func (a *allocator) resetPeak() {
	a.mu.Lock()
	a.peak = a.used
	a.mu.Unlock()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// staging moves bytes between Go memory and the device through two pinned
// buffers used in turn, so copying into one overlaps the transfer of the
// other, and an upload returns as soon as its bytes are staged.
type staging struct {
	dev    *hip.Device
	stream hip.Stream
	mu     sync.Mutex
	bufs   [2]hip.HostMem
	evs    [2]hip.Event
	busy   [2]bool
	next   int
	err    error
}

const stageChunk = 8 << 20

func (s *staging) init(d *hip.Device, st hip.Stream) { s.dev, s.stream = d, st }

func (s *staging) ready() error {
	if s.bufs[0].Ptr != nil {
		return nil
	}
	for i := range s.bufs {
		h, err := s.dev.HostAlloc(stageChunk)
		if err != nil {
			return fmt.Errorf("gpu: pinned staging buffer: %w", err)
		}
		e, err := s.dev.NewEvent(false)
		if err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
		s.bufs[i], s.evs[i] = h, e
	}
	return nil
}

// slot waits until buffer i is free again.
func (s *staging) slot(i int) error {
	if s.busy[i] {
		if err := s.dev.EventSync(s.evs[i]); err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
		s.busy[i] = false
	}
	return nil
}

// chunks moves total bytes through the two staging buffers, stageChunk at
// a time: queue queues chunk [pos, pos+n) on buffer i once that buffer is
// free, the buffer is then marked busy until the stream passes the copy,
// and after (when set) runs. The caller holds s.mu.
func (s *staging) chunks(total int, queue, after func(i, pos, n int) error) error {
	if err := s.ready(); err != nil {
		return err
	}
	for pos := 0; pos < total; pos += stageChunk {
		n := min(stageChunk, total-pos)
		i := s.next
		s.next = 1 - s.next
		if err := s.slot(i); err != nil {
			return err
		}
		if err := queue(i, pos, n); err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
		if err := s.dev.Record(s.evs[i], s.stream); err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
		s.busy[i] = true
		if after != nil {
			if err := after(i, pos, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *staging) upload(dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chunks(len(src), func(i, pos, n int) error {
		copy(s.bufs[i].Bytes(), src[pos:pos+n])
		return s.dev.CopyH2DAsync(dst+uintptr(pos), s.bufs[i].Ptr, n, s.stream)
	}, nil)
}

// download copies src into dst; waiting runs once every copy is queued,
// before the host waits for the last.
func (s *staging) download(dst []byte, src uintptr, waiting func()) error {
	if len(dst) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Chunk k goes to buffer k%2; chunk k−1 is copied out while k transfers.
	prev, prevPos, prevN := -1, 0, 0
	drain := func() error {
		if prev < 0 {
			return nil
		}
		if err := s.slot(prev); err != nil {
			return err
		}
		copy(dst[prevPos:prevPos+prevN], s.bufs[prev].Bytes()[:prevN])
		return nil
	}
	err := s.chunks(len(dst), func(i, pos, n int) error {
		return s.dev.CopyD2HAsync(s.bufs[i].Ptr, src+uintptr(pos), n, s.stream)
	}, func(i, pos, n int) error {
		if err := drain(); err != nil {
			return err
		}
		prev, prevPos, prevN = i, pos, n
		return nil
	})
	if err != nil {
		return err
	}
	waiting()
	return drain()
}

func (s *staging) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.bufs {
		if s.bufs[i].Ptr != nil {
			s.slot(i)
			s.dev.HostFree(s.bufs[i])
			s.dev.DestroyEvent(s.evs[i])
			s.bufs[i] = hip.HostMem{}
		}
	}
}
