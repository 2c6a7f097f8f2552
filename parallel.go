package framepack

import (
	"fmt"
	"time"

	"github.com/framepack-go/framepack/backend/gpu"
	"github.com/framepack-go/framepack/nccl"
	"github.com/framepack-go/framepack/tensor"
)

// Several GPUs, one process each: every rank loads the same pipeline and
// runs the same Generate in lockstep. The transformer's work is shared
// (sequence parallel over the ranks; with real CFG and an even number of
// ranks, the positive and negative passes on the two halves side by side);
// the text and image encoders and the VAE encode run on every rank, which
// costs their load and a few seconds but no exchange; rank 0 alone decodes
// and returns the frames.

// Ranks joins a Pipeline to the other processes of a multi-GPU run: Load
// makes the communicator (NCCL, RCCL on AMD) on the pipeline's GPU.
type Ranks struct {
	Rank, Size int
	// ID is the communicator's id as rank 0 published it (ranks > 0).
	ID string
	// Publish hands the id rank 0 makes to the other ranks (rank 0).
	Publish func(id string) error
	// Timeout bounds the wait for every rank to join; 0 means 10 minutes.
	Timeout time.Duration
}

// RankEnv is the environment every rank process needs (NVLink multicast
// off: nccl.ChildEnv).
func RankEnv() []string { return nccl.ChildEnv() }

// joinRanks sets p.world from Options.Comm or Options.Ranks.
func (p *Pipeline) joinRanks() error {
	o := p.opts
	switch {
	case o.Comm != nil && o.Ranks != nil:
		return fmt.Errorf("framepack: Options.Comm and Options.Ranks both set")
	case o.Comm != nil:
		p.world = o.Comm
		return nil
	case o.Ranks == nil || o.Ranks.Size == 1:
		return nil
	}
	r := o.Ranks
	if r.Size < 1 || r.Rank < 0 || r.Rank >= r.Size {
		return fmt.Errorf("framepack: rank %d of %d", r.Rank, r.Size)
	}
	if !p.gpu {
		return fmt.Errorf("framepack: rank %d of %d runs on the CPU: several ranks need one GPU each", r.Rank, r.Size)
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	c, err := gpu.Join(p.be, r.Rank, r.Size, r.ID, r.Publish, timeout)
	if err != nil {
		return fmt.Errorf("framepack: joining the other GPUs (NCCL, RCCL on AMD): %w", err)
	}
	// NCCL's buffers are outside the engine's allocator: they come out of
	// the cap, which bounds the process's device memory.
	if held := c.DeviceBytes(); held > 0 {
		b := p.be.Budget()
		b.Cap = max(b.Cap-held, 0)
		p.be.SetBudget(b)
	}
	p.world, p.ownWorld = c, true
	return nil
}

// follower is a rank other than 0: it computes but decodes nothing.
func (p *Pipeline) follower() bool { return p.world != nil && p.world.Rank() != 0 }

// groups returns the sequence-parallel group of this rank and, with real
// CFG on an even number of ranks, the pair that runs the positive and the
// negative pass side by side. FramePack's TeaCache with real CFG shares one
// state between the alternating passes, which the split passes could not
// reproduce: with TeaCache on, every rank shares both passes instead.
func (p *Pipeline) groups(cfg bool, teacache bool) (seq, pair tensor.Comm, err error) {
	w := p.world
	if w == nil || w.Size() == 1 {
		return nil, nil, nil
	}
	if !cfg || teacache || w.Size()%2 != 0 {
		return w, nil, nil
	}
	if p.cfgSeq == nil {
		half := w.Size() / 2
		if p.cfgSeq, err = w.Split(w.Rank()/half, w.Rank()); err != nil {
			return nil, nil, err
		}
		if p.cfgPair, err = w.Split(w.Rank()%half, w.Rank()); err != nil {
			return nil, nil, err
		}
	}
	return p.cfgSeq, p.cfgPair, nil
}

// closeRanks releases the communicators the pipeline made.
func (p *Pipeline) closeRanks() {
	for _, c := range []tensor.Comm{p.cfgSeq, p.cfgPair} {
		if c != nil {
			c.Close()
		}
	}
	if p.ownWorld {
		p.world.Close()
	}
	p.world, p.cfgSeq, p.cfgPair = nil, nil, nil
}
