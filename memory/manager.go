package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// Manager places models on one budgeted device: it loads a model resident
// or streamed beside the preserved amount, evicts the least recently used
// others when a model needs room, unloads completely (every byte the model
// was charged freed, then the pools trimmed), and logs every move.
type Manager struct {
	mb  *Backend
	log *slog.Logger

	mu     sync.Mutex
	models map[string]*managed
	order  []string
	tick   int64
}

type managed struct {
	name  string
	p     Placeable
	state State
	used  int64 // tick of the last load, for LRU eviction
	// loading: LoadAsync is building it; nothing else may move it.
	loading bool
}

// NewManager manages models on mb, logging to log (nil: slog.Default()).
func NewManager(mb *Backend, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{mb: mb, log: log, models: map[string]*managed{}}
}

// Backend is the budgeted device backend.
func (m *Manager) Backend() *Backend { return m.mb }

// Add registers a model under name (its owner name in Stats), in state st
// (where it is now; normally OnHost).
func (m *Manager) Add(name string, p Placeable, st State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.models[name]; dup {
		return fmt.Errorf("memory: model %s registered twice", name)
	}
	m.mb.AddOwner(name)
	m.models[name] = &managed{name: name, p: p, state: st}
	m.order = append(m.order, name)
	return nil
}

// State is where a registered model is.
func (m *Manager) State(name string) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if md := m.models[name]; md != nil {
		return md.state
	}
	return Unloaded
}

// with runs f on the model registered as name, under the manager's lock.
func (m *Manager) with(name string, f func(md *managed) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	md := m.models[name]
	if md == nil {
		return fmt.Errorf("memory: no model %s registered", name)
	}
	return f(md)
}

// Load makes name resident, evicting other models (least recently used
// first, never those in keep) when the budget lacks room.
func (m *Manager) Load(name string, keep ...string) error {
	return m.with(name, func(md *managed) error {
		need := md.p.DeviceBytes() - m.mb.Held(name)
		if err := m.makeRoom(need, append(keep, name), "load "+name); err != nil {
			return err
		}
		return m.move(md, Resident, 0)
	})
}

// LoadAsync makes name resident on another goroutine, without holding the
// Manager while it builds, so that other models are loaded and run
// meanwhile. It evicts nothing: it starts only when name fits beside what
// the device holds now with reserve bytes left over (what the models
// still to load beside it and their work need), and reports false
// otherwise. wait returns the load's error once it is done; until then
// name cannot be moved or evicted. The budget is never exceeded: an
// allocation that would is refused and fails the load.
func (m *Manager) LoadAsync(name string, reserve int64) (wait func() error, started bool) {
	m.mu.Lock()
	md := m.models[name]
	if md == nil || md.loading || md.state == Resident || md.state == Streamed {
		m.mu.Unlock()
		return nil, false
	}
	need := md.p.DeviceBytes() - m.mb.Held(name)
	if need+max(0, reserve) > m.mb.Available() {
		m.mu.Unlock()
		return nil, false
	}
	md.loading = true
	from := md.state
	m.mu.Unlock()
	m.log.Info(fmt.Sprintf("memory: loading %s (%s) in the background beside the other stages (%s free, %s kept for them)",
		name, FormatBytes(md.p.DeviceBytes()), FormatBytes(m.mb.Available()), FormatBytes(max(0, reserve))), "model", name)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		perr := md.p.Place(Resident, 0)
		m.mu.Lock()
		defer m.mu.Unlock()
		md.loading = false
		if perr != nil {
			err = fmt.Errorf("memory: moving %s from %s to %s: %w", name, from, Resident, perr)
			return
		}
		md.state = Resident
		m.tick++
		md.used = m.tick
		m.log.Debug(fmt.Sprintf("memory: %s %s → %s in the background, uploaded %s; %s", name, from, Resident,
			FormatBytes(m.mb.Held(name)), m.mb.Stats()), "model", name, "from", from.String(), "to", Resident.String())
	}()
	return func() error { <-done; return err }, true
}

