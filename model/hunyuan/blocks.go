package hunyuan

import (
	"github.com/framepack-go/framepack/tensor"
)

const normEps = 1e-6

// joint is what the attention of every block shares in one forward.
type joint struct {
	heads int
	// cos and sin are the RoPE tables of the joint sequence [image | text],
	// (L, head_dim) f32, with identity rows for the text tokens. One pair
	// when every batch element has the same indices, else one per element.
	cos, sin []*tensor.Tensor
	// keyMask (B, L) is nil for batch 1, where the text is cropped to its
	// valid tokens; otherwise it hides each element's text padding.
	keyMask *tensor.Tensor
}

// heads reshapes (B, L, inner) to (B, L, heads, head_dim).
func (j *joint) split(x *tensor.Tensor) *tensor.Tensor {
	return x.Reshape(x.Dim(0), x.Dim(1), j.heads, -1)
}

// rope rotates q or k (B, L, H, D) of the joint sequence.
func (j *joint) rope(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	if len(j.cos) == 1 {
		return s.RoPE(x, j.cos[0], j.sin[0])
	}
	parts := make([]*tensor.Tensor, x.Dim(0))
	for b := range parts {
		parts[b] = s.RoPE(s.Slice(x, 0, b, b+1), j.cos[b], j.sin[b])
	}
	return s.Concat(0, parts...)
}

// attend is scaled-dot-product attention over the joint sequence, returning
// (B, L, inner).
func (j *joint) attend(s *tensor.Scope, q, k, v *tensor.Tensor) *tensor.Tensor {
	o := s.Attention(q, k, v, tensor.AttnParams{KeyMask: j.keyMask})
	return o.Reshape(o.Dim(0), o.Dim(1), -1)
}

// modulate is norm·(1 + scale) + shift, op by op as the reference (each
// step rounds to the compute dtype).
func modulate(s *tensor.Scope, norm, shift, scale *tensor.Tensor) *tensor.Tensor {
	return s.Add(s.Mul(norm, s.AddScalar(scale, 1)), shift)
}

// adaChunks computes linear(SiLU(temb)) (B, n·inner) and splits it into n
// (B, 1, inner) modulation vectors.
func adaChunks(s *tensor.Scope, lin *linear, temb *tensor.Tensor, n int) []*tensor.Tensor {
	emb := lin.forward(s, s.SiLU(temb))
	return s.Chunk(emb.Reshape(emb.Dim(0), 1, emb.Dim(1)), n, 2)
}

// adaNormZero is AdaLayerNormZero: LN(x)·(1 + scale_msa) + shift_msa and the
// rest of [shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp].
func adaNormZero(s *tensor.Scope, lin *linear, x, temb *tensor.Tensor) (norm, gateMSA, shiftMLP, scaleMLP, gateMLP *tensor.Tensor) {
	c := adaChunks(s, lin, temb, 6)
	norm = modulate(s, s.LayerNorm(x, nil, nil, normEps), c[0], c[1])
	return norm, c[2], c[3], c[4], c[5]
}

// feedForward is diffusers' FeedForward: net.0.proj, the activation, net.2.
type feedForward struct{ Proj, Out linear }

func (f *feedForward) params(p params, dim, hidden int) {
	f.Proj.params(p, "net.0.proj", hidden, dim)
	f.Out.params(p, "net.2", dim, hidden)
}

// gelu is FeedForward(activation_fn="gelu-approximate").
func (f *feedForward) gelu(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return f.Out.forward(s, s.GELUTanh(f.Proj.forward(s, x)))
}

// silu is FeedForward(activation_fn="linear-silu").
func (f *feedForward) silu(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return f.Out.forward(s, s.SiLU(f.Proj.forward(s, x)))
}

// doubleAttn is the dual-stream block's Attention with added_kv_proj_dim.
type doubleAttn struct {
	ToQ, ToK, ToV, AddQProj, AddKProj, AddVProj, ToOut0, ToAddOut linear
	NormQ, NormK, NormAddedQ, NormAddedK                          rmsNorm
}

// doubleBlock is HunyuanVideoTransformerBlock (transformer_blocks.N).
type doubleBlock struct {
	Norm1, Norm1Context linear // norm1.linear, norm1_context.linear
	Attn                doubleAttn
	FF, FFContext       feedForward
}

