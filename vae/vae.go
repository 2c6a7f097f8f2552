package vae

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"sync"

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

// VAE is a loaded AutoencoderKLHunyuanVideo.
type VAE struct {
	cfg   Config
	be    tensor.Backend
	dt    tensor.DType
	enc   *encoder
	dec   *decoder
	owned []*tensor.Tensor
}

// Load reads a Hugging Face folder (config.json and
// diffusion_pytorch_model.safetensors, any float dtype) onto be.
func Load(dir string, be tensor.Backend, opts Options) (*VAE, error) {
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("vae: %w", err)
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
	p := &ckptParams{ck: ck, be: be, dt: dt}
	v := build(cfg, be, dt, p, opts)
	if p.err != nil {
		v.Close()
		return nil, fmt.Errorf("vae: %w", p.err)
	}
	return v, nil
}

// ReadConfig reads and checks dir/config.json as Load does: absent keys take
// DefaultConfig's values; keys the model does not use (_class_name,
// _diffusers_version, ...) are ignored.
func ReadConfig(dir string) (Config, error) {
	cfg := DefaultConfig()
	if err := weights.ReadConfig(dir, &cfg); err != nil {
		return cfg, fmt.Errorf("vae: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("vae: %s: %w", filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// Plan lists the weights a model of config cfg reads, encoder and decoder
// (checkpoint names and shapes), without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vae: config: %w", err)
	}
	var specs []weights.Spec
	p := nameParams{specs: &specs}
	newEncoder(p, &cfg)
	newDecoder(p, &cfg)
	return specs, nil
}

// RandomWeights builds a VAE of config cfg with deterministic random
// weights (PyTorch's default initialisation: uniform ±1/√fan_in for convs
// and linears, GroupNorm 1 and 0), for benchmarks and shape tests.
func RandomWeights(cfg Config, be tensor.Backend, dt tensor.DType, seed uint64) (*VAE, error) {
	return RandomWeightsWith(cfg, be, Options{DType: dt}, seed)
}

// RandomWeightsWith is RandomWeights with load options (a half of the
// model may be left out); each weight's values depend only on the seed and
// its name.
func RandomWeightsWith(cfg Config, be tensor.Backend, opts Options, seed uint64) (*VAE, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vae: config: %w", err)
	}
	dt, err := computeDType(opts.DType)
	if err != nil {
		return nil, err
	}
	p := &randParams{be: be, dt: dt, seed: seed}
	v := build(cfg, be, dt, p, opts)
	if p.err != nil {
		v.Close()
		return nil, fmt.Errorf("vae: %w", p.err)
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
	return 0, fmt.Errorf("vae: compute dtype %s is not f32, f16 or bf16", dt)
}

func build(cfg Config, be tensor.Backend, dt tensor.DType, p params, opts Options) *VAE {
	v := &VAE{cfg: cfg, be: be, dt: dt}
	if !opts.NoEncoder {
		v.enc = newEncoder(p, &v.cfg)
	}
	if !opts.NoDecoder {
		v.dec = newDecoder(p, &v.cfg)
	}
	switch q := p.(type) {
	case *ckptParams:
		v.owned = q.loaded
	case *randParams:
		v.owned = q.loaded
	}
	return v
}

// Close frees the weights. Closing twice or closing a nil VAE does
// nothing; after Close, Encode and Decode fail (tensor.Catch gives the
// error) and the other methods still describe the model. A nil VAE gives
// zero values.
func (v *VAE) Close() {
	if v == nil {
		return
	}
	for _, t := range v.owned {
		tensor.Release(t)
	}
	v.owned = nil
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

// Backend is the backend the weights live on.
func (v *VAE) Backend() tensor.Backend {
	if v == nil {
		return nil
	}
	return v.be
}

// ScalingFactor is the factor latents are multiplied by after encoding
// (and divided by before decoding).
func (v *VAE) ScalingFactor() float32 {
	if v == nil {
		return 0
	}
	return v.cfg.ScalingFactor
}

// WeightBytes is the device memory the weights hold.
func (v *VAE) WeightBytes() int64 {
	if v == nil {
		return 0
	}
	var n int64
	for _, t := range v.owned {
		n += t.Bytes()
	}
	return n
}

// ckptParams loads weights from a checkpoint, converting to the compute
// dtype; the first failure is kept and later calls return placeholders.
type ckptParams struct {
	ck     *weights.Checkpoint
	be     tensor.Backend
	dt     tensor.DType
	err    error
	loaded []*tensor.Tensor
}

func (p *ckptParams) get(name string, shape ...int) *tensor.Tensor {
	if p.err != nil {
		return placeholder(p.dt)
	}
	t, err := p.ck.Load(p.be, name, p.dt, shape...)
	if err != nil {
		p.err = err
		return placeholder(p.dt)
	}
	p.loaded = append(p.loaded, t)
	return t
}

// placeholder stands in for a weight that failed to load (Load then fails).
func placeholder(dt tensor.DType) *tensor.Tensor { return tensor.New(dt, 0) }

// randParams makes random weights; each tensor's values depend only on the
// seed and its name.
type randParams struct {
	be     tensor.Backend
	dt     tensor.DType
	seed   uint64
	err    error
	loaded []*tensor.Tensor
}

func (p *randParams) get(name string, shape ...int) *tensor.Tensor {
	if p.err != nil {
		return placeholder(p.dt)
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	var lo, hi float32 // uniform in [lo, hi)
	switch {
	case hasSuffix(name, "norm1.weight", "norm2.weight", "group_norm.weight", "conv_norm_out.weight"):
		lo, hi = 1, 1
	case hasSuffix(name, "norm1.bias", "norm2.bias", "group_norm.bias", "conv_norm_out.bias"):
	default:
		// A bias is bounded by its weight's fan-in in PyTorch, which is not
		// known here; 1/√(channels) keeps the same scale.
		fanIn := shape[0]
		if len(shape) > 1 {
			fanIn = tensor.Numel(shape[1:])
		}
		hi = float32(1 / math.Sqrt(float64(fanIn)))
		lo = -hi
	}
	t, err := tensor.Alloc(p.be, p.dt, shape...)
	if err == nil {
		hb, direct := t.Buffer().(*tensor.HostBuffer)
		if direct && tensor.IsHostBacked(p.be) { // fill in place
			host, _ := tensor.FromBytes(p.dt, hb.Data()[:t.Bytes()], shape...)
			fillUniform(host, lo, hi, p.seed^h.Sum64())
		} else {
			host := tensor.New(p.dt, shape...)
			fillUniform(host, lo, hi, p.seed^h.Sum64())
			if err = p.be.Upload(t.Buffer(), 0, host.HostBytes()); err != nil {
				tensor.Release(t)
			}
		}
	}
	if err != nil {
		p.err = fmt.Errorf("random weight %s: %w", name, err)
		return placeholder(p.dt)
	}
	p.loaded = append(p.loaded, t)
	return t
}

// fillUniform fills a host f32/f16/bf16 tensor with uniform values in
// [lo, hi), in parallel chunks each seeded from seed and its index.
func fillUniform(t *tensor.Tensor, lo, hi float32, seed uint64) {
	const chunk = 1 << 16
	n := t.Numel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for c0 := 0; c0 < n; c0 += chunk {
		c1 := min(c0+chunk, n)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			x := seed ^ uint64(c0)*0x9e3779b97f4a7c15
			next := func() float32 { // splitmix64 → [0, 1)
				x += 0x9e3779b97f4a7c15
				z := x
				z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
				z = (z ^ z>>27) * 0x94d049bb133111eb
				z ^= z >> 31
				return float32(z>>40) / (1 << 24)
			}
			switch t.DType() {
			case tensor.F32:
				v := t.Float32s()[c0:c1]
				for i := range v {
					v[i] = lo + (hi-lo)*next()
				}
			case tensor.F16:
				v := t.Uint16s()[c0:c1]
				for i := range v {
					v[i] = tensor.F16FromF32(lo + (hi-lo)*next())
				}
			case tensor.BF16:
				v := t.Uint16s()[c0:c1]
				for i := range v {
					v[i] = tensor.BF16FromF32(lo + (hi-lo)*next())
				}
			}
		}()
	}
	wg.Wait()
}

func hasSuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if len(s) >= len(x) && s[len(s)-len(x):] == x {
			return true
		}
	}
	return false
}

// paramNames lists the weight names a config uses, sorted (for tests and
// diagnostics).
func paramNames(cfg Config) []string {
	specs, _ := Plan(cfg)
	var names []string
	for _, sp := range specs {
		names = append(names, sp.Name)
	}
	sort.Strings(names)
	return names
}

// nameParams records the weights asked for.
type nameParams struct{ specs *[]weights.Spec }

func (p nameParams) get(name string, shape ...int) *tensor.Tensor {
	*p.specs = append(*p.specs, weights.Spec{Name: name, Shape: append([]int(nil), shape...)})
	return placeholder(tensor.F32)
}

var errNoPart = errors.New("vae: that half of the model is not loaded (left out at Load, or the VAE is closed or nil)")
