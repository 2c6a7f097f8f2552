// Package model holds what the VAEs (HunyuanVideo's and Wan's) share
// around their layers: reading and checking config.json, planning the
// weights, building the encoder and decoder (either half may be left out)
// from a checkpoint or from random weights, and the loaded model's
// nil-safe accessors.
package model

import (
	"fmt"
	"path/filepath"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is a VAE's configuration: a struct read from config.json whose
// pointer checks it.
type Config[C any] interface {
	*C
	Validate() error
}

// Arch is one VAE architecture: the name its errors start with, its
// default configuration and how each half is built.
type Arch[C any, PC Config[C], E, D any] struct {
	Name       string // "vae", "wan vae"
	Default    func() C
	NewEncoder func(*weights.Builder, *C) *E
	NewDecoder func(*weights.Builder, *C) *D
}

// Options say what to load.
type Options struct {
	// DType is the compute dtype (weights are converted at load): F32, F16
	// or BF16. Invalid means F32.
	DType tensor.DType
	// NoEncoder / NoDecoder skip loading that half (its calls then fail).
	NoEncoder, NoDecoder bool
}

// Loaded is a built VAE: its configuration, the halves asked for and the
// weights they hold. A nil *Loaded gives zero values.
type Loaded[C, E, D any] struct {
	Cfg     C
	Be      tensor.Backend
	DT      tensor.DType
	Enc     *E
	Dec     *D
	Weights *weights.Builder
}

// ReadConfig reads and checks dir/config.json: absent keys take the
// default configuration's values; keys the model does not use are ignored.
func (a *Arch[C, PC, E, D]) ReadConfig(dir string) (C, error) {
	cfg := a.Default()
	if err := weights.ReadConfig(dir, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", a.Name, err)
	}
	if err := PC(&cfg).Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %s: %w", a.Name, filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// Plan lists the weights both halves of a model of config cfg read
// (checkpoint names and shapes), without loading anything.
func (a *Arch[C, PC, E, D]) Plan(cfg C) ([]weights.Spec, error) {
	if err := PC(&cfg).Validate(); err != nil {
		return nil, fmt.Errorf("%s: config: %w", a.Name, err)
	}
	p := weights.NewPlan()
	a.NewEncoder(p, &cfg)
	a.NewDecoder(p, &cfg)
	return p.Specs(), nil
}

// Load reads a Hugging Face folder (config.json and
// diffusion_pytorch_model.safetensors, any float dtype) onto be.
func (a *Arch[C, PC, E, D]) Load(dir string, be tensor.Backend, opts Options) (*Loaded[C, E, D], error) {
	return a.load(dir, be, opts, func(ck *weights.Checkpoint, cfg C, dt tensor.DType) (m *Loaded[C, E, D], err error) {
		// The weights are read in parallel: construct runs on a plan first.
		weights.Build(&weights.CheckpointSource{Ck: ck, Be: be}, be, dt, weights.LoadOptions{},
			func(p *weights.Builder) { m, err = a.build(cfg, be, p, opts) })
		return m, err
	})
}

// LoadSequential is Load reading the weights one after another, in the
// constructors' order: the path the parallel reads must match (for tests).
func (a *Arch[C, PC, E, D]) LoadSequential(dir string, be tensor.Backend, opts Options) (*Loaded[C, E, D], error) {
	return a.load(dir, be, opts, func(ck *weights.Checkpoint, cfg C, dt tensor.DType) (*Loaded[C, E, D], error) {
		return a.build(cfg, be, weights.FromCheckpoint(ck, be, dt), opts)
	})
}

// load opens dir, reads its config and the compute dtype, and builds the
// model with construct.
func (a *Arch[C, PC, E, D]) load(dir string, be tensor.Backend, opts Options,
	construct func(ck *weights.Checkpoint, cfg C, dt tensor.DType) (*Loaded[C, E, D], error)) (*Loaded[C, E, D], error) {
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.Name, err)
	}
	defer ck.Close()
	cfg, err := a.ReadConfig(ck.Dir())
	if err != nil {
		return nil, err
	}
	dt, err := a.computeDType(opts.DType)
	if err != nil {
		return nil, err
	}
	m, err := construct(ck, cfg, dt)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", a.Name, dir, err)
	}
	return m, nil
}

// Random builds a model of config cfg from the weights that source makes
// in the compute dtype.
func (a *Arch[C, PC, E, D]) Random(cfg C, be tensor.Backend, opts Options, source func(dt tensor.DType) *weights.Builder) (*Loaded[C, E, D], error) {
	if err := PC(&cfg).Validate(); err != nil {
		return nil, fmt.Errorf("%s: config: %w", a.Name, err)
	}
	dt, err := a.computeDType(opts.DType)
	if err != nil {
		return nil, err
	}
	m, err := a.build(cfg, be, source(dt), opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.Name, err)
	}
	return m, nil
}

func (a *Arch[C, PC, E, D]) computeDType(dt tensor.DType) (tensor.DType, error) {
	switch dt {
	case tensor.Invalid:
		return tensor.F32, nil
	case tensor.F32, tensor.F16, tensor.BF16:
		return dt, nil
	}
	return 0, fmt.Errorf("%s: compute dtype %s is not f32, f16 or bf16", a.Name, dt)
}

// build makes the halves opts ask for from p's weights.
func (a *Arch[C, PC, E, D]) build(cfg C, be tensor.Backend, p *weights.Builder, opts Options) (*Loaded[C, E, D], error) {
	m := &Loaded[C, E, D]{Cfg: cfg, Be: be, DT: p.DType(), Weights: p}
	if !opts.NoEncoder {
		m.Enc = a.NewEncoder(p, &m.Cfg)
	}
	if !opts.NoDecoder {
		m.Dec = a.NewDecoder(p, &m.Cfg)
	}
	if err := p.Err(); err != nil {
		p.Release()
		return nil, err
	}
	return m, nil
}

// Close frees the weights and drops the halves. Closing twice or a nil
// model does nothing.
func (m *Loaded[C, E, D]) Close() {
	if m == nil {
		return
	}
	m.Weights.Release()
	m.Enc, m.Dec = nil, nil
}

// Config is the model's configuration.
func (m *Loaded[C, E, D]) Config() C {
	if m == nil {
		var zero C
		return zero
	}
	return m.Cfg
}

// DType is the compute dtype.
func (m *Loaded[C, E, D]) DType() tensor.DType {
	if m == nil {
		return tensor.Invalid
	}
	return m.DT
}

// Backend is the backend the weights live on.
func (m *Loaded[C, E, D]) Backend() tensor.Backend {
	if m == nil {
		return nil
	}
	return m.Be
}

// WeightBytes is the memory the weights hold on the backend.
func (m *Loaded[C, E, D]) WeightBytes() int64 {
	if m == nil {
		return 0
	}
	return m.Weights.Bytes()
}

// WeightTensors is every allocation holding the weights (for charging
// them to an owner); none for a nil model.
func (m *Loaded[C, E, D]) WeightTensors() []*tensor.Tensor {
	if m == nil {
		return nil
	}
	return m.Weights.Held()
}

// Encoder is the encoder, nil when it was left out or the model is closed
// or nil.
func (m *Loaded[C, E, D]) Encoder() *E {
	if m == nil {
		return nil
	}
	return m.Enc
}

// Decoder is the decoder, nil when it was left out or the model is closed
// or nil.
func (m *Loaded[C, E, D]) Decoder() *D {
	if m == nil {
		return nil
	}
	return m.Dec
}
