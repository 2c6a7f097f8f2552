package memory

import (
	"errors"
	"fmt"
	"sync"

	"github.com/framepack-go/framepack/tensor"
)

// WeightSet holds a model's weights as host tensors in ordered groups (a
// transformer block, an embedder, …) and places them on a budgeted device:
// all of them (Resident), a prefix within a limit with the rest uploaded
// group by group as the forward pass reaches them (Streamed), or none
// (OnHost, Unloaded). Device copies are charged to the owner's name.
//
// Model code reads weights through Acquire/Release around each group's use;
// Release frees a streamed group's device copy and Acquire uploads the next
// group ahead when the budget has room beside the preserved amount.
type WeightSet struct {
	mb    *Backend
	owner string

	mu       sync.Mutex
	groups   []*Group
	byName   map[string]*Group
	state    State
	unloaded bool
}

// Group is one group of weights. Its device tensors are valid between
// Acquire and Release (and always while the set is Resident).
type Group struct {
	ws    *WeightSet
	name  string
	index map[string]int
	names []string
	host  []*tensor.Tensor
	dev   []*tensor.Tensor // nil when not on the device
	bytes int64
	kept  bool // in the part that stays on the device
	uses  int
	pos   int
}

// NewWeightSet starts an empty set for owner ("transformer", "vae", …) on
// mb, on the host.
func NewWeightSet(mb *Backend, owner string) *WeightSet {
	mb.AddOwner(owner)
	return &WeightSet{mb: mb, owner: owner, byName: map[string]*Group{}, state: OnHost}
}

// Owner is the name the set's device memory is charged to.
func (w *WeightSet) Owner() string { return w.owner }

// Add appends a host tensor (already in the dtype wanted on the device) to
// group, creating the group after the existing ones on first use.
func (w *WeightSet) Add(group, name string, host *tensor.Tensor) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !host.OnHost() {
		return fmt.Errorf("%s: weight %s is not a host tensor (%v)", w.owner, name, host)
	}
	if w.unloaded {
		return fmt.Errorf("%s: weight set was unloaded", w.owner)
	}
	g := w.byName[group]
	if g == nil {
		g = &Group{ws: w, name: group, index: map[string]int{}, pos: len(w.groups)}
		w.groups = append(w.groups, g)
		w.byName[group] = g
	}
	if _, dup := g.index[name]; dup {
		return fmt.Errorf("%s: weight %s added twice to group %s", w.owner, name, group)
	}
	if g.dev != nil {
		return fmt.Errorf("%s: group %s is on the device; add weights while the set is on the host", w.owner, group)
	}
	g.index[name] = len(g.names)
	g.names = append(g.names, name)
	g.host = append(g.host, host)
	g.bytes += host.Bytes()
	return nil
}

// Groups lists the group names in order.
func (w *WeightSet) Groups() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, len(w.groups))
	for i, g := range w.groups {
		out[i] = g.name
	}
	return out
}

// DeviceBytes is the size of every weight.
func (w *WeightSet) DeviceBytes() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, g := range w.groups {
		n += g.bytes
	}
	return n
}

// OnDevice is what the set holds on the device now.
func (w *WeightSet) OnDevice() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for _, g := range w.groups {
		if g.dev != nil {
			n += g.bytes
		}
	}
	return n
}

