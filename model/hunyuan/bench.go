package hunyuan

import (
	"math/rand/v2"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// RandomModel makes a model of any config with random weights made in
// process (for benchmarks: the real config needs no 25 GB download), drawn
// by weights.FillRandom: the values depend only on seed and the weight's
// name; in bf16 they are those randmodel writes with the same seed.
func RandomModel(cfg Config, be tensor.Backend, opts Options, seed uint64) (*Model, error) {
	m, err := newModel(cfg, be, opts)
	if err != nil {
		return nil, err
	}
	if err := m.build(&weights.RandomSource{Be: be, Seed: seed}); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Section is the shape of one FramePack section call.
type Section struct {
	Batch            int
	LatentH, LatentW int // latent size (pixels / 8), even
	WindowSize       int // latent_window_size: noisy latent frames
	LatentPadding    int // the section's latent_padding (shifts the indices)
	ImageTokens      int // SigLIP tokens
	TextTokens       int // padded text length
	ValidText        int // valid text tokens
}

// BenchSection is the benchmark section: 544×704 (latent 68×88),
// 9 noisy frames, clean 2 + 2 + 16 frames, 729 SigLIP tokens, 512 text
// tokens of which 100 are valid.
func BenchSection() Section {
	return Section{Batch: 1, LatentH: 68, LatentW: 88, WindowSize: 9, ImageTokens: 729, TextTokens: 512, ValidText: 100}
}

// SectionInputs builds the inputs of one section call with random latents
// and conditioning (host f32 tensors) and frame indices as FramePack builds
// them: [start 1 | padding | window | end 1 | 2x 2 | 4x 16], the clean
// latents being the start and end frames.
func SectionInputs(cfg Config, sec Section, seed uint64) *Inputs {
	r := rand.New(rand.NewPCG(seed, 0x5ec))
	randn := func(shape ...int) *tensor.Tensor { return tensor.RandN(r, shape...) }
	b, h, w := sec.Batch, sec.LatentH, sec.LatentW
	next := int64(0)
	take := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = next
			next++
		}
		return out
	}
	pre := take(1)
	take(sec.LatentPadding)
	latent := take(sec.WindowSize)
	post := take(1)
	idx2x, idx4x := take(2), take(16)

	in := &Inputs{
		HiddenStates:        randn(b, cfg.InChannels, sec.WindowSize, h, w),
		EncoderHiddenStates: randn(b, sec.TextTokens, cfg.TextEmbedDim),
		PooledProjections:   randn(b, cfg.PooledProjectionDim),
		LatentIndices:       latent,
	}
	mask := make([]float32, b*sec.TextTokens)
	for i := 0; i < b; i++ {
		in.Timestep = append(in.Timestep, 1000)
		in.Guidance = append(in.Guidance, 10000)
		for j := 0; j < sec.ValidText; j++ {
			mask[i*sec.TextTokens+j] = 1
		}
	}
	in.EncoderAttentionMask = tensor.FromFloat32(mask, b, sec.TextTokens)
	if cfg.HasImageProj {
		in.ImageEmbeddings = randn(b, sec.ImageTokens, cfg.ImageProjDim)
	}
	if cfg.HasCleanXEmbedder {
		in.CleanLatents, in.CleanLatentIndices = randn(b, 16, 2, h, w), append(pre, post...)
		in.CleanLatents2x, in.CleanLatent2xIndices = randn(b, 16, 2, h, w), idx2x
		in.CleanLatents4x, in.CleanLatent4xIndices = randn(b, 16, 16, h, w), idx4x
	}
	return in
}

// Tokens is the length of the image stream and of the joint text context
// (SigLIP + valid text) of a section call.
func (c Config) Tokens(sec Section) (img, txt int) {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	h, w := sec.LatentH/2, sec.LatentW/2
	img = sec.WindowSize * h * w
	if c.HasCleanXEmbedder {
		img += 2*h*w + ceil(h, 2)*ceil(w, 2) + 4*ceil(h, 4)*ceil(w, 4)
	}
	txt = sec.ValidText
	if c.HasImageProj {
		txt += sec.ImageTokens
	}
	return img, txt
}

// BlockFLOPs counts the floating-point operations of the double and single
// blocks of one forward (batch 1): GEMMs and attention (QKᵀ and PV), the
// work that dominates; norms, modulation and embedders are left out.
func (c Config) BlockFLOPs(img, txt int) (gemm, attn float64) {
	d, m := float64(c.Inner()), float64(c.MLPDim())
	l := float64(img + txt)
	double := l * (2*4*d*d + 2*2*d*m)           // q, k, v, out; ff up and down
	single := l * (2*3*d*d + 2*d*m + 2*(d+m)*d) // q, k, v; proj_mlp; proj_out
	gemm = float64(c.NumLayers)*double + float64(c.NumSingleLayers)*single
	attn = float64(c.NumLayers+c.NumSingleLayers) * 4 * l * l * d
	return gemm, attn
}
