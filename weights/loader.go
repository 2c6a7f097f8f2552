package weights

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Loading at disk speed. One goroutine reading a checkpoint is slow: every
// page it touches is a fault, or a copy it waits for, and a device upload
// waits for the read before it. A Loader splits each weight into pieces of
// at most LoadOptions.Chunk bytes and has several readers fill them at
// once, each read straight into its destination: host memory (the CPU's
// tensors, the pinned copy of streamed blocks), or one of a small ring of
// page-locked staging buffers whose upload runs on the device's copy
// stream while the readers go on (tensor.QueuedUploader). A buffer is
// refilled once its copy is done, so host memory stays bounded
// (LoadOptions.HostBytes) whatever the model's size. The values are those
// the sequential path (Checkpoint.Load, CheckpointSource.Fill) gives: the
// same conversions, element for element.

// LoadOptions size a Loader. Zero values take the defaults.
type LoadOptions struct {
	// Readers is how many goroutines read and convert at once (default:
	// DefaultReaders()).
	Readers int
	// Chunk is the most bytes one read handles, and each staging buffer's
	// size (default 8 MiB).
	Chunk int64
	// Staging is how many page-locked staging buffers device uploads go
	// through (default Readers + 4, so that readers rarely wait for a
	// copy).
	Staging int
}

// DefaultChunk is LoadOptions.Chunk's default.
const DefaultChunk = 8 << 20

// DefaultReaders is one reader a CPU, at most 16: past that the disk or
// the memory bus is the limit.
func DefaultReaders() int { return min(max(runtime.GOMAXPROCS(0), 1), 16) }

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Readers <= 0 {
		o.Readers = DefaultReaders()
	}
	if o.Chunk <= 0 {
		o.Chunk = DefaultChunk
	}
	o.Chunk = max(o.Chunk, 4096)
	if o.Staging <= 0 {
		o.Staging = o.Readers + 4
	}
	return o
}

// HostBytes is the most host memory a Loader holds: its staging buffers
// and each reader's read buffer. A weight that cannot be read in pieces
// (FP8 quantized at load, a LoRA-merged one) is made whole in a temporary
// buffer besides, as the sequential path makes it.
func (o LoadOptions) HostBytes() int64 {
	o = o.withDefaults()
	return int64(o.Staging+o.Readers) * o.Chunk
}

// Loader copies weights from a source into their destinations with
// several reader goroutines (see above). Copy and CopyToHost queue a
// weight and return at once (or when the queue is full); Finish waits for
// everything and stops the readers. After the first failure every piece
// not yet read is skipped and every Copy reports that failure, so an error
// stops the load promptly, once.
type Loader struct {
	src  Filler
	rf   RangeFiller // src's range filling, when it has it
	be   tensor.Backend
	host bool // be computes on host memory: buffers are filled in place
	up   tensor.QueuedUploader
	opts LoadOptions

	work    chan piece
	readers sync.WaitGroup
	stop    chan struct{} // closed at the first failure

	sending sync.RWMutex // held by queue while it sends, by Finish to close work

	mu       sync.Mutex
	err      error
	ring     *ring
	ringMade bool
	finished bool
}

// NewLoader starts a Loader that fills weights from src on be. Call
// Finish when done: it stops the readers.
func NewLoader(src Filler, be tensor.Backend, opts LoadOptions) *Loader {
	opts = opts.withDefaults()
	l := &Loader{src: src, be: be, host: tensor.IsHostBacked(be), opts: opts,
		work: make(chan piece, 4*opts.Readers), stop: make(chan struct{})}
	l.rf, _ = src.(RangeFiller)
	l.up, _ = tensor.As[tensor.QueuedUploader](be)
	l.readers.Add(opts.Readers)
	for range opts.Readers {
		go l.reader()
	}
	return l
}

// Copy is one weight being copied.
type Copy struct {
	l    *Loader
	w    Weight
	dst  tensor.Buffer // on the device
	off  int64
	host []byte // or host bytes

	pending sync.WaitGroup // pieces not yet read and queued
	mu      sync.Mutex
	dones   []func() error // its queued uploads
	err     error
}

// piece is part of a weight: elements [lo, hi) of part p, at byte at of
// the weight; whole (p < 0): the weight at once, through Fill.
type piece struct {
	c      *Copy
	p      int
	lo, hi int64
	at     int64
	elem   int64 // the most bytes an element takes, stored or converted
}

func (p piece) whole() bool { return p.p < 0 }

