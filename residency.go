package framepack

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// part is one of the pipeline's models as memory.Manager places it: built
// by its package's Load (weights read from disk onto a backend) and freed
// by its Close. Placing it Resident or Streamed builds it, charging every
// device allocation made meanwhile to its owner name; OnHost and Unloaded
// close it, as no host copy is kept (the weights are read from disk again
// when a later stage needs them).
type part struct {
	mb    *memory.Backend
	ram   *memory.Host // charged with what the model holds in host memory
	name  string       // owner name: text_encoder, text_encoder_2, image_encoder, vae, transformer
	bytes int64        // weight bytes in the compute dtype

	// be is where the next build places the model: mb, or the host CPU
	// when the device lacks room (then the device holds none of it).
	be tensor.Backend
	// build loads the model on be; streamed asks for the transformer's
	// blocks to stay in host memory.
	build func(be tensor.Backend, streamed bool) (closer, error)
	m     closer
	// built, when set, is told how long each build took.
	built func(time.Duration)
}

type closer interface{ Close() }

func (p *part) DeviceBytes() int64 {
	if p.be != tensor.Backend(p.mb) {
		return 0
	}
	return p.bytes
}

func (p *part) Place(st memory.State, _ int64) error {
	switch st {
	case memory.Resident, memory.Streamed:
		if p.m != nil {
			return nil
		}
		if p.build == nil {
			return errors.New("nothing to build")
		}
		mark := p.mb.Mark()
		start := time.Now()
		m, err := p.build(p.be, st == memory.Streamed)
		if err != nil {
			return err
		}
		p.m = m
		p.mb.ChargeSince(p.name, mark)
		if p.built != nil {
			p.built(time.Since(start))
		}
		p.chargeHost()
	default:
		if p.m != nil {
			p.m.Close()
			p.m = nil
			held := p.ram.Held(p.name)
			p.ram.Set(p.name, 0, "")
			if held > 0 || tensor.IsHostBacked(p.be) {
				// A model in Go memory leaves the resident set only when
				// the heap is collected and returned: do it before the
				// next stage's model comes in.
				debug.FreeOSMemory()
			}
		}
	}
	return nil
}

// chargeHost charges the host budget with what the built model holds in
// host memory: all of it when it runs on the host CPU, the streamed
// blocks' pinned copy for the transformer (none when they stream from the
// mapped file), nothing for a model on a discrete device (its mapped file
// pages are released as they are copied).
func (p *part) chargeHost() {
	switch {
	case p.be != tensor.Backend(p.mb):
		p.ram.Set(p.name, p.bytes, "heap")
	case tensor.IsHostBacked(p.mb):
		// The CPU as the device: the device budget, unified with the
		// host's, counts it.
	default:
		if wb, ok := p.m.(interface{ WeightBytes() (int64, int64) }); ok {
			_, host := wb.WeightBytes()
			p.ram.Set(p.name, host, "pinned")
		}
	}
}

// newManager registers the pipeline's models, in stage order, with a
// Manager on the job's budgeted backend.
func (j *job) newManager() {
	p := j.p
	j.mm = memory.NewManager(p.be, p.log)
	j.parts = map[string]*part{}
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		pt := &part{mb: p.be, ram: p.ram, name: name, bytes: p.bytes[name], be: p.be}
		pt.built = func(d time.Duration) {
			j.res.Loads = append(j.res.Loads, ModelLoad{Part: name, Stage: j.cur, Time: d, Bytes: pt.bytes})
		}
		j.parts[name] = pt
		if err := j.mm.Add(name, pt, memory.Unloaded); err != nil {
			panic(err) // the names above are distinct
		}
	}
}

// load builds part name on be (through the Manager, which evicts other
// models, least recently used first, when the device lacks room) and
// returns it.
func load[M closer](j *job, name string, be tensor.Backend, build func(be tensor.Backend, streamed bool) (M, error)) (M, error) {
	pt := j.parts[name]
	pt.be = be
	pt.build = func(be tensor.Backend, streamed bool) (closer, error) { return build(be, streamed) }
	var zero M
	if err := j.mm.Load(name); err != nil {
		return zero, err
	}
	return pt.m.(M), nil
}

// loaded is part name's model while it is built, else the zero M.
func loaded[M closer](j *job, name string) M {
	m, _ := j.parts[name].m.(M)
	return m
}

// unload frees everything part name holds: the Manager checks that its
// owner then holds 0 bytes on the device and trims the device's pools.
func (j *job) unload(name string) error {
	if j.parts[name].m == nil && j.p.be.Held(name) == 0 {
		return nil
	}
	if err := j.mm.Unload(name); err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	return nil
}

// unloadAll unloads every model, returning the first failure.
func (j *job) unloadAll() error {
	var first error
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		if err := j.unload(name); err != nil && first == nil {
			first = err
		}
	}
	return first
}
