// Package clip is transformers' CLIPTextModel: the CLIP-L text encoder whose
// pooled output conditions HunyuanVideo (text_encoder_2).
package clip

import (
	"fmt"

	"github.com/framepack-go/framepack/internal/hfmodel"
	"github.com/framepack-go/framepack/model/internal/encoder"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is the part of config.json the text model uses.
type Config struct {
	hfmodel.Dims
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	VocabSize             int     `json:"vocab_size"`
	LayerNormEps          float32 `json:"layer_norm_eps"`
	EOSTokenID            int64   `json:"eos_token_id"`
}

// Model is a loaded CLIP text encoder.
type Model struct {
	Config
	dt              tensor.DType
	tokenEmb, pos   *tensor.Tensor
	layers          []encoder.Layer
	act             encoder.Act
	finalW          *tensor.Tensor
	finalB          *tensor.Tensor
	hfmodel.Weights // Close, WeightTensors, Bytes
}

// ReadConfig reads and checks dir/config.json as Load does. Keys the model
// does not use (torch_dtype, transformers_version, projection_dim, ...) are
// ignored; eos_token_id 2 (the released text_encoder_2) selects the legacy
// pooling.
func ReadConfig(dir string) (Config, error) {
	return hfmodel.ReadConfig[Config](dir, "clip", nil)
}

// Validate reports a config this implementation cannot run, naming the key.
func (c Config) Validate() error {
	switch {
	case c.NumHiddenLayers > weights.MaxLayers:
		return fmt.Errorf("num_hidden_layers %d is more than any checkpoint holds (at most %d)", c.NumHiddenLayers, weights.MaxLayers)
	case c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.VocabSize <= 0 || c.MaxPositionEmbeddings <= 0 || c.NumHiddenLayers < 0:
		return fmt.Errorf("hidden_size %d, intermediate_size %d, vocab_size %d, max_position_embeddings %d, num_hidden_layers %d must be positive",
			c.HiddenSize, c.IntermediateSize, c.VocabSize, c.MaxPositionEmbeddings, c.NumHiddenLayers)
	case c.NumAttentionHeads <= 0 || c.HiddenSize%c.NumAttentionHeads != 0:
		return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	_, err := encoder.ParseAct(c.HiddenAct)
	return err
}

// Plan lists the weights a model of config cfg reads (checkpoint names with
// the "text_model." prefix, and shapes) without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	return hfmodel.Plan(cfg, cfg.Validate, build)
}

// Load reads a CLIPTextModel folder (config.json + model.safetensors, names
// with or without the "text_model." prefix) onto be in dtype dt.
func Load(dir string, be tensor.Backend, dt tensor.DType) (*Model, error) {
	return hfmodel.Load(dir, be, dt, ReadConfig, build)
}

// build reads the weights of cfg through l (a plan only records them).
func build(l *weights.Builder, cfg Config) *Model {
	act, _ := encoder.ParseAct(cfg.HiddenAct) // checked by Validate
	d, f := cfg.HiddenSize, cfg.IntermediateSize
	l = l.Sub("text_model")
	m := &Model{Config: cfg, dt: l.DType(), act: act, Weights: hfmodel.Held(l)}
	m.tokenEmb = l.Get("embeddings.token_embedding.weight", cfg.VocabSize, d)
	m.pos = l.Get("embeddings.position_embedding.weight", cfg.MaxPositionEmbeddings, d)
	m.layers = encoder.LoadLayers(l, "encoder.layers.", cfg.NumHiddenLayers, d, f)
	m.finalW = l.Get("final_layer_norm.weight", d)
	m.finalB = l.Get("final_layer_norm.bias", d)
	return m
}

// Output is what the text model returns.
type Output struct {
	LastHiddenState *tensor.Tensor // (1, L, D)
	Pooled          *tensor.Tensor // (1, D)
}

// Forward encodes one sequence of token ids (up to max_position_embeddings).
// The attention is causal; the pooled vector is the final-normed state at
// the end-of-text token: argmax(ids) under the legacy eos id 2, else the
// first eos_token_id.
func (m *Model) Forward(s *tensor.Scope, ids []int64) Output {
	n := len(ids)
	if n == 0 || n > m.MaxPositionEmbeddings {
		tensor.Fail("clip", "%d tokens (want 1..%d)", n, m.MaxPositionEmbeddings)
	}
	for _, id := range ids {
		if id < 0 || id >= int64(m.VocabSize) {
			tensor.Fail("clip", "token id %d outside the vocabulary of %d", id, m.VocabSize)
		}
	}
	idt := s.To(tensor.FromInt64(ids, n))
	x := s.Add(s.Embedding(m.tokenEmb, idt), s.Slice(m.pos, 0, 0, n))
	x = x.Reshape(1, n, m.HiddenSize)
	p := encoder.Params{Heads: m.NumAttentionHeads, Eps: m.LayerNormEps, Act: m.act, Causal: true}
	for i := range m.layers {
		next := m.layers[i].Forward(s, x, p)
		s.Free(x)
		x = next
	}
	last := s.LayerNorm(x, m.finalW, m.finalB, m.LayerNormEps)
	pos := eosPosition(ids, m.EOSTokenID)
	pooled := s.Slice(last, 1, pos, pos+1).Reshape(1, m.HiddenSize)
	return Output{LastHiddenState: last, Pooled: pooled}
}

// eosPosition is where transformers pools: the legacy configs (eos id 2)
// take the largest id, which is the first <|endoftext|>; the others the
// first eos_token_id (position 0 when there is none).
func eosPosition(ids []int64, eos int64) int {
	if eos == 2 {
		best := 0
		for i, id := range ids {
			if id > ids[best] {
				best = i
			}
		}
		return best
	}
	for i, id := range ids {
		if id == eos {
			return i
		}
	}
	return 0 // argmax of an all-false comparison, as the reference
}
