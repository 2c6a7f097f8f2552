package memory

import (
	"fmt"
	"strings"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Backend is a tensor.Backend kept within a Budget: it counts the bytes of
// every live allocation, refuses one that would take the total above the
// cap before the inner backend sees it, and attributes what models hold to
// them by name. Every kernel is the inner backend's: buffers are the inner
// backend's own, so its kernels see nothing different.
type Backend struct {
	tensor.Backend

	mu      sync.Mutex
	budget  Budget
	live    map[tensor.Buffer]*allocation
	inUse   int64
	peak    int64
	owners  map[string]int64
	order   []string // owners in the order they appeared
	allocs  int64
	refused int64
}

type allocation struct {
	bytes int64
	owner string
	seq   int64 // its place in the allocation sequence (Mark)
}

// Budgeted wraps be so that its live allocations never exceed b.Cap.
// Allocate everything on the result (not on be), so that it is counted.
func Budgeted(be tensor.Backend, b Budget) *Backend {
	return &Backend{Backend: be, budget: b, live: map[tensor.Buffer]*allocation{}, owners: map[string]int64{}}
}

var (
	_ tensor.Backend  = (*Backend)(nil)
	_ tensor.Budgeted = (*Backend)(nil)
)

// OOMError is a refused allocation. It wraps tensor.ErrOutOfMemory.
type OOMError struct {
	Device                string
	Requested, InUse, Cap int64
	// Injected names the fault setting that caused it, if any.
	Injected string
}

func (e *OOMError) Error() string {
	if e.Injected != "" {
		return fmt.Sprintf("%s: allocation of %s failed by injected fault %s: %v", e.Device, FormatBytes(e.Requested), e.Injected, tensor.ErrOutOfMemory)
	}
	return fmt.Sprintf("%s: allocating %s with %s in use would exceed the %s cap: %v",
		e.Device, FormatBytes(e.Requested), FormatBytes(e.InUse), FormatBytes(e.Cap), tensor.ErrOutOfMemory)
}

func (e *OOMError) Unwrap() error { return tensor.ErrOutOfMemory }

// Alloc allocates on the inner backend when the cap allows it.
func (m *Backend) Alloc(n int64) (tensor.Buffer, error) {
	m.mu.Lock()
	if n < 0 || m.inUse+n > m.budget.Cap {
		m.refused++
		err := &OOMError{Device: m.deviceName(), Requested: n, InUse: m.inUse, Cap: m.budget.Cap}
		m.mu.Unlock()
		return nil, err
	}
	// Count before the inner call so that concurrent allocations cannot
	// overshoot together; undo on failure.
	m.inUse += n
	m.mu.Unlock()

	buf, err := m.Backend.Alloc(n)

	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.inUse -= n
		return nil, err
	}
	m.allocs++
	m.live[buf] = &allocation{bytes: n, seq: m.allocs}
	m.peak = max(m.peak, m.inUse)
	return buf, nil
}

// Free releases a buffer and its count. A buffer this Backend did not
// allocate is passed to the inner backend uncounted.
func (m *Backend) Free(buf tensor.Buffer) {
	m.mu.Lock()
	if a, ok := m.live[buf]; ok {
		delete(m.live, buf)
		m.inUse -= a.bytes
		if a.owner != "" {
			m.owners[a.owner] -= a.bytes
		}
	}
	m.mu.Unlock()
	m.Backend.Free(buf)
}

// Charge attributes the storage of ts to owner ("transformer", "vae", …)
// until it is freed; a storage already charged moves to owner.
func (m *Backend) Charge(owner string, ts ...*tensor.Tensor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addOwner(owner)
	for _, t := range ts {
		if t == nil {
			continue
		}
		a, ok := m.live[t.Buffer()]
		if !ok || a.owner == owner {
			continue
		}
		if a.owner != "" {
			m.owners[a.owner] -= a.bytes
		}
		a.owner = owner
		m.owners[owner] += a.bytes
	}
}

// Mark is the current point in the allocation sequence, for ChargeSince.
func (m *Backend) Mark() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.allocs
}