// Copy queues w's values into dst, a buffer of the Loader's backend, at
// byte offset off.
func (l *Loader) Copy(w Weight, dst tensor.Buffer, off int64) *Copy {
	if hb, ok := dst.(*tensor.HostBuffer); ok && l.host {
		return l.queue(&Copy{l: l, w: w, host: hb.Data()[off : off+w.Bytes()]})
	}
	return l.queue(&Copy{l: l, w: w, dst: dst, off: off})
}

// CopyToHost queues w's values into the host bytes dst (w.Bytes() of them).
func (l *Loader) CopyToHost(w Weight, dst []byte) *Copy {
	return l.queue(&Copy{l: l, w: w, host: dst[:w.Bytes()]})
}

func (l *Loader) queue(c *Copy) *Copy {
	l.sending.RLock()
	defer l.sending.RUnlock()
	l.mu.Lock()
	done, err := l.finished, l.err
	l.mu.Unlock()
	switch {
	case done:
		c.err = errors.New("weights: Copy after the loader finished")
		return c
	case err != nil:
		c.err = err
		return c
	}
	ps := l.pieces(c)
	c.pending.Add(len(ps))
	for _, p := range ps {
		l.work <- p
	}
	return c
}

// pieces splits c's weight: by part into ranges of at most Chunk bytes at
// every step, each a multiple of 64 elements (two readers never write one
// cache line), when the source can fill ranges; else one whole piece.
func (l *Loader) pieces(c *Copy) []piece {
	w := c.w
	size := 0
	ok := false
	if l.rf != nil {
		size, ok = l.rf.Ranged(w)
	}
	if !ok || size <= 0 {
		return []piece{{c: c, p: -1}}
	}
	per := max(64, (l.opts.Chunk/int64(size))&^63)
	var ps []piece
	at := int64(0)
	for i, part := range w.Parts {
		n := part.Numel()
		for lo := int64(0); lo < n; lo += per {
			hi := min(lo+per, n)
			ps = append(ps, piece{c: c, p: i, lo: lo, hi: hi, at: at + lo*int64(w.DType.Size()), elem: int64(size)})
		}
		at += n * int64(w.DType.Size())
	}
	return ps
}

// Wait waits for the weight's pieces to be read and their uploads done;
// the error is the weight's own, or the failure that stopped the load.
func (c *Copy) Wait() error {
	c.pending.Wait()
	c.mu.Lock()
	dones, err := c.dones, c.err
	c.mu.Unlock()
	for _, d := range dones {
		if derr := d(); derr != nil && err == nil {
			err = derr
		}
	}
	return err
}

func (c *Copy) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

func (c *Copy) uploaded(done func() error) {
	c.mu.Lock()
	c.dones = append(c.dones, done)
	c.mu.Unlock()
}

// fail records the load's first failure and stops it.
func (l *Loader) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		close(l.stop)
	}
}

// Err is the load's first failure.
func (l *Loader) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Loader) reader() {
	defer l.readers.Done()
	var r readerBufs
	for p := range l.work {
		if err := l.Err(); err != nil {
			p.c.fail(err) // skipped: the load has failed
		} else if err := l.read(p, &r); err != nil {
			l.fail(err)
			p.c.fail(l.Err())
		}
		p.c.pending.Done()
	}
}

// readerBufs are one reader's buffers, made at first use and grown as
// pieces need (up to Chunk bytes): the stored bytes of a piece being
// converted, and a piece's values where there is no staging ring. A small
// model's pieces are small, and each buffer made is memory the process
// must clear and fault in.
type readerBufs struct{ in, out []byte }

func (b *readerBufs) get(p *[]byte, n, chunk int64) []byte {
	if int64(len(*p)) < n {
		*p = make([]byte, min(max(n, 2*int64(len(*p))), max(n, chunk)))
	}
	return *p
}

// read fills piece p into its destination.
func (l *Loader) read(p piece, b *readerBufs) error {
	c := p.c
	if p.whole() {
		return l.readWhole(c)
	}
	n := (p.hi - p.lo) * int64(c.w.DType.Size())
	in := b.get(&b.in, (p.hi-p.lo)*p.elem, l.opts.Chunk)
	if c.host != nil {
		return l.rf.FillRange(c.w, p.p, p.lo, p.hi, c.host[p.at:p.at+n], in)
	}
	if r := l.staging(); r != nil {
		s, err := r.get(l.stop)
		if err != nil {
			return err
		}
		if err := l.rf.FillRange(c.w, p.p, p.lo, p.hi, s.data[:n], in); err != nil {
			r.put(s, nil)
			return err
		}
		return l.upload(r, s, c, p.at, s.data[:n])
	}
	// No staging: the backend uploads from the reader's own buffer.
	out := b.get(&b.out, n, l.opts.Chunk)[:n]
	if err := l.rf.FillRange(c.w, p.p, p.lo, p.hi, out, in); err != nil {
		return err
	}
	if err := l.be.Upload(c.dst, c.off+p.at, out); err != nil {
		return fmt.Errorf("weights: %s: upload: %w", c.w.Name, err)
	}
	return nil
}

