// Package hfmodel is how the transformers models (LLaMA, CLIP, SigLIP) come
// out of a Hugging Face folder: the config read and checked, the model built
// through a weights.Builder on the checkpoint, the weights made so far freed
// when one fails; and the same constructor run on a plan to list the
// weights without loading them.
package hfmodel

import (
	"fmt"
	"path/filepath"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Dims are the keys of config.json that every transformers model here
// reads: the layer sizes and the activation. A Config embeds them.
type Dims struct {
	HiddenSize        int    `json:"hidden_size"`
	IntermediateSize  int    `json:"intermediate_size"`
	NumHiddenLayers   int    `json:"num_hidden_layers"`
	NumAttentionHeads int    `json:"num_attention_heads"`
	HiddenAct         string `json:"hidden_act"`
}

// ReadConfig reads dir/config.json, lets complete fill in what the file may
// leave out (nil: nothing), and validates the result; an invalid config's
// error names the model (name) and the file. Keys the model does not use
// are ignored.
func ReadConfig[C interface{ Validate() error }](dir, name string, complete func(*C)) (C, error) {
	var cfg C
	if err := weights.ReadConfig(dir, &cfg); err != nil {
		return cfg, err
	}
	if complete != nil {
		complete(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %s: %w", name, filepath.Join(dir, "config.json"), err)
	}
	return cfg, nil
}

// Load reads the model in dir onto be in dtype dt: read reads and checks
// its config.json, build makes the model through l, its weights read in
// parallel (weights.Build runs build on a plan first).
func Load[C, M any](dir string, be tensor.Backend, dt tensor.DType,
	read func(dir string) (C, error), build func(l *weights.Builder, cfg C) M) (M, error) {
	return load(dir, read, func(ck *weights.Checkpoint, cfg C) (m M, l *weights.Builder) {
		l = weights.Build(&weights.CheckpointSource{Ck: ck, Be: be}, be, dt, weights.LoadOptions{},
			func(l *weights.Builder) { m = build(l, cfg) })
		return m, l
	})
}

// LoadSequential is Load reading the weights one after another as build
// asks for them: the path the parallel reads must match (for tests).
func LoadSequential[C, M any](dir string, be tensor.Backend, dt tensor.DType,
	read func(dir string) (C, error), build func(l *weights.Builder, cfg C) M) (M, error) {
	return load(dir, read, func(ck *weights.Checkpoint, cfg C) (M, *weights.Builder) {
		l := weights.FromCheckpoint(ck, be, dt)
		return build(l, cfg), l
	})
}

func load[C, M any](dir string, read func(dir string) (C, error),
	construct func(ck *weights.Checkpoint, cfg C) (M, *weights.Builder)) (M, error) {
	var none M
	ck, err := weights.Open(dir)
	if err != nil {
		return none, err
	}
	defer ck.Close()
	cfg, err := read(ck.Dir())
	if err != nil {
		return none, err
	}
	m, l := construct(ck, cfg)
	if err := l.Err(); err != nil {
		l.Release()
		return none, err
	}
	return m, nil
}

// Plan lists the weights (checkpoint names and shapes) that build reads for
// cfg, once validate accepts cfg, without loading anything.
func Plan[C any, M any](cfg C, validate func() error, build func(l *weights.Builder, cfg C) M) ([]weights.Spec, error) {
	if err := validate(); err != nil {
		return nil, err
	}
	l := weights.NewPlan()
	build(l, cfg)
	return l.Specs(), nil
}

// Weights is a loaded model's weights, for a model type to embed: it gives
// the model Close, WeightTensors and Bytes, and keeps the builder out of
// the model's users' reach.
type Weights struct{ loaded *weights.Builder }

// Held makes the Weights of the builder a model was built through.
func Held(l *weights.Builder) Weights { return Weights{l} }

// Close frees the weights.
func (w Weights) Close() { w.loaded.Release() }

// WeightTensors is every allocation holding the weights (for charging
// them to an owner).
func (w Weights) WeightTensors() []*tensor.Tensor { return w.loaded.Held() }

// Bytes is the memory the weights hold.
func (w Weights) Bytes() int64 { return w.loaded.Bytes() }

// ComputeDType is the dtype the weights were built in.
func (w Weights) ComputeDType() tensor.DType { return w.loaded.DType() }
