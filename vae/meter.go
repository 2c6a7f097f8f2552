package vae

import (
	"fmt"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Meter wraps a backend and counts the bytes of its live allocations and
// their peak. With a cap, an allocation that would take the live bytes above
// it fails with an error wrapping tensor.ErrOutOfMemory, as a budgeted
// device would. Tensors made through a Meter must be used through it.
type Meter struct {
	tensor.Backend
	mu               sync.Mutex
	live, peak, cap  int64
	allocs, failures int
}

// NewMeter wraps be; capBytes ≤ 0 means no cap.
func NewMeter(be tensor.Backend, capBytes int64) *Meter { return &Meter{Backend: be, cap: capBytes} }

func (m *Meter) Alloc(n int64) (tensor.Buffer, error) {
	m.mu.Lock()
	if m.cap > 0 && m.live+n > m.cap {
		m.failures++
		live := m.live
		m.mu.Unlock()
		return nil, fmt.Errorf("meter: %d bytes with %d live would pass the cap of %d: %w", n, live, m.cap, tensor.ErrOutOfMemory)
	}
	m.live += n
	m.peak = max(m.peak, m.live)
	m.allocs++
	m.mu.Unlock()
	b, err := m.Backend.Alloc(n)
	if err != nil {
		m.mu.Lock()
		m.live -= n
		m.mu.Unlock()
	}
	return b, err
}

func (m *Meter) Free(b tensor.Buffer) {
	m.mu.Lock()
	m.live -= b.Bytes()
	m.mu.Unlock()
	m.Backend.Free(b)
}

// HostBacked forwards the wrapped backend's answer.
func (m *Meter) HostBacked() bool {
	hb, ok := m.Backend.(tensor.HostBacked)
	return ok && hb.HostBacked()
}

// Live is the bytes allocated and not freed.
func (m *Meter) Live() int64 { m.mu.Lock(); defer m.mu.Unlock(); return m.live }

// Peak is the most bytes live at once since the last ResetPeak.
func (m *Meter) Peak() int64 { m.mu.Lock(); defer m.mu.Unlock(); return m.peak }

// ResetPeak sets the peak to the bytes live now.
func (m *Meter) ResetPeak() { m.mu.Lock(); m.peak = m.live; m.mu.Unlock() }

// SetCap changes the cap (≤ 0: none).
func (m *Meter) SetCap(c int64) { m.mu.Lock(); m.cap = c; m.mu.Unlock() }

// Failures counts allocations refused by the cap.
func (m *Meter) Failures() int { m.mu.Lock(); defer m.mu.Unlock(); return m.failures }
