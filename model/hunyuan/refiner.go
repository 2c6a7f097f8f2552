package hunyuan

import (
	"strconv"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// tokenRefiner is HunyuanVideoTokenRefiner (context_embedder): the LLaMA
// states projected to the model width and refined by self-attention blocks
// conditioned on the timestep and the masked mean of the text.
type tokenRefiner struct {
	TimeTextEmbed timeTextEmbed
	ProjIn        linear
	Blocks        []refinerBlock // token_refiner.refiner_blocks.N
}

func (r *tokenRefiner) load(p *weights.Builder, cfg Config) {
	r.TimeTextEmbed.load(p.Sub("time_text_embed").F32(), cfg.Inner(), cfg.TextEmbedDim) // see Model.loadGlobals
	r.ProjIn.load(p, "proj_in", cfg.Inner(), cfg.TextEmbedDim)
	if len(r.Blocks) != cfg.NumRefinerLayers {
		r.Blocks = make([]refinerBlock, cfg.NumRefinerLayers)
	}
	for i := range r.Blocks {
		r.Blocks[i].load(p.Sub("token_refiner.refiner_blocks."+strconv.Itoa(i)), cfg)
	}
}

// forward refines x (B, L, text_embed_dim), whose first n[b] tokens are
// valid; ap masks the attention. Forward passes only the valid tokens, and
// for B > 1 padding after the shorter texts hidden by a key mask.
//
// The reference runs the refiner over the whole padded text with the mask
// M[i,j] = valid_i ∧ valid_j (plus key 0 always visible). A valid query
// then sees exactly the valid keys, so valid tokens come out the same when
// the padding is cut off (batch 1) or hidden by a key mask (B > 1); padded
// tokens differ, but nothing reads them: the blocks hide them as keys and
// the output keeps image tokens only.
func (r *tokenRefiner) forward(s *tensor.Scope, x *tensor.Tensor, timestep []float32, n []int, ap tensor.AttnParams, heads int) *tensor.Tensor {
	// Masked mean of the raw features, in float32 as the reference, then
	// back to the compute dtype: (Σ_i mask_i·x_i) / Σ_i mask_i.
	b, l := x.Dim(0), x.Dim(1)
	w := make([]float32, b*l)
	cnt := make([]float32, b)
	for i := 0; i < b; i++ {
		for t := 0; t < n[i]; t++ {
			w[i*l+t] = 1
		}
		cnt[i] = float32(n[i])
	}
	sum := s.MatMul(s.To(tensor.FromFloat32(w, b, 1, l)), s.Cast(x, tensor.F32), false, false)
	pooled := s.Div(sum, s.To(tensor.FromFloat32(cnt, b, 1, 1)))
	temb := r.TimeTextEmbed.forward(s, timestep, pooled.Reshape(b, -1), x.DType())
	h := r.ProjIn.forward(s, x)
	for i := range r.Blocks {
		h = r.Blocks[i].forward(s, h, temb, heads, ap)
	}
	return h
}
