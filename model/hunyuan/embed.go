package hunyuan

import (
	"math"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// patchConv is a Conv3d whose kernel equals its stride (x_embedder.proj and
// the clean-latent embedders).
type patchConv struct {
	Weight, Bias *tensor.Tensor
	k            [3]int
}

func (c *patchConv) load(p *weights.Builder, name string, out, in int, k [3]int) {
	c.k = k
	c.Weight = p.Get(name+".weight", out, in, k[0], k[1], k[2])
	c.Bias = p.Get(name+".bias", out)
}

// tokens applies the convolution to x (B, C, T, H, W) (sizes multiples of
// the kernel) and flattens the result to (B, T'·H'·W', out), t-major as the
// reference's flatten(2).transpose(1, 2). A convolution with stride = kernel
// is a GEMM over non-overlapping patches, so it runs as one: each patch is
// flattened in the weight's (c, kt, kh, kw) order.
func (c *patchConv) tokens(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	b, ch, t, h, w := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3), x.Dim(4)
	kt, kh, kw := c.k[0], c.k[1], c.k[2]
	if t%kt != 0 || h%kh != 0 || w%kw != 0 {
		tensor.Fail("patch_embed", "input %v is not a multiple of the kernel %v", x.Shape(), c.k)
	}
	nt, nh, nw := t/kt, h/kh, w/kw
	// (B, C, nt, kt, nh, kh, nw, kw) → (B, nt, nh, nw, C, kt, kh, kw) in two
	// copies of rank ≤ 6: first kw next to kh within each patch row, then
	// the patches out of the channels.
	rows := s.Permute(x.Reshape(b*ch*t*nh, kh, nw, kw), 0, 2, 1, 3)
	patches := s.Permute(rows.Reshape(b, ch, nt, kt, nh*nw, kh*kw), 0, 2, 4, 1, 3, 5)
	patches = patches.Reshape(b, nt*nh*nw, ch*kt*kh*kw)
	out := c.Weight.Dim(0)
	return s.Linear(patches, c.Weight.Reshape(out, ch*kt*kh*kw), c.Bias)
}

// padFor3dConv replicate-pads the end of T, H and W of x (B, C, T, H, W) up
// to multiples of k (FramePack's pad_for_3d_conv).
func padFor3dConv(s *tensor.Scope, x *tensor.Tensor, k [3]int) *tensor.Tensor {
	after := make([]int, 3)
	need := false
	for i := 0; i < 3; i++ {
		n := x.Dim(2 + i)
		after[i] = (k[i] - n%k[i]) % k[i]
		need = need || after[i] > 0
	}
	if !need {
		return x
	}
	return s.Pad(x, []int{0, 0, 0}, after, tensor.PadReplicate)
}

// mlp2 is linear_1 → SiLU → linear_2: diffusers' TimestepEmbedding and
// PixArtAlphaTextProjection(act "silu") have this shape and these names.
type mlp2 struct{ Linear1, Linear2 linear }

func (m *mlp2) load(p *weights.Builder, in, hidden, out int) {
	m.Linear1.load(p, "linear_1", hidden, in)
	m.Linear2.load(p, "linear_2", out, hidden)
}

func (m *mlp2) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return m.Linear2.forward(s, s.SiLU(m.Linear1.forward(s, x)))
}

// timestepProj is diffusers' Timesteps(256, flip_sin_to_cos=True, shift 0):
// [cos(t·e_i), sin(t·e_i)] with e_i = exp(−ln(10000)·i/128), in float32
// arithmetic as torch does it, as a host (B, 256) tensor.
func timestepProj(ts []float32) *tensor.Tensor {
	const half = 128
	var freq [half]float32
	negLn := -float32(math.Log(10000))
	for i := range freq {
		e := negLn * float32(i) / half
		freq[i] = float32(math.Exp(float64(e)))
	}
	out := make([]float32, len(ts)*2*half)
	for b, t := range ts {
		row := out[b*2*half:]
		for i, f := range freq {
			arg := float64(t * f)
			row[i] = float32(math.Cos(arg))
			row[half+i] = float32(math.Sin(arg))
		}
	}
	return tensor.FromFloat32(out, len(ts), 2*half)
}

// timeGuidanceTextEmbed is CombinedTimestepGuidanceTextProjEmbeddings
// (time_text_embed): temb = (t_emb + g_emb) + text_embedder(pooled).
type timeGuidanceTextEmbed struct {
	TimestepEmbedder, GuidanceEmbedder, TextEmbedder mlp2
}

func (e *timeGuidanceTextEmbed) load(p *weights.Builder, inner, pooledDim int) {
	e.TimestepEmbedder.load(p.Sub("timestep_embedder"), 256, inner, inner)
	e.GuidanceEmbedder.load(p.Sub("guidance_embedder"), 256, inner, inner)
	e.TextEmbedder.load(p.Sub("text_embedder"), pooledDim, inner, inner)
}

// forward computes temb in f32 (the weights are kept in f32, see
// Model.loadGlobals) from the f32 sinusoids and pooled features, and returns it
// in dt.
func (e *timeGuidanceTextEmbed) forward(s *tensor.Scope, timestep, guidance []float32, pooled *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	tEmb := e.TimestepEmbedder.forward(s, s.To(timestepProj(timestep)))
	gEmb := e.GuidanceEmbedder.forward(s, s.To(timestepProj(guidance)))
	return s.Cast(s.Add(s.Add(tEmb, gEmb), e.TextEmbedder.forward(s, s.Cast(pooled, tensor.F32))), dt)
}

// timeTextEmbed is CombinedTimestepTextProjEmbeddings (the token refiner's
// conditioning; no guidance term).
type timeTextEmbed struct{ TimestepEmbedder, TextEmbedder mlp2 }

func (e *timeTextEmbed) load(p *weights.Builder, inner, pooledDim int) {
	e.TimestepEmbedder.load(p.Sub("timestep_embedder"), 256, inner, inner)
	e.TextEmbedder.load(p.Sub("text_embedder"), pooledDim, inner, inner)
}

// forward computes temb in f32 like timeGuidanceTextEmbed's and returns
// it in dt.
func (e *timeTextEmbed) forward(s *tensor.Scope, timestep []float32, pooled *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	tEmb := e.TimestepEmbedder.forward(s, s.To(timestepProj(timestep)))
	return s.Cast(s.Add(tEmb, e.TextEmbedder.forward(s, s.Cast(pooled, tensor.F32))), dt)
}

// clipVisionProjection is image_projection: up → SiLU → down, SigLIP
// features to the model width.
type clipVisionProjection struct{ Up, Down linear }

func (c *clipVisionProjection) load(p *weights.Builder, in, inner int) {
	c.Up.load(p, "up", 3*inner, in)
	c.Down.load(p, "down", inner, 3*inner)
}

func (c *clipVisionProjection) forward(s *tensor.Scope, x *tensor.Tensor) *tensor.Tensor {
	return c.Down.forward(s, s.SiLU(c.Up.forward(s, x)))
}