// ChargeSince charges to owner every live allocation made after mark that
// is charged to nobody: the weights of a model built between Mark and
// ChargeSince by code that does not expose its tensors, when nothing else
// allocated meanwhile.
func (m *Backend) ChargeSince(owner string, mark int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addOwner(owner)
	for _, a := range m.live {
		if a.seq > mark && a.owner == "" {
			a.owner = owner
			m.owners[owner] += a.bytes
		}
	}
}

// AddOwner makes owner appear in Stats appear in Stats (with 0 B until something is
// charged to it).
func (m *Backend) AddOwner(owner string) {
	m.mu.Lock()
	m.addOwner(owner)
	m.mu.Unlock()
}

func (m *Backend) addOwner(owner string) {
	if _, ok := m.owners[owner]; !ok {
		m.owners[owner] = 0
		m.order = append(m.order, owner)
	}
}

// Held is what owner holds now.
func (m *Backend) Held(owner string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.owners[owner]
}

// Budget is the budget in force.
func (m *Backend) Budget() Budget {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.budget
}

// SetBudget changes the budget; live allocations above a lowered cap stay
// (new ones are refused until enough is freed).
func (m *Backend) SetBudget(b Budget) {
	m.mu.Lock()
	m.budget = b
	m.mu.Unlock()
}

// Available is the room left under the cap.
func (m *Backend) Available() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(0, m.budget.Cap-m.inUse)
}

// Room is what is left under the cap for activations once reserve bytes
// are set aside (scratch that the budget does not plan, such as the conv3d
// chain's). When nothing is left it is an error wrapping
// tensor.ErrOutOfMemory that says what holds the cap, never a negative
// amount to plan with or log.
func (m *Backend) Room(reserve int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	room := m.budget.Cap - m.inUse - max(0, reserve)
	if room <= 0 {
		return 0, fmt.Errorf("memory: the %s cap of %s leaves nothing for activations (%s in use, %s set aside for scratch); raise --vram-limit: %w",
			FormatBytes(m.budget.Cap), m.deviceName(), FormatBytes(m.inUse), FormatBytes(max(0, reserve)), tensor.ErrOutOfMemory)
	}
	return room, nil
}

// ResetPeak starts a new peak measurement at the current use.
func (m *Backend) ResetPeak() {
	m.mu.Lock()
	m.peak = m.inUse
	m.mu.Unlock()
}

// Trim returns the cached pool memory of the layers under the budget to
// the driver, when one has pools.
func (m *Backend) Trim() error { return tensor.Trim(m.Backend) }

// Unwrap is the inner backend.
func (m *Backend) Unwrap() tensor.Backend { return m.Backend }

func (m *Backend) deviceName() string {
	if m.budget.Device != "" {
		return m.budget.Device
	}
	return m.Backend.Name()
}

// Holding is what one owner holds.
type Holding struct {
	Owner string
	Bytes int64
}

// Stats is a snapshot of a Backend's accounting.
type Stats struct {
	Device           string
	Cap, InUse, Peak int64
	// Owners in the order they appeared; memory charged to nobody
	// (activations, scratch) is InUse less their sum.
	Owners  []Holding
	Allocs  int64 // allocations made
	Refused int64 // allocations refused by the cap
}

// Stats returns the current accounting.
func (m *Backend) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Device: m.deviceName(), Cap: m.budget.Cap, InUse: m.inUse, Peak: m.peak, Allocs: m.allocs, Refused: m.refused}
	for _, o := range m.order {
		s.Owners = append(s.Owners, Holding{o, m.owners[o]})
	}
	return s
}

// String is the one-line report:
// "device X: cap 20.0 GiB, in use 3.1 GiB, peak 7.9 GiB; transformer 0 B, vae 1.2 GiB".
func (s Stats) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "device %s: cap %s, in use %s, peak %s", s.Device, FormatBytes(s.Cap), FormatBytes(s.InUse), FormatBytes(s.Peak))
	for i, h := range s.Owners {
		fmt.Fprintf(&sb, "%s%s %s", listSep(i), h.Owner, FormatBytes(h.Bytes))
	}
	return sb.String()
}

// listSep is what goes before owner i of a stats line: "; " before the
// first, ", " between.
func listSep(i int) string {
	if i == 0 {
		return "; "
	}
	return ", "
}

// String is Stats().String().
func (m *Backend) String() string { return m.Stats().String() }