// State is the set's placement.
func (w *WeightSet) State() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Place moves the weights (see Placeable).
func (w *WeightSet) Place(st State, limit int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unloaded && st != Unloaded {
		return fmt.Errorf("%s: weights were unloaded; load the model again", w.owner)
	}
	switch st {
	case Resident:
		var fresh []*Group
		for _, g := range w.groups {
			if g.dev == nil {
				if err := w.upload(g); err != nil {
					for _, f := range fresh {
						w.drop(f)
					}
					return err
				}
				fresh = append(fresh, g)
			}
		}
		for _, g := range w.groups {
			g.kept = true
		}
	case Streamed:
		// The kept part is the longest prefix within limit, as FramePack
		// fills a model module by module until the preserved amount is
		// reached. Free what falls outside it first, so the move never
		// holds both.
		n, cum := 0, int64(0)
		for n < len(w.groups) && cum+w.groups[n].bytes <= limit {
			cum += w.groups[n].bytes
			n++
		}
		for _, g := range w.groups[n:] {
			g.kept = false
			if g.uses == 0 {
				w.drop(g)
			}
		}
		for _, g := range w.groups[:n] {
			if g.dev == nil {
				if err := w.upload(g); err != nil {
					if errors.Is(err, tensor.ErrOutOfMemory) {
						break // keep less; the rest streams
					}
					return err
				}
			}
			g.kept = true
		}
	case OnHost, Unloaded:
		for _, g := range w.groups {
			if g.uses > 0 {
				return fmt.Errorf("%s: cannot move to %s while group %s is in use", w.owner, st, g.name)
			}
		}
		for _, g := range w.groups {
			g.kept = false
			w.drop(g)
		}
		if st == Unloaded {
			for _, g := range w.groups {
				g.host = nil
			}
			w.unloaded = true
		}
	default:
		return fmt.Errorf("%s: unknown state %v", w.owner, st)
	}
	w.state = st
	return nil
}

// Acquire returns group's device tensors, uploading them now when they are
// not on the device, and uploads the next group ahead when the budget has
// room for it beside the preserved amount. Pair every Acquire with Release.
func (w *WeightSet) Acquire(group string) (*Group, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.byName[group]
	if g == nil {
		return nil, fmt.Errorf("%s: no weight group %q", w.owner, group)
	}
	if w.state != Resident && w.state != Streamed {
		return nil, fmt.Errorf("%s is %s: place it on the device before use", w.owner, w.state)
	}
	if g.dev == nil {
		if err := w.upload(g); err != nil {
			return nil, err
		}
	}
	g.uses++
	if w.state == Streamed && g.pos+1 < len(w.groups) {
		next := w.groups[g.pos+1]
		if next.dev == nil && w.mb.Available()-w.mb.Budget().Preserve >= next.bytes {
			_ = w.upload(next) // only a head start: Acquire uploads it anyway
		}
	}
	return g, nil
}

// Release ends a use of the group; a streamed group not in the kept part
// leaves the device.
func (g *Group) Release() {
	w := g.ws
	w.mu.Lock()
	defer w.mu.Unlock()
	if g.uses > 0 {
		g.uses--
	}
	if g.uses == 0 && !g.kept {
		w.drop(g)
	}
}

// Name is the group's name.
func (g *Group) Name() string { return g.name }

// T is the device tensor of a weight of the group; a name the group lacks
// fails the current op (inside tensor.Catch), naming model, group and
// weight.
func (g *Group) T(name string) *tensor.Tensor {
	i, ok := g.index[name]
	if !ok {
		tensor.Fail("weights", "%s: group %s has no weight %s", g.ws.owner, g.name, name)
	}
	if g.dev == nil {
		tensor.Fail("weights", "%s: group %s is not on the device (Acquire it)", g.ws.owner, g.name)
	}
	return g.dev[i]
}

func (w *WeightSet) upload(g *Group) error {
	dev := make([]*tensor.Tensor, 0, len(g.host))
	fail := func(err error) error {
		for _, t := range dev {
			tensor.Release(t)
		}
		return fmt.Errorf("%s: uploading group %s (%s): %w", w.owner, g.name, FormatBytes(g.bytes), err)
	}
	for i, h := range g.host {
		t, err := tensor.Alloc(w.mb, h.DType(), h.Shape()...)
		if err != nil {
			return fail(err)
		}
		dev = append(dev, t)
		if err := w.mb.Upload(t.Buffer(), 0, h.HostBytes()); err != nil {
			return fail(fmt.Errorf("weight %s: %w", g.names[i], err))
		}
	}
	w.mb.Charge(w.owner, dev...)
	g.dev = dev
	return nil
}

func (w *WeightSet) drop(g *Group) {
	for _, t := range g.dev {
		tensor.Release(t)
	}
	g.dev = nil
}