// upload queues s's bytes b into c's destination at byte at of the weight
// and gives s back to the ring with the copy's completion.
func (l *Loader) upload(r *ring, s *slot, c *Copy, at int64, b []byte) error {
	done, err := l.up.UploadQueued(c.dst, c.off+at, b)
	if err != nil {
		r.put(s, nil)
		return fmt.Errorf("weights: %s: upload: %w", c.w.Name, err)
	}
	r.put(s, done)
	c.uploaded(done)
	return nil
}

// readWhole fills a weight that cannot be read in pieces: in place on the
// host, else made whole in a temporary buffer and uploaded through the
// staging buffers.
func (l *Loader) readWhole(c *Copy) error {
	if c.host != nil {
		return l.src.Fill(c.w, c.host)
	}
	if done, err := l.quantizeOnDevice(c); done {
		return err
	}
	tmp := make([]byte, c.w.Bytes())
	if err := l.src.Fill(c.w, tmp); err != nil {
		return err
	}
	r := l.staging()
	if r == nil {
		return l.be.Upload(c.dst, c.off, tmp)
	}
	for at := int64(0); at < int64(len(tmp)); at += l.opts.Chunk {
		b := tmp[at:min(at+l.opts.Chunk, int64(len(tmp)))]
		s, err := r.get(l.stop)
		if err != nil {
			return err
		}
		copy(s.data, b)
		if err := l.upload(r, s, c, at, s.data[:len(b)]); err != nil {
			return err
		}
	}
	return nil
}

// staging is the ring of staging buffers, made at the first device piece;
// nil when the backend has no queued uploads or no page-locked memory.
func (l *Loader) staging() *ring {
	if l.up == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ringMade {
		l.ringMade = true
		// Without page-locked memory the uploads go in line.
		l.ring, _ = newRing(l.up, l.opts.Staging, l.opts.Chunk)
	}
	return l.ring
}

// Finish waits for every queued weight, stops the readers and frees the
// staging buffers; it returns the load's first failure. A Loader is done
// after Finish (later calls return the same error).
func (l *Loader) Finish() error {
	l.mu.Lock()
	if l.finished {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.finished = true
	l.mu.Unlock()
	l.sending.Lock()
	close(l.work)
	l.sending.Unlock()
	l.readers.Wait()
	l.mu.Lock()
	r := l.ring
	l.mu.Unlock()
	if r != nil {
		if err := r.close(); err != nil {
			l.fail(err)
		}
	}
	return l.Err()
}

// ring is the staging buffers: page-locked, each with the completion of
// the copy last queued from it.
type ring struct {
	pin  tensor.PinnedUploader
	free chan *slot
	all  []*slot
}

type slot struct {
	hb   *tensor.HostBuffer
	data []byte
	done func() error // the copy last queued from it, until waited for
}

// newRing allocates n page-locked buffers of size bytes; fewer when
// page-locked memory runs out (at least one, else an error).
func newRing(pin tensor.PinnedUploader, n int, size int64) (*ring, error) {
	r := &ring{pin: pin, free: make(chan *slot, n)}
	for range n {
		hb, err := pin.AllocPinned(size)
		if err != nil {
			if len(r.all) == 0 {
				return nil, err
			}
			break
		}
		s := &slot{hb: hb, data: hb.Data()}
		r.all = append(r.all, s)
		r.free <- s
	}
	return r, nil
}

var errStopped = errors.New("weights: load stopped")

// get takes a free buffer, waiting for its last copy to be done.
func (r *ring) get(stop <-chan struct{}) (*slot, error) {
	var s *slot
	select {
	case s = <-r.free:
	case <-stop:
		return nil, errStopped
	}
	if s.done != nil {
		err := s.done()
		s.done = nil
		if err != nil {
			r.free <- s
			return nil, err
		}
	}
	return s, nil
}

// put gives s back with the completion of the copy queued from it (nil:
// none).
func (r *ring) put(s *slot, done func() error) {
	s.done = done
	r.free <- s
}

// close waits for every copy and frees the buffers (all of them free:
// the readers have stopped).
func (r *ring) close() error {
	var first error
	for _, s := range r.all {
		if s.done != nil {
			if err := s.done(); err != nil && first == nil {
				first = err
			}
			s.done = nil
		}
		if err := r.pin.FreePinned(s.hb); err != nil && first == nil {
			first = err
		}
	}
	r.all = nil
	return first
}
