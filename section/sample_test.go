package section

import (
	"context"
	"reflect"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
)

// countingModel counts the sampler's model calls.
type countingModel struct {
	*Transformer
	calls int
}

func (c *countingModel) Velocity(s *tensor.Scope, x *tensor.Tensor, ts, g float32, neg bool) *tensor.Tensor {
	c.calls++
	return c.Transformer.Velocity(s, x, ts, g, neg)
}

// TestGoldenSampler runs FramePack's sample_hunyuan cases end to end on the
// tiny transformer: noise from the seed, schedule, guidance, UniPC, TeaCache.
func TestGoldenSampler(t *testing.T) {
	golden.Run(t, "sampler", func(t *testing.T, c *golden.Case) {
		var p struct {
			cfg, gs, rs            float64
			steps, frames, h, w    int
			seed                   uint64
			teacache               bool
			thresh                 float32
			modelCalls, blockCalls int
		}
		c.Param("cfg", &p.cfg)
		c.Param("distilled_guidance", &p.gs)
		c.Param("guidance_rescale", &p.rs)
		c.Param("steps", &p.steps)
		c.Param("frames", &p.frames)
		c.Param("height", &p.h)
		c.Param("width", &p.w)
		c.Param("generator_seed", &p.seed)
		c.Param("teacache", &p.teacache)
		c.Param("teacache_rel_l1_thresh", &p.thresh)
		c.Param("model_calls", &p.modelCalls)
		c.Param("transformer_block_calls", &p.blockCalls)

		m, err := hunyuan.Load(c.ModelDir, testdevice.Backend(t), hunyuan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		// The cases were built with lws 3 and padding 1: the same layout
		// as Plan.Section gives.
		sec := Plan{WindowSize: 3, Paddings: []int{1}}.Section(0)
		for _, idx := range []struct {
			name string
			got  []int64
		}{
			{"latent_indices", sec.LatentIndices}, {"clean_latent_indices", sec.CleanIndices},
			{"clean_latent_2x_indices", sec.Clean2xIndices}, {"clean_latent_4x_indices", sec.Clean4xIndices},
		} {
			if want := c.Tensor(idx.name).Int64s(); !reflect.DeepEqual(idx.got, want) {
				t.Fatalf("%s: layout gives %v, case has %v", idx.name, idx.got, want)
			}
		}
		pos := Text{Embeds: c.Tensor("prompt_embeds"), Mask: c.Tensor("prompt_embeds_mask"), Pooled: c.Tensor("prompt_poolers")}
		tr := &Transformer{
			Model: m,
			Cond: sec.Inputs(pos, c.Tensor("image_embeddings"),
				c.Tensor("clean_latents"), c.Tensor("clean_latents_2x"), c.Tensor("clean_latents_4x")),
			Negative: Text{
				Embeds: c.Tensor("negative_prompt_embeds"),
				Mask:   c.Tensor("negative_prompt_embeds_mask"),
				Pooled: c.Tensor("negative_prompt_poolers"),
			},
		}
		noise := SectionNoise(sampler.NewTorchGenerator(p.seed), (p.frames+3)/4, p.h/8, p.w/8)
		c.Compare(t, "noise", noise)

		s := tensor.NewScope(m.Backend())
		defer s.Close()
		o := SampleOptions{
			Config: sampler.Config{Steps: p.steps, Guidance: sampler.Guidance{
				CFG: p.cfg, Rescale: p.rs, Distilled: p.gs}},
			TeaCache: p.teacache, TeaCacheThresh: p.thresh,
		}
		// Count model calls through a wrapper around the same transformer.
		cm := &countingModel{Transformer: tr}
		tr.Model.InitTeaCache(o.TeaCache, o.Steps, p.thresh)
		out, err := sampler.Sample(context.Background(), s, cm, s.To(noise), o.Config, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "latents", tensor.ToHost(out))
		computed, skipped := m.TeaCacheStats()
		if !p.teacache { // without TeaCache every call runs the blocks (and nothing is counted)
			if computed+skipped != 0 {
				t.Errorf("TeaCache off but counted %d/%d", computed, skipped)
			}
			computed = cm.calls
		}
		if cm.calls != p.modelCalls || computed != p.blockCalls || computed+skipped != p.modelCalls {
			t.Errorf("%d model calls (%d computed, %d skipped), want %d calls and %d computed",
				cm.calls, computed, skipped, p.modelCalls, p.blockCalls)
		}

		// SampleSection (the pipeline's entry) gives the same result.
		out2, err := SampleSection(context.Background(), s, tr, s.To(noise), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Compare(t, "latents", tensor.ToHost(out2))
	})
}
