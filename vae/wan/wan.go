package wan

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"path/filepath"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Options configure Load.
type Options struct {
	// DType is the compute dtype (weights are converted at load): F32, F16
	// or BF16. Invalid means F32.
	DType tensor.DType
	// NoEncoder / NoDecoder skip loading that half (its calls then fail).
	NoEncoder, NoDecoder bool
}

// VAE is a loaded AutoencoderKLWan.
type VAE struct {
	cfg    Config
	be     tensor.Backend
	dt     tensor.DType
	enc    *encoder
	dec    *decoder
	loaded *weights.Builder
}

var errNoPart = errors.New("wan vae: that half of the model is not loaded (left out at Load, or the VAE is closed or nil)")

// Load reads a Hugging Face folder (config.json and
// diffusion_pytorch_model.safetensors, any float dtype) onto be.
func Load(dir string, be tensor.Backend, opts Options) (*VAE, error) {
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("wan vae: %w", err)
	}
	defer ck.Close()
	cfg, err := ReadConfig(ck.Dir())
	if err != nil {
		return nil, err
	}
	dt, err := computeDType(opts.DType)
	if err != nil {
		return nil, err
	}
	// The weights are read in parallel; build runs on a plan first.
	var v *VAE
	weights.Build(&weights.CheckpointSource{Ck: ck, Be: be}, be, dt, weights.LoadOptions{},
		func(p *weights.Builder) { v, err = build(cfg, be, p, opts) })
	if err != nil {
		return nil, fmt.Errorf("wan vae: %s: %w", dir, err)
	}
	return v, nil
}

// ReadConfig reads and checks dir/config.json as Load does: absent keys
// take DefaultConfig's values; keys the model does not use are ignored.
func ReadConfig(dir string) (Config, error) {
	// Absent keys keep diffusers' defaults (scale factors 8 and 4); a
	// key present as null reads as null.
	cfg := DefaultConfig()
	if err := weights.ReadConfig(dir, &cfg); err != nil {
		return cfg, fmt.Errorf("wan vae: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("wan vae: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// Plan lists the weights a model of config cfg reads, encoder and decoder
// (checkpoint names and shapes), without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("wan vae: config: %w", err)
	}
	p := weights.NewPlan()
	newEncoder(p, &cfg)
	newDecoder(p, &cfg)
	return p.Specs(), nil
}

// RandomWeights builds a VAE of config cfg with deterministic random
// weights (PyTorch's default scale: uniform ±1/√fan_in; the norms' γ 1),
// for benchmarks and shape tests. Each weight depends only on the seed and
// its name.
func RandomWeights(cfg Config, be tensor.Backend, opts Options, seed uint64) (*VAE, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("wan vae: config: %w", err)
	}
	dt, err := computeDType(opts.DType)
	if err != nil {
		return nil, err
	}
	v, err := build(cfg, be, weights.NewBuilder(&randSource{be: be, seed: seed}, dt), opts)
	if err != nil {
		return nil, fmt.Errorf("wan vae: %w", err)
	}
	return v, nil
}

func computeDType(dt tensor.DType) (tensor.DType, error) {
	switch dt {
	case tensor.Invalid:
		return tensor.F32, nil
	case tensor.F32, tensor.F16, tensor.BF16:
		return dt, nil
	}
	return 0, fmt.Errorf("wan vae: compute dtype %s is not f32, f16 or bf16", dt)
}

// build makes the encoder and decoder from p's weights.
func build(cfg Config, be tensor.Backend, p *weights.Builder, opts Options) (*VAE, error) {
	v := &VAE{cfg: cfg, be: be, dt: p.DType(), loaded: p}
	if !opts.NoEncoder {
		v.enc = newEncoder(p, &v.cfg)
	}
	if !opts.NoDecoder {
		v.dec = newDecoder(p, &v.cfg)
	}
	if err := p.Err(); err != nil {
		p.Release()
		return nil, err
	}
	return v, nil
}

// Close frees the weights; Encode and Decode fail afterwards. Closing twice
// or a nil VAE does nothing.
func (v *VAE) Close() {
	if v == nil {
		return
	}
	v.loaded.Release()
	v.enc, v.dec = nil, nil
}

// Config is the model's configuration.
func (v *VAE) Config() Config {
	if v == nil {
		return Config{}
	}
	return v.cfg
}

// DType is the compute dtype.
func (v *VAE) DType() tensor.DType {
	if v == nil {
		return tensor.Invalid
	}
	return v.dt
}

// WeightBytes is the memory the weights hold on the backend.
func (v *VAE) WeightBytes() int64 {
	if v == nil {
		return 0
	}
	return v.loaded.Bytes()
}

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
