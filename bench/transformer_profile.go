package bench

import (
	"fmt"
	"slices"
	"sync"

	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/hip"
	"github.com/framepack-go/framepack/tensor"
)

// eventProfile times kernel classes by recording a pair of events on the
// GPU's stream around each kernel while on; the times are read after the
// forward, so the kernels run as they do unprofiled.
type eventProfile struct {
	g    *gpu.Backend
	mu   sync.Mutex
	on   bool
	recs []eventRec
	pool []hip.Event
	err  error
}

type eventRec struct {
	class      string
	flops      float64
	start, end hip.Event
}

// hookOn is device.Options.Hook: the profile's hook on a GPU (whose
// stream the events are recorded on: g, set once the device is open), none
// on the CPU.
func (p *eventProfile) hookOn(be tensor.Backend) tensor.Hook {
	if _, ok := tensor.As[*gpu.Backend](be); !ok {
		return nil
	}
	return p.hook
}

// hook times the kernels a Scope launches, fused ones included, by class.
func (p *eventProfile) hook(op tensor.Op, run func() error) error {
	return p.time(op.Class, op.Flops, run)
}

func (p *eventProfile) event() (hip.Event, error) {
	if n := len(p.pool); n > 0 {
		e := p.pool[n-1]
		p.pool = p.pool[:n-1]
		return e, nil
	}
	return p.g.Device().NewEvent(true)
}

func (p *eventProfile) time(class string, flops float64, fn func() error) error {
	p.mu.Lock()
	if !p.on {
		p.mu.Unlock()
		return fn()
	}
	d, st := p.g.Device(), p.g.Stream()
	a, err1 := p.event()
	b, err2 := p.event()
	if err1 != nil || err2 != nil {
		p.err = fmt.Errorf("profile: events: %v %v", err1, err2)
		p.on = false
		p.mu.Unlock()
		return fn()
	}
	d.Record(a, st)
	p.mu.Unlock()
	err := fn()
	p.mu.Lock()
	d.Record(b, st)
	p.recs = append(p.recs, eventRec{class, flops, a, b})
	p.mu.Unlock()
	return err
}

func (p *eventProfile) start() {
	p.mu.Lock()
	p.on, p.recs, p.err = true, nil, nil
	p.mu.Unlock()
}

// classTime is one class's kernels in a profiled forward.
type classTime struct {
	calls     int
	ms, flops float64
}

// stop ends timing and returns one line per class, largest first, and the
// idle time of a forward of wall seconds.
func (p *eventProfile) stop(wall float64) ([]Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = false
	if err := p.g.Sync(); err != nil {
		return nil, err
	}
	by, total, err := p.byClass()
	if err != nil {
		return nil, err
	}
	var lines []Result
	for c, a := range by {
		l := Result{"class": c, "calls": a.calls, "seconds": a.ms / 1e3, "share": a.ms / 1e3 / wall}
		if a.flops > 0 && a.ms > 0 {
			l["tflop"] = a.flops / 1e12
			l["tflops"] = a.flops / (a.ms / 1e3) / 1e12
		}
		lines = append(lines, l)
	}
	slices.SortFunc(lines, func(a, b Result) int {
		x, y := a["seconds"].(float64), b["seconds"].(float64)
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return 0
	})
	idle := wall - total/1e3
	lines = append(lines, Result{"class": "idle", "seconds": idle, "share": idle / wall})
	return lines, p.err
}

// byClass reads the recorded events' times by class (and their sum in
// ms), returning the events to the pool.
func (p *eventProfile) byClass() (map[string]*classTime, float64, error) {
	by := map[string]*classTime{}
	var total float64
	for _, r := range p.recs {
		ms, err := p.g.Device().Elapsed(r.start, r.end)
		if err != nil {
			return nil, 0, err
		}
		a := by[r.class]
		if a == nil {
			a = &classTime{}
			by[r.class] = a
		}
		a.calls++
		a.ms += float64(ms)
		a.flops += r.flops
		total += float64(ms)
		p.pool = append(p.pool, r.start, r.end)
	}
	p.recs = nil
	return by, total, nil
}

// profiledComm times the exchanges as the profile's "exchange" class (they
// are queued on the GPU's stream like its kernels).
type profiledComm struct {
	tensor.Comm
	prof *eventProfile
}

func (c *profiledComm) AllToAll(send, recv []*tensor.Tensor) error {
	return c.prof.time("exchange", 0, func() error { return c.Comm.AllToAll(send, recv) })
}

func (c *profiledComm) AllGather(x *tensor.Tensor, recv []*tensor.Tensor) error {
	return c.prof.time("exchange", 0, func() error { return c.Comm.AllGather(x, recv) })
}
