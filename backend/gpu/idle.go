package gpu

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/framepack-go/framepack/hip"
)

// idleMeter measures how long the backend's stream stands empty because
// the host waited on it (a Sync, a download): from the moment the stream
// finishes the work the host waited for to the moment the host queues the
// next work. A timing event is recorded on the stream before each such
// wait and another before the next work, and the device's clock gives the
// time between them. Launch gaps inside a run of queued work (a host
// slower than the kernels) are not seen: the stream never waits on the
// host there.
type idleMeter struct {
	mu      sync.Mutex
	dev     *hip.Device
	stream  hip.Stream
	drained hip.Event      // recorded before a host wait; 0 when none is open
	pending atomic.Bool    // drained != 0: lets queued skip the lock on every launch
	open    [][2]hip.Event // (drained, resumed) pairs not yet read
	spare   []hip.Event
	total   time.Duration
	err     error // the first event error: the meter stops measuring
}

func (m *idleMeter) init(d *hip.Device, s hip.Stream) { m.dev, m.stream = d, s }

func (m *idleMeter) event() (hip.Event, error) {
	if n := len(m.spare); n > 0 {
		e := m.spare[n-1]
		m.spare = m.spare[:n-1]
		return e, nil
	}
	return m.dev.NewEvent(true)
}

// waiting marks the end of the queued work, before the host waits for it.
// A second wait before any new work keeps the first mark.
func (m *idleMeter) waiting() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drained == 0 {
		m.drained = m.mark()
		m.pending.Store(m.drained != 0)
	}
}

// queued marks the start of new work, before it is queued: it closes the
// interval a wait opened.
func (m *idleMeter) queued() {
	if !m.pending.Load() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drained == 0 {
		return
	}
	if e := m.mark(); e != 0 {
		m.open = append(m.open, [2]hip.Event{m.drained, e})
	}
	m.drained = 0
	m.pending.Store(false)
}

// mark records an event on the stream now; 0 once an event has failed
// (the meter then stops). Called with m.mu held.
func (m *idleMeter) mark() hip.Event {
	if m.err != nil {
		return 0
	}
	e, err := m.event()
	if err == nil {
		err = m.dev.Record(e, m.stream)
	}
	if err != nil {
		m.err = err
		return 0
	}
	return e
}

// idle is the time measured up to now. It waits for the stream to pass
// the ends of the intervals already queued (not for the work after them),
// and an interval still open — the stream empty, the host not yet back —
// is cut here: its part so far counts now, the rest later.
func (m *idleMeter) idle() (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.drained != 0 {
		if cut := m.mark(); cut != 0 {
			m.open = append(m.open, [2]hip.Event{m.drained, cut})
			m.drained = m.mark()
			m.pending.Store(m.drained != 0)
		}
	}
	for _, p := range m.open {
		if m.err != nil {
			break
		}
		if err := m.dev.EventSync(p[1]); err != nil {
			m.err = err
			break
		}
		ms, err := m.dev.Elapsed(p[0], p[1])
		if err != nil {
			m.err = err
			break
		}
		m.total += time.Duration(float64(ms) * float64(time.Millisecond))
		m.spare = append(m.spare, p[0], p[1])
	}
	m.open = m.open[:0]
	return m.total, m.err
}

func (m *idleMeter) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.open {
		m.spare = append(m.spare, p[0], p[1])
	}
	if m.drained != 0 {
		m.spare = append(m.spare, m.drained)
	}
	for _, e := range m.spare {
		m.dev.DestroyEvent(e)
	}
	m.open, m.spare, m.drained = nil, nil, 0
	m.pending.Store(false)
}

// QueueIdle is how long the stream has stood empty while the host waited
// on it since the backend opened (tensor.QueueIdler).
func (b *Backend) QueueIdle() (time.Duration, error) { return b.idle.idle() }