// LoadPreserving places name as FramePack places the transformer: resident
// when it fits with the preserved amount still free, otherwise streamed
// with the part kept on the device filling the budget up to the preserved
// amount. Other models not in keep are evicted (least recently used first)
// as long as that lets more of it stay.
func (m *Manager) LoadPreserving(name string, keep ...string) error {
	return m.with(name, func(md *managed) error {
		preserve := m.mb.Budget().Preserve
		need := md.p.DeviceBytes() - m.mb.Held(name) + preserve
		m.evict(need, append(keep, name), "load "+name)
		limit := m.mb.Available() + m.mb.Held(name) - preserve
		if md.p.DeviceBytes() <= limit {
			return m.move(md, Resident, 0)
		}
		m.log.Info(fmt.Sprintf("memory: %s (%s) does not fit beside %s preserved; streaming it with %s kept on the device",
			name, FormatBytes(md.p.DeviceBytes()), FormatBytes(preserve), FormatBytes(max(0, limit))),
			"model", name, "bytes", md.p.DeviceBytes(), "limit", max(0, limit))
		return m.move(md, Streamed, max(0, limit))
	})
}

// Offload moves name to the host, freeing every byte it holds on the
// device, and trims the pools.
func (m *Manager) Offload(name string) error { return m.leave(name, OnHost) }

// Unload frees everything name holds, on the device and the host, and
// trims the pools.
func (m *Manager) Unload(name string) error { return m.leave(name, Unloaded) }

func (m *Manager) leave(name string, st State) error {
	return m.with(name, func(md *managed) error {
		if err := m.move(md, st, 0); err != nil {
			return err
		}
		m.trim(st.String() + " " + name)
		return nil
	})
}

// move places md in st and checks that leaving the device freed every
// byte charged to it.
func (m *Manager) move(md *managed, st State, limit int64) error {
	if md.loading {
		return fmt.Errorf("memory: %s is being loaded in the background", md.name)
	}
	from, before := md.state, m.mb.Held(md.name)
	if err := md.p.Place(st, limit); err != nil {
		return fmt.Errorf("memory: moving %s from %s to %s: %w", md.name, from, st, err)
	}
	md.state = st
	if st == Resident || st == Streamed {
		m.tick++
		md.used = m.tick
	}
	after := m.mb.Held(md.name)
	msg := fmt.Sprintf("memory: %s %s → %s", md.name, from, st)
	switch {
	case after < before:
		msg += ", freed " + FormatBytes(before-after)
	case after > before:
		msg += ", uploaded " + FormatBytes(after-before)
	}
	m.log.Debug(msg+"; "+m.mb.Stats().String(), "model", md.name, "from", from.String(), "to", st.String(), "device_bytes", after)
	if (st == OnHost || st == Unloaded) && after != 0 {
		return fmt.Errorf("memory: %s is %s but still holds %s on %s (a weight not released)", md.name, st, FormatBytes(after), m.mb.deviceName())
	}
	return nil
}

// makeRoom evicts until need bytes are available; an error when even
// evicting everything else is not enough.
func (m *Manager) makeRoom(need int64, keep []string, why string) error {
	if need <= m.mb.Available() {
		return nil
	}
	m.evict(need, keep, why)
	if need > m.mb.Available() {
		s := m.mb.Stats()
		return fmt.Errorf("memory: %s needs %s but only %s of the %s cap is free after evicting every other model (%s): %w",
			why, FormatBytes(need), FormatBytes(m.mb.Available()), FormatBytes(s.Cap), s, tensor.ErrOutOfMemory)
	}
	return nil
}

