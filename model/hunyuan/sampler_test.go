package hunyuan

import (
	"context"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
)

// velocity adapts the model to the sampler with fixed conditioning.
type velocity struct {
	m       *Model
	in, neg Inputs
}

func (v *velocity) Velocity(s *tensor.Scope, x *tensor.Tensor, timestep, guidance float32, negative bool) *tensor.Tensor {
	in := v.in
	if negative {
		in = v.neg
	}
	in.HiddenStates = x
	in.Timestep = []float32{timestep}
	in.Guidance = []float32{guidance}
	return v.m.Forward(s, &in)
}

// TestGoldenSampler runs FramePack's sampler on the golden model end to
// end (CFG 1 and distilled guidance; real CFG with rescale; TeaCache): the
// latents, and with TeaCache the number of block passes, must match the
// reference.
func TestGoldenSampler(t *testing.T) {
	golden.Run(t, "sampler", func(t *testing.T, c *golden.Case) {
		var p struct {
			steps, blockCalls  int
			teacache           bool
			thresh             float32
			cfg, rescale, dist float64
		}
		c.Param("steps", &p.steps)
		c.Param("transformer_block_calls", &p.blockCalls)
		c.Param("teacache", &p.teacache)
		c.Param("teacache_rel_l1_thresh", &p.thresh)
		c.Param("cfg", &p.cfg)
		c.Param("guidance_rescale", &p.rescale)
		c.Param("distilled_guidance", &p.dist)
		m := loadModel(t, c.ModelDir, Options{})
		v := &velocity{m: m, in: sectionInputs(c)}
		v.in.EncoderHiddenStates = c.Tensor("prompt_embeds")
		v.in.EncoderAttentionMask = c.Tensor("prompt_embeds_mask")
		v.in.PooledProjections = c.Tensor("prompt_poolers")
		v.neg = v.in
		v.neg.EncoderHiddenStates = c.Tensor("negative_prompt_embeds")
		v.neg.EncoderAttentionMask = c.Tensor("negative_prompt_embeds_mask")
		v.neg.PooledProjections = c.Tensor("negative_prompt_poolers")
		m.InitTeaCache(p.teacache, p.steps, p.thresh)
		d, err := sampler.NewDenoiser(v, sampler.Guidance{CFG: p.cfg, Rescale: p.rescale, Distilled: p.dist})
		if err != nil {
			t.Fatal(err)
		}
		s := tensor.NewScope(m.Backend())
		defer s.Close()
		out, err := sampler.UniPC(context.Background(), s, d, s.To(c.Tensor("noise")), c.Tensor("sigmas").Float32s(), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "latents", tensor.ToHost(out))
		if p.teacache {
			comp, skip := m.TeaCacheStats()
			t.Logf("TeaCache: %d computed, %d skipped", comp, skip)
			if comp != p.blockCalls || comp+skip != p.steps {
				t.Errorf("TeaCache: %d computed, %d skipped; the reference ran the blocks %d times in %d calls", comp, skip, p.blockCalls, p.steps)
			}
		}
	})
}
