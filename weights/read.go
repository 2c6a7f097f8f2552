package weights

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/framepack-go/framepack/tensor"
)

// Reading a range of a tensor with pread, for the parallel loads
// (loader.go). A read through the mapping costs one page fault per page,
// which makes one reader slow; pread copies from the page cache in the
// kernel, needs no pages of the mapping (nothing to release after), and a
// file cut short after it was opened is a short read with an error, where
// the mapping would fault the process.

// RangeFiller is a Filler that can write a weight piece by piece, so that
// several goroutines fill one weight at once.
type RangeFiller interface {
	Filler
	// Ranged reports whether w can be filled by FillRange and the most
	// bytes one element takes at any step (as stored, rounded, in w's
	// dtype), which sizes the pieces. A weight it cannot split, or whose
	// check fails (Make then reports why), is not ranged.
	Ranged(w Weight) (elemBytes int, ok bool)
	// FillRange writes elements [lo, hi) of part p of w into dst, in
	// w.DType rounded through w.Round, exactly as Fill writes them. buf is
	// scratch of at least (hi−lo)·elemBytes bytes.
	FillRange(w Weight, p int, lo, hi int64, dst, buf []byte) error
}

var _ RangeFiller = (*CheckpointSource)(nil)

// Ranged implements RangeFiller: every part present with its shape, in a
// dtype that converts without a tensor-wide step (FP8 codes with their
// scales do not).
func (s *CheckpointSource) Ranged(w Weight) (int, bool) {
	if w.FP8 != NotFP8 || len(w.Shape) == 0 {
		return 0, false
	}
	size := max(w.DType.Size(), w.Round.Size())
	for _, p := range w.Parts {
		if len(p.Shape) == 0 || (p.Optional && !s.Ck.Has(p.Name)) {
			return 0, false
		}
		e, _, _, err := s.Ck.checked(p.Name, p.Shape, w.DType)
		if err != nil || e.dt == tensor.F8E4M3 {
			return 0, false
		}
		size = max(size, e.dt.Size())
	}
	return size, true
}

// FillRange implements RangeFiller.
func (s *CheckpointSource) FillRange(w Weight, p int, lo, hi int64, dst, buf []byte) error {
	part := w.Parts[p]
	return s.Ck.readRange(part.Name, part.Shape, w.DType, w.Round, lo, hi, dst, buf)
}

// readRange writes elements [lo, hi) of tensor name (checked as put checks
// it) into dst as dtype dt, rounded through round: read from the file with
// pread, straight into dst when nothing changes, else through buf (the
// stored bytes) and converted.
func (c *Checkpoint) readRange(name string, shape []int, dt, round tensor.DType, lo, hi int64, dst, buf []byte) error {
	e, sh, _, err := c.checked(name, shape, dt)
	if err != nil {
		return err
	}
	if dt == tensor.Invalid {
		dt = e.dt
	}
	from := e.dt
	n := (e.end - e.begin) / int64(from.Size())
	if lo < 0 || hi > n || lo > hi {
		return fmt.Errorf("weights: %s: tensor %q: elements [%d, %d) of %d", sh.path, e.name, lo, hi, n)
	}
	out := dst[:(hi-lo)*int64(dt.Size())]
	f, err := c.file(sh)
	if err != nil {
		return err
	}
	at := e.begin + lo*int64(from.Size())
	if from == dt && !rounds(round, from, dt) {
		return readFull(f, out, at, sh.path, e)
	}
	in := buf[:(hi-lo)*int64(from.Size())]
	if err := readFull(f, in, at, sh.path, e); err != nil {
		return err
	}
	convertSerial(out, dt, round, in, from)
	return nil
}

// file is the open file of sh (mapped by checked before).
func (c *Checkpoint) file(sh *shard) (*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || sh.file == nil {
		return nil, fmt.Errorf("weights: %s: checkpoint is closed", c.where)
	}
	return sh.file, nil
}

// readFull reads len(b) bytes at off of tensor e's file.
func readFull(f *os.File, b []byte, off int64, path string, e *entry) error {
	n, err := f.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		end := off + int64(n)
		return fmt.Errorf("weights: %s: tensor %q: the file ends at byte %d, inside the tensor's data [%d, %d) (truncated since it was opened?)",
			path, e.name, end, e.begin, e.end)
	}
	return fmt.Errorf("weights: %s: tensor %q: reading %d bytes at %d: %v", path, e.name, len(b), off, err)
}

// convertSerial is convertThrough on the calling goroutine only (the
// parallel loads split the work themselves), rounding through a small
// stack buffer.
func convertSerial(dst []byte, to, round tensor.DType, src []byte, from tensor.DType) {
	if !aligned(src, from.Size()) {
		src = append(tensor.NewHostBuffer(int64(len(src))).Data()[:0], src...)
	}
	n := len(src) / from.Size()
	if !rounds(round, from, to) {
		convertRange(dst, to, src, from, 0, n)
		return
	}
	var tmp [2048]float32 // aligned for any dtype
	mid := tensor.BytesOf(tmp[:])
	per := len(mid) / round.Size()
	for lo := 0; lo < n; lo += per {
		k := min(per, n-lo)
		m := mid[:k*round.Size()]
		convertRange(m, round, src[lo*from.Size():(lo+k)*from.Size()], from, 0, k)
		convertRange(dst[lo*to.Size():(lo+k)*to.Size()], to, m, round, 0, k)
	}
}
