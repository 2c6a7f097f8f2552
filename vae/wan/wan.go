package wan

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/model"
	"github.com/framepack-go/framepack/weights"
)

// Options configure Load: the compute dtype (weights are converted at
// load: F32, F16 or BF16; Invalid means F32), and NoEncoder / NoDecoder
// skip loading that half (its calls then fail).
type Options = model.Options

// VAE is a loaded AutoencoderKLWan.
type VAE struct {
	m *model.Loaded[Config, encoder, decoder]
}

var arch = &model.Arch[Config, *Config, encoder, decoder]{
	Name: "wan vae", Default: DefaultConfig, NewEncoder: newEncoder, NewDecoder: newDecoder,
}

// model is v's loaded model, nil for a nil VAE.
func (v *VAE) model() *model.Loaded[Config, encoder, decoder] {
	if v == nil {
		return nil
	}
	return v.m
}

var errNoPart = errors.New("wan vae: that half of the model is not loaded (left out at Load, or the VAE is closed or nil)")

// Load reads a Hugging Face folder (config.json and
// diffusion_pytorch_model.safetensors, any float dtype) onto be.
func Load(dir string, be tensor.Backend, opts Options) (*VAE, error) {
	return wrap(arch.Load(dir, be, opts))
}

func wrap(m *model.Loaded[Config, encoder, decoder], err error) (*VAE, error) {
	if err != nil {
		return nil, err
	}
	return &VAE{m}, nil
}

// ReadConfig reads and checks dir/config.json as Load does: absent keys
// take DefaultConfig's values (diffusers' defaults: scale factors 8 and 4);
// a key present as null reads as null; keys the model does not use are
// ignored.
func ReadConfig(dir string) (Config, error) { return arch.ReadConfig(dir) }

// Plan lists the weights a model of config cfg reads, encoder and decoder
// (checkpoint names and shapes), without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) { return arch.Plan(cfg) }

// RandomWeights builds a VAE of config cfg with deterministic random
// weights (PyTorch's default scale: uniform ±1/√fan_in; the norms' γ 1),
// for benchmarks and shape tests. Each weight depends only on the seed and
// its name.
func RandomWeights(cfg Config, be tensor.Backend, opts Options, seed uint64) (*VAE, error) {
	return wrap(arch.Random(cfg, be, opts, func(dt tensor.DType) *weights.Builder {
		return weights.NewBuilder(&randSource{be: be, seed: seed}, dt)
	}))
}

// Close frees the weights; Encode and Decode fail afterwards. Closing twice
// or a nil VAE does nothing.
func (v *VAE) Close() { v.model().Close() }

// Config is the model's configuration.
func (v *VAE) Config() Config { return v.model().Config() }

// DType is the compute dtype.
func (v *VAE) DType() tensor.DType { return v.model().DType() }

// WeightBytes is the memory the weights hold on the backend.
func (v *VAE) WeightBytes() int64 { return v.model().WeightBytes() }

// Normalize maps raw latents (what Encode's posterior gives) to the
// normalized latents Wan's pipelines sample in: (z − latents_mean) /
// latents_std per channel. Host f32 in and out; a config without
// latents_mean/std leaves z unchanged.
func (c *Config) Normalize(z *tensor.Tensor) *tensor.Tensor { return c.affine(z, false) }

// Denormalize is Normalize's inverse, z·latents_std + latents_mean: what
// Wan's pipelines do to latents before AutoencoderKLWan.decode.
func (c *Config) Denormalize(z *tensor.Tensor) *tensor.Tensor { return c.affine(z, true) }

func (c *Config) affine(z *tensor.Tensor, inverse bool) *tensor.Tensor {
	src := z.ToFloat32()
	out := tensor.New(tensor.F32, z.Shape()...)
	dst := out.Float32s()
	copy(dst, src)
	if len(c.LatentsMean) == 0 || z.Rank() < 2 || z.Dim(1) != len(c.LatentsMean) {
		return out
	}
	plane := z.Numel() / (z.Dim(0) * z.Dim(1))
	for i := range dst {
		ch := i / plane % z.Dim(1)
		m, s := c.LatentsMean[ch], c.LatentsStd[ch]
		if inverse {
			// The pipelines multiply by 1/std's reciprocal: std itself.
			dst[i] = src[i]/(1/s) + m
		} else {
			dst[i] = (src[i] - m) * (1 / s)
		}
	}
	return out
}

// randSource makes random weights: PyTorch's default scale, uniform in
// ±1/√fan_in, and the norms' γ 1.
type randSource struct {
	be   tensor.Backend
	seed uint64
}

func (p *randSource) Make(w weights.Weight) (*tensor.Tensor, error) {
	name, shape, dt := w.Name, w.Shape, w.DType
	h := fnv.New64a()
	h.Write([]byte(name))
	x := p.seed ^ h.Sum64()
	var lo, hi float32 = 1, 1 // γ
	if len(name) < 6 || name[len(name)-6:] != ".gamma" {
		// A bias's bound is its weight's fan-in, unknown here; its own
		// size keeps the scale.
		fanIn := shape[0]
		if len(shape) > 1 {
			fanIn = tensor.Numel(shape[1:])
		}
		hi = float32(1 / math.Sqrt(float64(fanIn)))
		lo = -hi
	}
	host := tensor.New(tensor.F32, shape...)
	vals := host.Float32s()
	for i := range vals {
		x += 0x9e3779b97f4a7c15 // splitmix64
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		vals[i] = lo + (hi-lo)*float32(z>>40)/(1<<24)
	}
	if dt != tensor.F32 {
		conv := tensor.New(dt, shape...)
		if dt == tensor.F16 {
			tensor.NarrowF16(conv.Uint16s(), vals)
		} else {
			tensor.NarrowBF16(conv.Uint16s(), vals)
		}
		host = conv
	}
	t, err := tensor.Alloc(p.be, dt, shape...)
	if err == nil {
		if err = p.be.Upload(t.Buffer(), 0, host.HostBytes()); err != nil {
			tensor.Release(t)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("random weight %s: %w", name, err)
	}
	return t, nil
}