func (b *doubleBlock) params(p params, cfg Config) {
	d, hd := cfg.Inner(), cfg.AttentionHeadDim
	b.Norm1.params(p, "norm1.linear", 6*d, d)
	b.Norm1Context.params(p, "norm1_context.linear", 6*d, d)
	a := p.sub("attn")
	for _, l := range []struct {
		name string
		l    *linear
	}{{"to_q", &b.Attn.ToQ}, {"to_k", &b.Attn.ToK}, {"to_v", &b.Attn.ToV},
		{"add_q_proj", &b.Attn.AddQProj}, {"add_k_proj", &b.Attn.AddKProj}, {"add_v_proj", &b.Attn.AddVProj},
		{"to_out.0", &b.Attn.ToOut0}, {"to_add_out", &b.Attn.ToAddOut}} {
		l.l.params(a, l.name, d, d)
	}
	b.Attn.NormQ.params(a, "norm_q", hd)
	b.Attn.NormK.params(a, "norm_k", hd)
	b.Attn.NormAddedQ.params(a, "norm_added_q", hd)
	b.Attn.NormAddedK.params(a, "norm_added_k", hd)
	b.FF.params(p.sub("ff"), d, cfg.MLPDim())
	b.FFContext.params(p.sub("ff_context"), d, cfg.MLPDim())
}

// forward runs the block on the image stream x (B, Lx, inner) and the text
// stream c (B, Lc, inner).
func (b *doubleBlock) forward(s *tensor.Scope, x, c, temb *tensor.Tensor, j *joint) (*tensor.Tensor, *tensor.Tensor) {
	// 1. Input normalization
	normX, gateMSA, shiftMLP, scaleMLP, gateMLP := adaNormZero(s, &b.Norm1, x, temb)
	normC, cGateMSA, cShiftMLP, cScaleMLP, cGateMLP := adaNormZero(s, &b.Norm1Context, c, temb)

	// 2. Joint attention
	attnX, attnC := b.Attn.forward(s, normX, normC, j)

	// 3. Modulation and residual connection
	x = s.Add(x, s.Mul(attnX, gateMSA))
	c = s.Add(c, s.Mul(attnC, cGateMSA))
	normX = modulate(s, s.LayerNorm(x, nil, nil, normEps), shiftMLP, scaleMLP)
	normC = modulate(s, s.LayerNorm(c, nil, nil, normEps), cShiftMLP, cScaleMLP)

	// 4. Feed-forward
	x = s.Add(x, s.Mul(gateMLP, b.FF.gelu(s, normX)))
	c = s.Add(c, s.Mul(cGateMLP, b.FFContext.gelu(s, normC)))
	return x, c
}

// forward is HunyuanAttnProcessorFlashAttnDouble: image q/k/v with q/k
// RMSNorm and RoPE, text q/k/v through the added projections with their own
// norms and no RoPE, one attention over [image | text], split back.
func (a *doubleAttn) forward(s *tensor.Scope, x, c *tensor.Tensor, j *joint) (*tensor.Tensor, *tensor.Tensor) {
	q := a.NormQ.forward(s, j.split(a.ToQ.forward(s, x)))
	k := a.NormK.forward(s, j.split(a.ToK.forward(s, x)))
	v := j.split(a.ToV.forward(s, x))

	cq := a.NormAddedQ.forward(s, j.split(a.AddQProj.forward(s, c)))
	ck := a.NormAddedK.forward(s, j.split(a.AddKProj.forward(s, c)))
	cv := j.split(a.AddVProj.forward(s, c))

	// RoPE after the concatenation: the tables' text rows are the identity.
	q = j.rope(s, s.Concat(1, q, cq))
	k = j.rope(s, s.Concat(1, k, ck))
	v = s.Concat(1, v, cv)

	o := j.attend(s, q, k, v)
	lx := x.Dim(1)
	ox, oc := s.Slice(o, 1, 0, lx), s.Slice(o, 1, lx, o.Dim(1))
	return a.ToOut0.forward(s, ox), a.ToAddOut.forward(s, oc)
}

