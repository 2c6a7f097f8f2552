package gpu

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// Profile accumulates the time of kernel classes. Timing waits for the
// device before and after each timed call, so a profiled run is slower than
// a plain one (nothing overlaps) but says where the device time goes. A nil
// *Profile times nothing.
type Profile struct {
	mu    sync.Mutex
	stats map[string]*profStat
}

type profStat struct {
	n     int
	d     time.Duration
	flops float64
}

// NewProfile returns an empty profile.
func NewProfile() *Profile { return &Profile{stats: map[string]*profStat{}} }

// time runs fn between two waits for be and adds its time (and flops) to
// class.
func (p *Profile) time(class string, be tensor.Backend, flops float64, fn func() error) error {
	if p == nil {
		return fn()
	}
	if err := be.Sync(); err != nil {
		return err
	}
	start := time.Now()
	err := fn()
	if err == nil {
		err = be.Sync()
	}
	d := time.Since(start)
	p.mu.Lock()
	s := p.stats[class]
	if s == nil {
		s = &profStat{}
		p.stats[class] = s
	}
	s.n++
	s.d += d
	s.flops += flops
	p.mu.Unlock()
	return err
}

// Reset forgets what was timed so far.
func (p *Profile) Reset() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stats = map[string]*profStat{}
	p.mu.Unlock()
}

// ProfileLine is one kernel class of a Profile.
type ProfileLine struct {
	Class   string  `json:"class"`
	Calls   int     `json:"calls"`
	Seconds float64 `json:"seconds"`
	// TFLOPS is the arithmetic rate, for classes that count operations.
	TFLOPS float64 `json:"tflops,omitempty"`
}

func (l ProfileLine) String() string {
	s := fmt.Sprintf("%-34s %6d calls %9.3f s", l.Class, l.Calls, l.Seconds)
	if l.TFLOPS > 0 {
		s += fmt.Sprintf(" %7.1f TFLOP/s", l.TFLOPS)
	}
	return s
}

// Lines lists the classes, most time first.
func (p *Profile) Lines() []ProfileLine {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProfileLine
	for c, s := range p.stats {
		l := ProfileLine{Class: c, Calls: s.n, Seconds: s.d.Seconds()}
		if s.flops > 0 && s.d > 0 {
			l.TFLOPS = s.flops / s.d.Seconds() / 1e12
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b ProfileLine) int {
		if a.Seconds != b.Seconds {
			if a.Seconds > b.Seconds {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}

// Hook is a tensor.Hook that times every kernel a Scope launches into p by
// class (the op; convolutions with their channels and kernel size), waiting
// for be before and after each. Set it on the backend outside the conv3d
// chain to see the chain's convolutions whole; the optimized tier adds its
// own phases (conv3d.pack, conv3d.library, conv3d.unpack) when
// ConvOptions.Profile is set.
func (p *Profile) Hook(be tensor.Backend) tensor.Hook {
	return func(op tensor.Op, run func() error) error { return p.time(op.Class, be, op.Flops, run) }
}
