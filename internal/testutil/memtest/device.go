// Package memtest provides a simulated device for memory tests: a
// tensor.Backend with a fixed amount of "device" memory that allocates
// nothing real (buffers only count bytes; kernels do nothing).
package memtest

import (
	"fmt"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Device is a simulated GPU of Total bytes.
type Device struct {
	tensor.NoKernels
	name  string
	total int64

	mu     sync.Mutex
	used   int64
	peak   int64
	allocs int
	frees  int
	trims  int
}

// Buf is a Device allocation: a size and nothing else.
type Buf struct{ N int64 }

func (b *Buf) Bytes() int64 { return b.N }

// NewDevice is a simulated device with total bytes of memory.
func NewDevice(name string, total int64) *Device { return &Device{name: name, total: total} }

var _ tensor.Backend = (*Device)(nil)

func (d *Device) Name() string { return d.name }

// Alloc fails with tensor.ErrOutOfMemory beyond the device's memory, as a
// driver would.
func (d *Device) Alloc(n int64) (tensor.Buffer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n < 0 || d.used+n > d.total {
		return nil, fmt.Errorf("%s: device allocation of %d bytes with %d of %d used: %w", d.name, n, d.used, d.total, tensor.ErrOutOfMemory)
	}
	d.used += n
	d.peak = max(d.peak, d.used)
	d.allocs++
	return &Buf{N: n}, nil
}

func (d *Device) Free(b tensor.Buffer) {
	fb, ok := b.(*Buf)
	if !ok {
		panic(fmt.Sprintf("memtest: freeing a %T", b))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if fb.N < 0 {
		panic("memtest: double free")
	}
	d.used -= fb.N
	fb.N = -1
	d.frees++
}

// Trim counts calls (the simulated device has no pools).
func (d *Device) Trim() error {
	d.mu.Lock()
	d.trims++
	d.mu.Unlock()
	return nil
}

// Used, Peak, Allocs and Trims report the device's own counters.
func (d *Device) Used() int64 { d.mu.Lock(); defer d.mu.Unlock(); return d.used }
func (d *Device) Peak() int64 { d.mu.Lock(); defer d.mu.Unlock(); return d.peak }
func (d *Device) Allocs() int { d.mu.Lock(); defer d.mu.Unlock(); return d.allocs }
func (d *Device) Trims() int  { d.mu.Lock(); defer d.mu.Unlock(); return d.trims }

func (d *Device) check(b tensor.Buffer, off, n int64) error {
	fb, ok := b.(*Buf)
	if !ok {
		return fmt.Errorf("memtest: a %T is not this device's buffer", b)
	}
	if fb.N < 0 {
		return fmt.Errorf("memtest: use of a freed buffer")
	}
	if off < 0 || off+n > fb.N {
		return fmt.Errorf("memtest: %d bytes at %d outside a %d-byte buffer", n, off, fb.N)
	}
	return nil
}

func (d *Device) Upload(dst tensor.Buffer, off int64, src []byte) error {
	return d.check(dst, off, int64(len(src)))
}

func (d *Device) Download(dst []byte, src tensor.Buffer, off int64) error {
	return d.check(src, off, int64(len(dst)))
}
