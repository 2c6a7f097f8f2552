package vae

import (
	"errors"
	"sort"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae/internal/model"
	"github.com/framepack-go/framepack/weights"
)

// Options configure Load: the compute dtype (weights are converted at
// load: F32, F16 or BF16; Invalid means F32), and NoEncoder / NoDecoder
// skip loading that half (its calls then fail).
type Options = model.Options

// VAE is a loaded AutoencoderKLHunyuanVideo.
type VAE struct {
	m *model.Loaded[Config, encoder, decoder]
}

var arch = &model.Arch[Config, *Config, encoder, decoder]{
	Name: "vae", Default: DefaultConfig, NewEncoder: newEncoder, NewDecoder: newDecoder,
}

// model is v's loaded model, nil for a nil VAE.
func (v *VAE) model() *model.Loaded[Config, encoder, decoder] {
	if v == nil {
		return nil
	}
	return v.m
}

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

// ReadConfig reads and checks dir/config.json as Load does: absent keys take
// DefaultConfig's values; keys the model does not use (_class_name,
// _diffusers_version, ...) are ignored.
func ReadConfig(dir string) (Config, error) { return arch.ReadConfig(dir) }

// Plan lists the weights a model of config cfg reads, encoder and decoder
// (checkpoint names and shapes), without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) { return arch.Plan(cfg) }

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
	return wrap(arch.Random(cfg, be, opts, func(dt tensor.DType) *weights.Builder {
		return weights.Random(be, dt, seed)
	}))
}

// Close frees the weights. Closing twice or closing a nil VAE does
// nothing; after Close, Encode and Decode fail (tensor.Catch gives the
// error) and the other methods still describe the model. A nil VAE gives
// zero values.
func (v *VAE) Close() { v.model().Close() }

// Config is the model's configuration.
func (v *VAE) Config() Config { return v.model().Config() }

// DType is the compute dtype.
func (v *VAE) DType() tensor.DType { return v.model().DType() }

// Backend is the backend the weights live on.
func (v *VAE) Backend() tensor.Backend { return v.model().Backend() }

// ScalingFactor is the factor latents are multiplied by after encoding
// (and divided by before decoding).
func (v *VAE) ScalingFactor() float32 { return v.Config().ScalingFactor }

// WeightTensors is every allocation holding the weights (for charging
// them to an owner); none for a nil VAE.
func (v *VAE) WeightTensors() []*tensor.Tensor { return v.model().WeightTensors() }

// WeightBytes is the device memory the weights hold.
func (v *VAE) WeightBytes() int64 { return v.model().WeightBytes() }

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
