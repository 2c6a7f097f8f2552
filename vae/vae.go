package vae

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

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
	cfg    Config
	be     tensor.Backend
	dt     tensor.DType
	enc    *encoder
	dec    *decoder
	loaded *weights.Builder
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
	// The weights are read in parallel; build runs on a plan first.
	var v *VAE
	weights.Build(&weights.CheckpointSource{Ck: ck, Be: be}, be, dt, weights.LoadOptions{},
		func(p *weights.Builder) { v, err = build(cfg, be, p, opts) })
	return v, err
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
	p := weights.NewPlan()
	newEncoder(p, &cfg)
	newDecoder(p, &cfg)
	return p.Specs(), nil
}

// RandomWeights builds a VAE of config cfg with deterministic random
// weights (weights.FillRandom's initialisation: convs uniform in ±1/√fan_in,
// linears normal(0, 0.02), GroupNorm 1 and 0, biases 0), for benchmarks and shape
// tests.
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
	return build(cfg, be, weights.Random(be, dt, seed), opts)
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
		return nil, fmt.Errorf("vae: %w", err)
	}
	return v, nil
}

// Close frees the weights. Closing twice or closing a nil VAE does
// nothing; after Close, Encode and Decode fail (tensor.Catch gives the
// error) and the other methods still describe the model. A nil VAE gives
// zero values.
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

// WeightTensors is every allocation holding the weights (for charging
// them to an owner); none for a nil VAE.
func (v *VAE) WeightTensors() []*tensor.Tensor {
	if v == nil {
		return nil
	}
	return v.loaded.Held()
}

// WeightBytes is the device memory the weights hold.
func (v *VAE) WeightBytes() int64 {
	if v == nil {
		return 0
	}
	return v.loaded.Bytes()
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

var errNoPart = errors.New("vae: that half of the model is not loaded (left out at Load, or the VAE is closed or nil)")
