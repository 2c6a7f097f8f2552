package hunyuan

import (
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

const normEps = 1e-6

// joint is what the attention of every block shares in one forward.
type joint struct {
	heads int
	// cos and sin are the RoPE tables of the joint sequence [image | text],
	// (R, L, head_dim) f32 with identity rows for the text tokens; R is 1
	// when every batch element has the same indices, else B.
	cos, sin *tensor.Tensor
	// keyMask (B, L) is nil for batch 1, where the text is cropped to its
	// valid tokens; otherwise it hides each element's text padding.
	keyMask *tensor.Tensor
	// sh, under sequence parallelism, is the division of the image tokens:
	// the blocks then see this rank's shard of them before the text, and
	// cos and sin are those rows' (ulysses.go).
	sh *shards
	// fp8 lets the attention run in FP8 (Options.FP8Attention).
	fp8 bool
}

// empty allocates q, k or v of the joint sequence: (B, L, heads, head_dim)
// for a model width of inner.
func (j *joint) empty(s *tensor.Scope, dt tensor.DType, b, l, inner int) *tensor.Tensor {
	return s.Empty(dt, b, l, j.heads, inner/j.heads)
}

// attend is scaled-dot-product attention over the joint sequence, returning
// (B, L, inner).
func (j *joint) attend(s *tensor.Scope, q, k, v *tensor.Tensor) *tensor.Tensor {
	p := tensor.AttnParams{KeyMask: j.keyMask, FP8: j.fp8}
	if j.sh != nil {
		return j.sh.attend(s, q, k, v, p)
	}
	o := s.Attention(q, k, v, p)
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

// feedForward is diffusers' FeedForward: net.0.proj, the activation, net.2.
type feedForward struct{ Proj, Out linear }

func (f *feedForward) load(p *weights.Builder, dim, hidden int) {
	f.Proj.load(p, "net.0.proj", hidden, dim)
	f.Out.load(p, "net.2", dim, hidden)
}

// gelu is FeedForward(activation_fn="gelu-approximate") without net.2's
// bias, which it returns (see kernels.project).
func (f *feedForward) gelu(s *tensor.Scope, ops kernels, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	up, b := ops.project(s, &f.Proj, x)
	h := ops.geluInPlace(s, up, b)
	y, bias = ops.project(s, &f.Out, h)
	s.Free(h, up)
	return y, bias
}

// silu is FeedForward(activation_fn="linear-silu").
func (f *feedForward) silu(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return f.Out.forward(s, s.SiLU(f.Proj.forward(s, x)))
}

// doubleBlock is HunyuanVideoTransformerBlock (transformer_blocks.N). The
// image and text streams each have their q, k and v projections fused into
// one linear layer (attn.to_q|to_k|to_v and attn.add_q_proj|add_k_proj|
// add_v_proj, outputs side by side).
type doubleBlock struct {
	Norm1, Norm1Context                  linear // norm1.linear, norm1_context.linear
	QKV, AddQKV                          linear
	NormQ, NormK, NormAddedQ, NormAddedK rmsNorm
	ToOut0, ToAddOut                     linear // attn.to_out.0, attn.to_add_out
	FF, FFContext                        feedForward
}

func (b *doubleBlock) load(p *weights.Builder, cfg Config) {
	d, hd := cfg.Inner(), cfg.AttentionHeadDim
	b.Norm1.load(p, "norm1.linear", 6*d, d)
	b.Norm1Context.load(p, "norm1_context.linear", 6*d, d)
	a := p.Sub("attn")
	b.QKV.loadCat(a, []string{"to_q", "to_k", "to_v"}, []int{d, d, d}, d)
	b.AddQKV.loadCat(a, []string{"add_q_proj", "add_k_proj", "add_v_proj"}, []int{d, d, d}, d)
	b.NormQ.load(a, "norm_q", hd)
	b.NormK.load(a, "norm_k", hd)
	b.NormAddedQ.load(a, "norm_added_q", hd)
	b.NormAddedK.load(a, "norm_added_k", hd)
	b.ToOut0.load(a, "to_out.0", d, d)
	b.ToAddOut.load(a, "to_add_out", d, d)
	b.FF.load(p.Sub("ff"), d, cfg.MLPDim())
	b.FFContext.load(p.Sub("ff_context"), d, cfg.MLPDim())
}

// forward runs the block on the image stream x (B, Lx, inner) and the text
// stream c (B, Lc, inner).
func (b *doubleBlock) forward(s *tensor.Scope, ops kernels, x, c, temb *tensor.Tensor, j *joint) (*tensor.Tensor, *tensor.Tensor) {
	// 1. Input normalization (AdaLayerNormZero): [shift_msa, scale_msa,
	// gate_msa, shift_mlp, scale_mlp, gate_mlp] for each stream.
	mx := adaChunks(s, &b.Norm1, temb, 6)
	mc := adaChunks(s, &b.Norm1Context, temb, 6)
	normX := ops.lnModulate(s, x, mx[0], mx[1])
	normC := ops.lnModulate(s, c, mc[0], mc[1])

	// 2. Joint attention
	attnX, attnC := b.attention(s, ops, normX, normC, j)
	s.Free(normX, normC)

	// 3. Modulation and residual connection
	x = ops.gatedAdd(s, x, attnX[0], attnX[1], mx[2])
	c = ops.gatedAdd(s, c, attnC[0], attnC[1], mc[2])
	s.Free(attnX[0], attnC[0])
	normX = ops.lnModulate(s, x, mx[3], mx[4])
	normC = ops.lnModulate(s, c, mc[3], mc[4])

	// 4. Feed-forward
	ffX, ffXBias := b.FF.gelu(s, ops, normX)
	s.Free(normX)
	nx := ops.gatedAdd(s, x, ffX, ffXBias, mx[5])
	s.Free(ffX, x)
	ffC, ffCBias := b.FFContext.gelu(s, ops, normC)
	nc := ops.gatedAdd(s, c, ffC, ffCBias, mc[5])
	s.Free(normC, ffC, c)
	return nx, nc
}

// attention is HunyuanAttnProcessorFlashAttnDouble: image q/k/v with q/k
// RMSNorm and RoPE, text q/k/v through the added projections with their own
// norms and no RoPE, one attention over [image | text], split back and
// projected out. Each output comes with the bias it still lacks (see
// kernels.project).
func (b *doubleBlock) attention(s *tensor.Scope, ops kernels, x, c *tensor.Tensor, j *joint) (outX, outC [2]*tensor.Tensor) {
	bs, lx, lc, d := x.Dim(0), x.Dim(1), c.Dim(1), x.Dim(2)
	l := lx + lc
	q, k, v := j.empty(s, x.DType(), bs, l, d), j.empty(s, x.DType(), bs, l, d), j.empty(s, x.DType(), bs, l, d)
	y, bias := ops.project(s, &b.QKV, x)
	ops.qkvInto(s, q, k, v, y, bias, 0, &b.NormQ, &b.NormK, j.cos, j.sin)
	s.Free(y)
	y, bias = ops.project(s, &b.AddQKV, c)
	ops.qkvInto(s, q, k, v, y, bias, lx, &b.NormAddedQ, &b.NormAddedK, nil, nil)
	s.Free(y)

	o := j.attend(s, q, k, v)
	s.Free(q, k, v)
	ox, oc := rowRange(s, o, 0, lx), rowRange(s, o, lx, l)
	outX[0], outX[1] = ops.project(s, &b.ToOut0, ox)
	outC[0], outC[1] = ops.project(s, &b.ToAddOut, oc)
	s.Free(o, ox, oc)
	return outX, outC
}

// singleBlock is HunyuanVideoSingleTransformerBlock
// (single_transformer_blocks.N). Its q, k, v and MLP input projections are
// fused into one linear layer (attn.to_q|to_k|to_v|proj_mlp).
type singleBlock struct {
	Norm         linear // norm.linear
	QKVMLP       linear
	NormQ, NormK rmsNorm
	ProjOut      linear
}

func (b *singleBlock) load(p *weights.Builder, cfg Config) {
	d, hd, mlp := cfg.Inner(), cfg.AttentionHeadDim, cfg.MLPDim()
	b.Norm.load(p, "norm.linear", 3*d, d)
	b.QKVMLP.loadCat(p, []string{"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}, []int{d, d, d, mlp}, d)
	a := p.Sub("attn")
	b.NormQ.load(a, "norm_q", hd)
	b.NormK.load(a, "norm_k", hd)
	b.ProjOut.load(p, "proj_out", d, d+mlp)
}

// forward runs the block on the joint stream h = [image | text] (B, L,
// inner). The reference concatenates the two streams at the start of each
// single block and splits them at its end; they stay joined here.
func (b *singleBlock) forward(s *tensor.Scope, ops kernels, h, temb *tensor.Tensor, j *joint) *tensor.Tensor {
	bs, l, d := h.Dim(0), h.Dim(1), h.Dim(2)
	mlp := b.QKVMLP.Weight.Dim(0) - 3*d

	// 1. Input normalization (AdaLayerNormZeroSingle): shift, scale, gate.
	m := adaChunks(s, &b.Norm, temb, 3)
	norm := ops.lnModulate(s, h, m[0], m[1])
	y, bias := ops.project(s, &b.QKVMLP, norm) // [q | k | v | mlp]
	s.Free(norm)

	// 2. Attention (pre_only: no output projection); RoPE on the image
	// tokens only, through the identity rows of the text. The MLP's GELU
	// goes straight into the output projection's input [attn | mlp].
	q, k, v := j.empty(s, h.DType(), bs, l, d), j.empty(s, h.DType(), bs, l, d), j.empty(s, h.DType(), bs, l, d)
	ops.qkvInto(s, q, k, v, y, bias, 0, &b.NormQ, &b.NormK, j.cos, j.sin)
	cat := s.Empty(h.DType(), bs, l, d+mlp)
	ops.geluInto(s, cat, d, y, bias, 3*d, mlp)
	s.Free(y)
	o := j.attend(s, q, k, v)
	s.Free(q, k, v)
	s.PlaceColumns(cat, 0, o)
	s.Free(o)

	// 3. Modulation and residual connection
	p, pBias := ops.project(s, &b.ProjOut, cat)
	s.Free(cat)
	out := ops.gatedAdd(s, h, p, pBias, m[2])
	s.Free(p)
	return out
}

// refinerBlock is HunyuanVideoIndividualTokenRefinerBlock
// (context_embedder.token_refiner.refiner_blocks.N).
type refinerBlock struct {
	Norm1, Norm2          layerNorm
	ToQ, ToK, ToV, ToOut0 linear // attn.*
	FF                    feedForward
	NormOut               linear // norm_out.linear
}

func (b *refinerBlock) load(p *weights.Builder, cfg Config) {
	d := cfg.Inner()
	b.Norm1.load(p, "norm1", d)
	b.Norm2.load(p, "norm2", d)
	a := p.Sub("attn")
	b.ToQ.load(a, "to_q", d, d)
	b.ToK.load(a, "to_k", d, d)
	b.ToV.load(a, "to_v", d, d)
	b.ToOut0.load(a, "to_out.0", d, d)
	b.FF.load(p.Sub("ff"), d, cfg.MLPDim())
	b.NormOut.load(p, "norm_out.linear", 2*d, d)
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