// singleBlock is HunyuanVideoSingleTransformerBlock
// (single_transformer_blocks.N).
type singleBlock struct {
	Norm             linear // norm.linear
	ToQ, ToK, ToV    linear // attn.to_q/k/v
	NormQ, NormK     rmsNorm
	ProjMLP, ProjOut linear
}

func (b *singleBlock) params(p params, cfg Config) {
	d, hd, mlp := cfg.Inner(), cfg.AttentionHeadDim, cfg.MLPDim()
	b.Norm.params(p, "norm.linear", 3*d, d)
	a := p.sub("attn")
	b.ToQ.params(a, "to_q", d, d)
	b.ToK.params(a, "to_k", d, d)
	b.ToV.params(a, "to_v", d, d)
	b.NormQ.params(a, "norm_q", hd)
	b.NormK.params(a, "norm_k", hd)
	b.ProjMLP.params(p, "proj_mlp", mlp, d)
	b.ProjOut.params(p, "proj_out", d, d+mlp)
}

func (b *singleBlock) forward(s *tensor.Scope, x, c, temb *tensor.Tensor, j *joint) (*tensor.Tensor, *tensor.Tensor) {
	lx := x.Dim(1)
	h := s.Concat(1, x, c)
	residual := h

	// 1. Input normalization (AdaLayerNormZeroSingle)
	m := adaChunks(s, &b.Norm, temb, 3)
	norm, gate := modulate(s, s.LayerNorm(h, nil, nil, normEps), m[0], m[1]), m[2]
	mlp := s.GELUTanh(b.ProjMLP.forward(s, norm))

	// 2. Attention (pre_only: no output projection); RoPE on the image
	// tokens only, through the identity rows of the text.
	q := j.rope(s, b.NormQ.forward(s, j.split(b.ToQ.forward(s, norm))))
	k := j.rope(s, b.NormK.forward(s, j.split(b.ToK.forward(s, norm))))
	v := j.split(b.ToV.forward(s, norm))
	attn := j.attend(s, q, k, v)

	// 3. Modulation and residual connection
	h = s.Mul(gate, b.ProjOut.forward(s, s.Concat(2, attn, mlp)))
	h = s.Add(h, residual)
	return s.Slice(h, 1, 0, lx), s.Slice(h, 1, lx, h.Dim(1))
}

// refinerBlock is HunyuanVideoIndividualTokenRefinerBlock
// (context_embedder.token_refiner.refiner_blocks.N).
type refinerBlock struct {
	Norm1, Norm2          layerNorm
	ToQ, ToK, ToV, ToOut0 linear // attn.*
	FF                    feedForward
	NormOut               linear // norm_out.linear
}

func (b *refinerBlock) params(p params, cfg Config) {
	d := cfg.Inner()
	b.Norm1.params(p, "norm1", d)
	b.Norm2.params(p, "norm2", d)
	a := p.sub("attn")
	b.ToQ.params(a, "to_q", d, d)
	b.ToK.params(a, "to_k", d, d)
	b.ToV.params(a, "to_v", d, d)
	b.ToOut0.params(a, "to_out.0", d, d)
	b.FF.params(p.sub("ff"), d, cfg.MLPDim())
	b.NormOut.params(p, "norm_out.linear", 2*d, d)
}

// forward runs the block on x (B, L, inner) with the attention's mask in ap.
func (b *refinerBlock) forward(s *tensor.Scope, x, temb *tensor.Tensor, heads int, ap tensor.AttnParams) *tensor.Tensor {
	norm := b.Norm1.forward(s, x)
	split := func(t *tensor.Tensor) *tensor.Tensor { return t.Reshape(t.Dim(0), t.Dim(1), heads, -1) }
	o := s.Attention(split(b.ToQ.forward(s, norm)), split(b.ToK.forward(s, norm)), split(b.ToV.forward(s, norm)), ap)
	attn := b.ToOut0.forward(s, o.Reshape(o.Dim(0), o.Dim(1), -1))

	g := adaChunks(s, &b.NormOut, temb, 2) // gate_msa, gate_mlp
	x = s.Add(x, s.Mul(attn, g[0]))
	x = s.Add(x, s.Mul(b.FF.silu(s, b.Norm2.forward(s, x)), g[1]))
	return x
}
