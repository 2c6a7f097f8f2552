package section

import (
	"context"
	"fmt"
	"math"

	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
)

// Text is one prompt's conditioning of the transformer.
type Text struct {
	Embeds *tensor.Tensor // (B, L, 4096) LLaMA hidden states, zero-padded
	Mask   *tensor.Tensor // (B, L) 0/1, valid tokens first; nil: all valid
	Pooled *tensor.Tensor // (B, 768) CLIP-L pooled output
}

// Transformer is the packed transformer as the sampler's velocity model for
// one section: the positive text and the section's image embedding and
// history in Cond, the negative text for real CFG in Negative.
type Transformer struct {
	Model *hunyuan.Model
	// Cond holds every input but HiddenStates, Timestep and Guidance.
	Cond     hunyuan.Inputs
	Negative Text
	// CFG, a group of two, runs real CFG's passes side by side: its rank 0
	// the positive, its rank 1 the negative, each given both. nil: one
	// after the other here.
	CFG tensor.Comm

	negative *tensor.Tensor // the negative pass made beside the positive one
}

var _ sampler.Model = (*Transformer)(nil)

// Velocity runs one forward pass (sample_hunyuan's positive or negative
// kwargs: the text differs, the image and history are shared).
func (t *Transformer) Velocity(s *tensor.Scope, x *tensor.Tensor, timestep, guidance float32, negative bool) *tensor.Tensor {
	if t.CFG == nil {
		return t.forward(s, x, timestep, guidance, negative)
	}
	// The sampler asks for the positive pass, then the negative one with
	// the same x: both are made at the first call, one on each rank.
	if negative && t.negative != nil {
		v := t.negative
		t.negative = nil
		return v
	}
	mine := t.forward(s, x, timestep, guidance, t.CFG.Rank() == 1)
	both := []*tensor.Tensor{s.Empty(mine.DType(), mine.Shape()...), s.Empty(mine.DType(), mine.Shape()...)}
	if err := t.CFG.AllGather(mine, both); err != nil {
		tensor.Fail("section", "CFG parallel: %v", err)
	}
	s.Free(mine)
	if negative { // asked for the negative first: not the sampler's order
		s.Free(both[0])
		return both[1]
	}
	t.negative = both[1]
	return both[0]
}

// forward is one pass on this rank.
func (t *Transformer) forward(s *tensor.Scope, x *tensor.Tensor, timestep, guidance float32, negative bool) *tensor.Tensor {
	in := t.Cond
	in.HiddenStates = x
	b := x.Dim(0)
	in.Timestep, in.Guidance = repeat(timestep, b), repeat(guidance, b)
	if negative {
		if t.Negative.Embeds == nil || t.Negative.Pooled == nil {
			tensor.Fail("section", "real CFG needs the negative prompt's conditioning")
		}
		in.EncoderHiddenStates = t.Negative.Embeds
		in.EncoderAttentionMask = t.Negative.Mask
		in.PooledProjections = t.Negative.Pooled
	}
	return t.Model.Forward(s, &in)
}

func repeat(v float32, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Inputs assembles the transformer's conditioning for this section: the
// positive text, the SigLIP image embedding, and the history context from
// History.Context (host or device tensors).
func (sec Section) Inputs(pos Text, image, clean, clean2x, clean4x *tensor.Tensor) hunyuan.Inputs {
	return hunyuan.Inputs{
		EncoderHiddenStates:  pos.Embeds,
		EncoderAttentionMask: pos.Mask,
		PooledProjections:    pos.Pooled,
		ImageEmbeddings:      image,
		LatentIndices:        sec.LatentIndices,
		CleanLatents:         clean,
		CleanLatentIndices:   sec.CleanIndices,
		CleanLatents2x:       clean2x,
		CleanLatent2xIndices: sec.Clean2xIndices,
		CleanLatents4x:       clean4x,
		CleanLatent4xIndices: sec.Clean4xIndices,
	}
}

// SectionNoise draws a section's initial noise from the run's generator, as
// sample_hunyuan does: torch.randn((1, 16, lws, h, w)) in float32 on the
// host, continuing the generator's stream from the previous section.
func SectionNoise(g *sampler.TorchGenerator, lws, h, w int) *tensor.Tensor {
	return tensor.FromFloat32(g.Randn(1, 16, lws, h, w), 1, 16, lws, h, w)
}

// SampleOptions are one section's sampler settings (FramePack's demo
// defaults: 25 steps, cfg 1, gs 10, rs 0, TeaCache on at 0.15; the demo
// samples with dtype bf16, so Guidance.BF16 reproduces it exactly).
type SampleOptions struct {
	sampler.Config
	TeaCache       bool
	TeaCacheThresh float32 // 0 means 0.15
	// MagCache, when set, runs MagCache4FramePack's MagCache instead (not
	// with TeaCache); its ratios have one entry per transformer call of
	// the cycle, Steps of them.
	MagCache *hunyuan.MagCacheSettings
}

// SampleSection is FramePack's sample_hunyuan for one section: it resets
// TeaCache (or MagCache) for the section, then denoises noise (B, 16, T, h, w) with
// flow-matching UniPC and returns the x0 latents (f32, allocated in s).
func SampleSection(ctx context.Context, s *tensor.Scope, tr *Transformer, noise *tensor.Tensor, o SampleOptions, cb sampler.Callback) (*tensor.Tensor, error) {
	if tr == nil || tr.Model == nil {
		return nil, fmt.Errorf("section: no transformer")
	}
	thresh := o.TeaCacheThresh
	if thresh == 0 {
		thresh = 0.15
	}
	if !(thresh > 0) || math.IsInf(float64(thresh), 0) { // NaN fails thresh > 0
		return nil, fmt.Errorf("section: TeaCache threshold must be positive and finite, have %v", thresh)
	}
	// FramePack passes num_steps = steps even when real CFG makes two
	// transformer calls per step; TeaCache (and MagCache4FramePack's
	// MagCache) then cycles over steps calls.
	if o.MagCache != nil {
		if o.TeaCache {
			return nil, fmt.Errorf("section: TeaCache and MagCache are exclusive")
		}
		if len(o.MagCache.Ratios) != o.Steps {
			return nil, fmt.Errorf("section: MagCache has %d magnitude ratios for %d steps", len(o.MagCache.Ratios), o.Steps)
		}
		if err := tr.Model.InitMagCache(o.MagCache); err != nil {
			return nil, fmt.Errorf("section: %w", err)
		}
	} else {
		tr.Model.InitTeaCache(o.TeaCache, o.Steps, thresh)
	}
	return sampler.Sample(ctx, s, tr, noise, o.Config, cb)
}
