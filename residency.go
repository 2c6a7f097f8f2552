package framepack

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
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
	// stage is the stage the next build's time counts in (ModelLoad.Stage),
	// set by whoever starts it.
	stage string
	// staging charges the host budget with the weight loaders' buffers
	// while builds run.
	staging *stagingCharge
	// built, when set, is told of each build.
	built func(ModelLoad)
}

type closer interface{ Close() }

// returnHeapFrom is the size of an unloaded model from which its memory is
// returned to the system at once. Returning it costs a whole collection,
// and every page returned that the next stage's activations touch again
// faults back in zeroed; a smaller model leaves with the runtime's own
// collections (a fifth to a third of a tiny-model job's CPU time went to
// returning).
const returnHeapFrom = 64 << 20

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
		p.staging.add(1)
		start := time.Now()
		m, err := p.build(p.be, st == memory.Streamed)
		took := time.Since(start)
		p.staging.add(-1)
		if err != nil {
			return err
		}
		p.m = m
		if wt, ok := m.(interface{ WeightTensors() []*tensor.Tensor }); ok {
			// Exactly its weights: another model may be built, or run, on
			// the device meanwhile (the transformer loads beside the
			// encoders).
			p.mb.Charge(p.name, wt.WeightTensors()...)
		} else {
			p.mb.ChargeSince(p.name, mark)
		}
		if p.built != nil {
			p.built(ModelLoad{Part: p.name, Stage: p.stage, Time: took, Bytes: loadedBytes(m, p.bytes)})
		}
		p.chargeHost()
	default:
		if p.m != nil {
			p.m.Close()
			p.m = nil
			held := p.ram.Held(p.name)
			p.ram.Set(p.name, 0, "")
			if tensor.IsHostBacked(p.be) {
				held = max(held, p.bytes)
			}
			if held >= returnHeapFrom {
				// A model in Go memory leaves the resident set only when
				// the heap is collected and returned: do it before the
				// next stage's model comes in.
				debug.FreeOSMemory()
			}
		}
	}
	return nil
}

// loadedBytes is what a build placed, on the device and in host memory;
// planned when the model does not say.
func loadedBytes(m closer, planned int64) int64 {
	switch x := m.(type) {
	case interface{ WeightBytes() (int64, int64) }:
		dev, host := x.WeightBytes()
		return dev + host
	case interface{ WeightBytes() int64 }:
		return x.WeightBytes()
	case interface{ Bytes() int64 }:
		return x.Bytes()
	}
	return planned
}

// stagingCharge charges the host budget with the staging and read buffers
// of the weight loads running (weights.LoadOptions.HostBytes each).
type stagingCharge struct {
	ram *memory.Host
	mu  sync.Mutex
	n   int
}

// StagingOwner is the host budget's name for the weight loads' buffers.
const StagingOwner = "weight staging"

func (s *stagingCharge) add(d int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n += d
	how := "pinned"
	if s.n == 0 {
		how = ""
	}
	s.ram.Set(StagingOwner, int64(s.n)*weights.LoadOptions{}.HostBytes(), how)
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
	staging := &stagingCharge{ram: p.ram}
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE, PartTransformer} {
		pt := &part{mb: p.be, ram: p.ram, name: name, bytes: p.bytes[name], be: p.be, staging: staging}
		pt.built = func(l ModelLoad) {
			p.log.Info(fmt.Sprintf("weights: %s: %s loaded in %s (%.1f GB/s)", l.Part, memory.FormatBytes(l.Bytes),
				l.Time.Round(time.Millisecond), float64(l.Bytes)/1e9/max(l.Time.Seconds(), 1e-9)),
				"part", l.Part, "bytes", l.Bytes, "seconds", l.Time.Seconds())
			if j := p.job; j != nil {
				j.loaded(l)
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
	pt.be, pt.stage = be, j.cur
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
