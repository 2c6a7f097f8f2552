package gpu

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// Weight streaming: page-locked host memory and uploads on a second
// stream, so that copying the next block's weights overlaps the compute of
// the current one.

// transfers is the per-backend state of the copy stream and the pinned
// allocations.
type transfers struct {
	mu     sync.Mutex
	stream hip.Stream
	pinned map[uintptr]hip.HostMem // by start address
	err    error
}

var transferState sync.Map // *Backend → *transfers

func (b *Backend) transfers() *transfers {
	v, _ := transferState.LoadOrStore(b, &transfers{pinned: map[uintptr]hip.HostMem{}})
	return v.(*transfers)
}

// AllocPinned returns n bytes of page-locked host memory as a host buffer;
// UploadAsync copies out of it without staging. Free it with FreePinned.
func (b *Backend) AllocPinned(n int64) (*tensor.HostBuffer, error) {
	if n <= 0 {
		return tensor.HostBufferOf(nil), nil
	}
	h, err := b.dev.HostAlloc(int(n))
	if err != nil {
		return nil, fmt.Errorf("gpu: %d MiB of pinned host memory: %w", n>>20, err)
	}
	t := b.transfers()
	t.mu.Lock()
	t.pinned[uintptr(h.Ptr)] = h
	t.mu.Unlock()
	return tensor.HostBufferOf(h.Bytes()), nil
}

// FreePinned releases memory from AllocPinned after the copies queued from
// it are done.
func (b *Backend) FreePinned(hb *tensor.HostBuffer) error {
	data := hb.Data()
	if len(data) == 0 {
		return nil
	}
	t := b.transfers()
	t.mu.Lock()
	h, ok := t.pinned[uintptr(unsafe.Pointer(&data[0]))]
	delete(t.pinned, uintptr(unsafe.Pointer(&data[0])))
	s := t.stream
	t.mu.Unlock()
	if !ok {
		return fmt.Errorf("gpu: FreePinned of memory AllocPinned did not return")
	}
	if s != 0 {
		if err := b.dev.Sync(s); err != nil {
			return fmt.Errorf("gpu: %w", err)
		}
	}
	return b.dev.HostFree(h)
}

// isPinned reports whether src lies inside one pinned allocation.
func (t *transfers) isPinned(src []byte) bool {
	if len(src) == 0 {
		return true
	}
	p := uintptr(unsafe.Pointer(&src[0]))
	for start, h := range t.pinned {
		if p >= start && p+uintptr(len(src)) <= start+uintptr(h.N) {
			return true
		}
	}
	return false
}

// UploadAsync queues a copy of src into dst at byte offset off on the
// backend's copy stream, after the work queued so far on the compute
// stream (so dst, freshly allocated in stream order, is free to write),
// and returns wait, which makes the compute stream's later work wait for
// the copy. src must stay unchanged until the copy is done. Memory not
// from AllocPinned is uploaded on the compute stream instead (staged; wait
// then does nothing).
func (b *Backend) UploadAsync(dst tensor.Buffer, off int64, src []byte) (wait func() error, err error) {
	done, queued, err := b.queueUpload(dst, off, src)
	if err != nil || !queued {
		return func() error { return nil }, err
	}
	var once sync.Once
	return func() error {
		var werr error
		once.Do(func() {
			werr = b.dev.WaitEvent(b.stream, done)
			// The wait is queued; destroying the event now releases it
			// once it has completed.
			b.dev.DestroyEvent(done)
			if werr != nil {
				werr = fmt.Errorf("gpu: %w", werr)
			}
		})
		return werr
	}, nil
}

// UploadQueued queues a copy of src into dst at byte offset off on the
// copy stream, after the work queued so far on the compute stream, and
// returns done, which waits on the host for the copy (tensor.QueuedUploader:
// the weight loader refills a staging buffer once its copy is done). Memory
// not from AllocPinned is uploaded on the compute stream before it returns.
func (b *Backend) UploadQueued(dst tensor.Buffer, off int64, src []byte) (done func() error, err error) {
	ev, queued, err := b.queueUpload(dst, off, src)
	if err != nil || !queued {
		return func() error { return nil }, err
	}
	var once sync.Once
	var derr error
	return func() error {
		once.Do(func() {
			derr = b.waitEvent(ev)
			b.dev.DestroyEvent(ev)
			if derr != nil {
				derr = fmt.Errorf("gpu: %w", derr)
			}
		})
		return derr
	}, nil
}

// waitEvent waits on the host for e by polling with a growing sleep: an
// event synchronize spins a CPU core (the driver's default for a context
// with fewer GPUs than cores), and a loader's readers waiting for their
// staging buffers would spin every core they read with.
func (b *Backend) waitEvent(e hip.Event) error {
	sleep := 20 * time.Microsecond
	for {
		done, err := b.dev.EventDone(e)
		if done || err != nil {
			return err
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 500*time.Microsecond)
	}
}

// queueUpload queues the copy of a pinned src on the copy stream behind an
// event of the compute stream and returns an event recorded after it;
// queued is false when src was uploaded in line instead (not pinned, no
// copy stream, or nothing to copy).
func (b *Backend) queueUpload(dst tensor.Buffer, off int64, src []byte) (done hip.Event, queued bool, err error) {
	db, ok := dst.(*Buffer)
	if !ok {
		return 0, false, fmt.Errorf("gpu: upload into a %T", dst)
	}
	if off < 0 || off+int64(len(src)) > db.n {
		return 0, false, fmt.Errorf("gpu: upload of %d bytes at %d into %d", len(src), off, db.n)
	}
	if len(src) == 0 {
		return 0, false, nil
	}
	db.uploaded()
	t := b.transfers()
	t.mu.Lock()
	pinned := t.isPinned(src)
	if pinned && t.stream == 0 && t.err == nil {
		t.stream, t.err = b.dev.NewStream()
	}
	cs, serr := t.stream, t.err
	t.mu.Unlock()
	if !pinned || serr != nil {
		return 0, false, b.Upload(dst, off, src)
	}
	ready, err := b.dev.NewEvent(false)
	if err != nil {
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	defer b.dev.DestroyEvent(ready)
	if err := b.dev.Record(ready, b.stream); err != nil {
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	if err := b.dev.WaitEvent(cs, ready); err != nil {
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	if err := b.dev.CopyH2DAsync(db.ptr+uintptr(off), unsafe.Pointer(&src[0]), len(src), cs); err != nil {
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	done, err = b.dev.NewEvent(false)
	if err != nil {
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	if err := b.dev.Record(done, cs); err != nil {
		b.dev.DestroyEvent(done)
		return 0, false, fmt.Errorf("gpu: %w", err)
	}
	return done, true, nil
}
