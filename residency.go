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

// manager registers the pipeline's models, in stage order, with a Manager
// on the budgeted backend, once: the models it holds outlive a Generate
// call. A backend swapped since (tests do) gets a fresh Manager.
func (p *Pipeline) manager() {
	if p.mm != nil && p.mm.Backend() == p.be {
		return
	}
	p.mm = memory.NewManager(p.be, p.log)
	p.parts = map[string]*part{}
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		pt := &part{mb: p.be, ram: p.ram, name: name, bytes: p.bytes[name], be: p.be}
		pt.built = func(d time.Duration) {
			if j := p.job; j != nil {
				j.res.Loads = append(j.res.Loads, ModelLoad{Part: name, Stage: j.cur, Time: d, Bytes: pt.bytes})
			}
		}
		p.parts[name] = pt
		if err := p.mm.Add(name, pt, memory.Unloaded); err != nil {
			panic(err) // the names above are distinct
		}
	}
}

// keepAll is whether every model fits the device budget at once with the
// preserved amount free: then each stays loaded after its stage and across
// Generate calls (FramePack's high-VRAM mode), and the VAE is loaded whole,
// encoder and decoder together. Otherwise each model is loaded for its
// stage only and nothing stays after a job.
func (p *Pipeline) keepAll() bool {
	var sum int64
	for _, n := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		sum += p.bytes[n]
	}
	b := p.be.Budget()
	return sum+max(b.Preserve, 256*memory.MiB) <= b.Cap
}

// Unload frees every model the Pipeline holds between Generate calls
// (each owner checked to hold 0 bytes, the pools trimmed); the next
// Generate loads them again. Close calls it.
func (p *Pipeline) Unload() error {
	if p == nil {
		return errors.New("framepack: Unload on a nil Pipeline")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open() {
		return errors.New("framepack: the pipeline is closed or was not made by Load")
	}
	return p.unloadAll()
}

// load builds part name on be (through the Manager, which evicts other
// models, least recently used first, when the device lacks room) and
// returns it.
func load[M closer](j *job, name string, be tensor.Backend, build func(be tensor.Backend, streamed bool) (M, error)) (M, error) {
	pt := j.parts[name]
	if m, ok := pt.m.(M); ok && pt.be == be {
		// Kept from an earlier stage or job: a no-op for the Manager
		// apart from its use count.
		return m, j.mm.Load(name)
	}
	if pt.m != nil {
		if err := j.unload(name); err != nil {
			var zero M
			return zero, err
		}
	}
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
func (j *job) unload(name string) error { return j.p.unload(name) }

// release unloads part name after its stage unless every model stays
// loaded (keepAll) and it runs on the device.
func (j *job) release(name string) error {
	if j.keepAll && j.parts[name].be == tensor.Backend(j.p.be) {
		return nil
	}
	return j.unload(name)
}

func (p *Pipeline) unload(name string) error {
	if p.mm == nil || (p.parts[name].m == nil && p.be.Held(name) == 0) {
		return nil
	}
	if err := p.mm.Unload(name); err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	return nil
}

// unloadAll unloads every model, returning the first failure.
func (p *Pipeline) unloadAll() error {
	var first error
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		if err := p.unload(name); err != nil && first == nil {
			first = err
		}
	}
	return first
}
