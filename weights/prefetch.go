package weights

import (
	"fmt"
	"slices"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// A model's constructor asks a Builder for its weights one at a time and
// may use one before asking for the next (LLaMA reorders its q and k rows
// at load). Prefetch keeps that code as it is: the constructor runs first
// on a plan, which lists its weights in the order it asks for them; a
// dispatcher then allocates them in that order and queues them on a
// Loader, running ahead of the constructor, whose Make hands out each
// weight once its copy is done.

// DefaultWindow bounds what Prefetch allocates ahead of the constructor's
// requests (at least one weight is always ahead): weights a constructor
// frees after use (a transformed copy made from them) are then never held
// all at once.
const DefaultWindow = 512 << 20

// Prefetch is a Source that hands out planned weights loaded ahead by a
// Loader. A request that is not the next planned weight (a constructor
// whose calls differ from its plan) stops the prefetch: the weights
// loaded ahead are freed and every later request is made by src, one at
// a time, as it would have been without a prefetch. Close it after the
// constructor returns.
type Prefetch struct {
	ld     *Loader
	src    Filler
	be     tensor.Backend
	plan   []Weight
	window int64

	mu        sync.Mutex
	cond      *sync.Cond
	got       []fetched // by planned weight, as the dispatcher makes them
	next      int       // the planned weight the next Make expects
	ahead     int64     // bytes made and not yet handed out
	stopped   bool      // the dispatcher is told to stop
	exited    bool      // and has
	derailed  bool      // requests go to src
	dispatchd chan struct{}
}

type fetched struct {
	made bool
	t    *tensor.Tensor
	cp   *Copy // the copy into t, nil when src made it
	err  error
}

// NewPrefetch starts loading plan's weights (a constructor's, in the order
// it asks) on be through ld, at most window bytes (≤ 0: DefaultWindow)
// ahead of the requests. src makes what cannot be copied in pieces (and
// everything after a request off the plan).
func NewPrefetch(ld *Loader, src Filler, be tensor.Backend, plan []Weight, window int64) *Prefetch {
	if window <= 0 {
		window = DefaultWindow
	}
	p := &Prefetch{ld: ld, src: src, be: be, plan: plan, window: window,
		got: make([]fetched, len(plan)), dispatchd: make(chan struct{})}
	p.cond = sync.NewCond(&p.mu)
	go p.dispatch()
	return p
}

// dispatch makes the planned weights in order, staying within the window.
func (p *Prefetch) dispatch() {
	defer func() {
		p.mu.Lock()
		p.exited = true
		p.cond.Broadcast()
		p.mu.Unlock()
		close(p.dispatchd)
	}()
	for k, w := range p.plan {
		size := w.Bytes()
		p.mu.Lock()
		for !p.stopped && p.ahead > 0 && p.ahead+size > p.window {
			p.cond.Wait()
		}
		if p.stopped {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		f := p.make(w)
		p.mu.Lock()
		p.got[k] = f
		if f.t != nil {
			p.ahead += f.t.Bytes()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		if f.err != nil {
			return // the constructor stops at its first failure
		}
	}
}

// make allocates w and queues its copy, or has src make it when it cannot
// be copied in pieces (optional, FP8, no shape).
func (p *Prefetch) make(w Weight) fetched {
	ranged := false
	if rf, ok := p.src.(RangeFiller); ok && !w.Optional {
		_, ranged = rf.Ranged(w)
	}
	if !ranged {
		t, err := p.src.Make(w)
		return fetched{made: true, t: t, err: err}
	}
	if room, ok := tensor.As[tensor.Budgeted](p.be); ok {
		// A budget without room for it now: wait for the constructor to
		// take what is held ahead (it may free some of it, as LLaMA does
		// with a weight it transforms), so that loading ahead never fails
		// where one weight at a time would not.
		p.mu.Lock()
		for !p.stopped && p.ahead > 0 && w.Bytes() > room.Available() {
			p.cond.Wait()
		}
		p.mu.Unlock()
	}
	t, err := tensor.Alloc(p.be, w.DType, w.Shape...)
	if err != nil {
		return fetched{made: true, err: fmt.Errorf("weights: %s (%s %v): %w", w.Name, w.DType, w.Shape, err)}
	}
	return fetched{made: true, t: t, cp: p.ld.Copy(w, t.Buffer(), 0)}
}

// Make hands out the next planned weight once loaded, or makes w with src
// after a request off the plan.
func (p *Prefetch) Make(w Weight) (*tensor.Tensor, error) {
	p.mu.Lock()
	k := p.next
	if p.derailed || k >= len(p.plan) || !sameWeight(p.plan[k], w) {
		p.mu.Unlock()
		p.derail()
		return p.src.Make(w)
	}
	for !p.got[k].made && !p.exited {
		p.cond.Wait()
	}
	f := p.got[k]
	if !f.made {
		// The dispatcher stopped before it (after a failure): make it here.
		p.mu.Unlock()
		p.derail()
		return p.src.Make(w)
	}
	p.got[k] = fetched{}
	p.next++
	if f.t != nil {
		p.ahead -= f.t.Bytes()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if f.cp != nil {
		if err := f.cp.Wait(); err != nil {
			tensor.Release(f.t)
			return nil, err
		}
	}
	return f.t, f.err
}

// derail stops the prefetch for good: the dispatcher stopped, what it made
// ahead freed once its copies are done.
func (p *Prefetch) derail() {
	p.stop()
	p.mu.Lock()
	p.derailed = true
	p.mu.Unlock()
}

// stop stops the dispatcher and frees what it made that was not handed
// out (after its copies: a buffer is never freed under a copy).
func (p *Prefetch) stop() {
	p.mu.Lock()
	p.stopped = true
	p.cond.Broadcast()
	p.mu.Unlock()
	<-p.dispatchd
	p.mu.Lock()
	left := slices.Clone(p.got[min(p.next, len(p.got)):])
	for i := p.next; i < len(p.got); i++ {
		p.got[i] = fetched{}
	}
	p.ahead = 0
	p.mu.Unlock()
	for _, f := range left {
		if f.cp != nil {
			f.cp.Wait()
		}
		tensor.Release(f.t)
	}
}

// Close stops the prefetch and frees the weights loaded ahead that were
// not handed out. The Loader is the caller's to finish.
func (p *Prefetch) Close() { p.stop() }

// sameWeight reports whether a request is the planned weight.
func sameWeight(a, b Weight) bool {
	if a.Name != b.Name || a.DType != b.DType || a.Round != b.Round || a.Optional != b.Optional ||
		a.FP8 != b.FP8 || !slices.Equal(a.Shape, b.Shape) || len(a.Parts) != len(b.Parts) {
		return false
	}
	for i := range a.Parts {
		if a.Parts[i].Name != b.Parts[i].Name || a.Parts[i].Optional != b.Parts[i].Optional ||
			!slices.Equal(a.Parts[i].Shape, b.Parts[i].Shape) {
			return false
		}
	}
	return true
}

// Build makes a model through construct with its weights read in parallel:
// construct runs first on a plan (in dtype dt), which lists the weights it
// asks for in order, then on a Builder over a Prefetch of them from src on
// be. The returned Builder holds what construct was given; its Err is the
// first failure. construct must ask for the same weights on both runs, as
// every constructor that also makes the model's Plan does; one that does
// not still gets its weights, from src one at a time.
func Build(src Filler, be tensor.Backend, dt tensor.DType, opts LoadOptions, construct func(*Builder)) *Builder {
	if dt == tensor.Invalid {
		dt = tensor.F32
	}
	plan := NewPlan().In(dt)
	construct(plan)
	ld := NewLoader(src, be, opts)
	pf := NewPrefetch(ld, src, be, plan.Weights(), 0)
	b := NewBuilder(pf, dt)
	construct(b)
	pf.Close()
	// Every weight handed out was waited for; a failure here is of one
	// loaded ahead and not used.
	ld.Finish()
	return b
}