// evict moves models other than those in keep to the host, least recently
// used first, until need bytes are available, then trims.
func (m *Manager) evict(need int64, keep []string, why string) {
	if need <= m.mb.Available() {
		return
	}
	var cands []*managed
	for _, name := range m.order {
		md := m.models[name]
		if !slices.Contains(keep, name) && m.mb.Held(name) > 0 && !md.loading {
			cands = append(cands, md)
		}
	}
	slices.SortStableFunc(cands, func(a, b *managed) int { return int(a.used - b.used) })
	evicted := false
	for _, md := range cands {
		if need <= m.mb.Available() {
			break
		}
		m.log.Info(fmt.Sprintf("memory: evicting %s to make room for %s", md.name, why), "model", md.name)
		if err := m.move(md, OnHost, 0); err != nil {
			m.log.Warn("memory: eviction failed", "model", md.name, "err", err)
			continue
		}
		evicted = true
	}
	if evicted {
		m.trim(why)
	}
}

// EvictExcept moves every model not in keep off the device and trims.
func (m *Manager) EvictExcept(keep ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evictExcept(keep, "")
}

func (m *Manager) evictExcept(keep []string, why string) (freed int64) {
	for _, name := range m.order {
		if slices.Contains(keep, name) {
			continue
		}
		held := m.mb.Held(name)
		if held == 0 || m.models[name].loading {
			continue
		}
		if err := m.move(m.models[name], OnHost, 0); err != nil {
			m.log.Warn("memory: eviction failed", "model", name, "err", err)
			continue
		}
		freed += held
	}
	m.trim(why)
	return freed
}

func (m *Manager) trim(why string) {
	if err := m.mb.Trim(); err != nil {
		m.log.Warn("memory: trimming the device pools failed", "after", why, "err", err)
	}
}

// Attempt is an operation on the device and its fallbacks, for Run.
type Attempt struct {
	// Op names it in the log ("vae decode").
	Op string
	// Keep lists the models it needs on the device; others may be evicted.
	Keep []string
	// Run does it on the device. Ops failing inside it with *tensor.OpError
	// panics are caught.
	Run func() error
	// Smaller switches the next Run to smaller tiles, returning false when
	// there is nothing smaller; nil when the operation cannot shrink.
	Smaller func() bool
	// CPU does it on the CPU; nil when there is no CPU path.
	CPU func() error
}

// Run runs a.Run and answers out of memory in steps, each logged: evict
// every model not in a.Keep, trim the pools and retry; then retry with
// smaller tiles while a.Smaller finds some; then a.CPU. Errors other than
// out of memory are returned at once. When every step fails the error
// says what was tried and wraps the last out-of-memory error.
func (m *Manager) Run(a Attempt) error {
	err := catch(a.Run)
	if err == nil || !errors.Is(err, tensor.ErrOutOfMemory) {
		return err
	}
	m.mu.Lock()
	m.log.Warn(fmt.Sprintf("memory: %s: out of memory; evicting models, trimming pools and retrying", a.Op), "op", a.Op, "err", err)
	freed := m.evictExcept(a.Keep, a.Op)
	m.mu.Unlock()
	tried := []string{fmt.Sprintf("evicted %s and trimmed", FormatBytes(freed))}
	if err = catch(a.Run); err == nil || !errors.Is(err, tensor.ErrOutOfMemory) {
		return err
	}
	if a.Smaller != nil {
		n := 0
		for a.Smaller() {
			n++
			m.log.Warn(fmt.Sprintf("memory: %s: still out of memory; retrying with smaller tiles (step %d)", a.Op, n), "op", a.Op, "err", err)
			if err = catch(a.Run); err == nil || !errors.Is(err, tensor.ErrOutOfMemory) {
				return err
			}
		}
		tried = append(tried, fmt.Sprintf("%d smaller tile sizes", n))
	}
	if a.CPU != nil {
		m.log.Warn(fmt.Sprintf("memory: %s: out of memory on the device after %v; running it on the CPU", a.Op, tried), "op", a.Op, "err", err)
		return catch(a.CPU)
	}
	return fmt.Errorf("%s: out of memory on %s after trying %v, and no CPU fallback: %w", a.Op, m.mb.deviceName(), tried, err)
}

func catch(fn func() error) error {
	var err error
	if cerr := tensor.Catch(func() { err = fn() }); cerr != nil {
		return cerr
	}
	return err
}
