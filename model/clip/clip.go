// Package clip is transformers' CLIPTextModel: the CLIP-L text encoder whose
// pooled output conditions HunyuanVideo (text_encoder_2).
package clip

import (
	"fmt"

	"github.com/framepack-go/framepack/model/internal/load"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is the part of config.json the text model uses.
type Config struct {
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	VocabSize             int     `json:"vocab_size"`
	LayerNormEps          float32 `json:"layer_norm_eps"`
	HiddenAct             string  `json:"hidden_act"`
	EOSTokenID            int64   `json:"eos_token_id"`
}

type layer struct {
	ln1W, ln1B, ln2W, ln2B *tensor.Tensor
	qW, qB, kW, kB, vW, vB *tensor.Tensor
	oW, oB                 *tensor.Tensor
	fc1W, fc1B, fc2W, fc2B *tensor.Tensor
}

// Model is a loaded CLIP text encoder.
type Model struct {
	Config
	dt            tensor.DType
	tokenEmb, pos *tensor.Tensor
	layers        []layer
	finalW        *tensor.Tensor
	finalB        *tensor.Tensor
	loaded        *load.Loader
}

// Load reads a CLIPTextModel folder (config.json + model.safetensors, names
// with or without the "text_model." prefix) onto be in dtype dt.
func Load(dir string, be tensor.Backend, dt tensor.DType) (*Model, error) {
	ck, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	var cfg Config
	if err := ck.Config(&cfg); err != nil {
		return nil, err
	}
	if cfg.NumAttentionHeads <= 0 || cfg.HiddenSize%cfg.NumAttentionHeads != 0 {
		return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d", dir, cfg.HiddenSize, cfg.NumAttentionHeads)
	}
	if cfg.HiddenAct != "quick_gelu" && cfg.HiddenAct != "gelu" {
		return nil, fmt.Errorf("%s: unsupported hidden_act %q", dir, cfg.HiddenAct)
	}
	d, f := cfg.HiddenSize, cfg.IntermediateSize
	l := load.New(ck, be, dt)
	l.Prefix = "text_model."
	m := &Model{Config: cfg, dt: dt, loaded: l}
	m.tokenEmb = l.T("embeddings.token_embedding.weight", cfg.VocabSize, d)
	m.pos = l.T("embeddings.position_embedding.weight", cfg.MaxPositionEmbeddings, d)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("encoder.layers.%d.", i)
		m.layers = append(m.layers, layer{
			ln1W: l.T(p+"layer_norm1.weight", d), ln1B: l.T(p+"layer_norm1.bias", d),
			ln2W: l.T(p+"layer_norm2.weight", d), ln2B: l.T(p+"layer_norm2.bias", d),
			qW: l.T(p+"self_attn.q_proj.weight", d, d), qB: l.T(p+"self_attn.q_proj.bias", d),
			kW: l.T(p+"self_attn.k_proj.weight", d, d), kB: l.T(p+"self_attn.k_proj.bias", d),
			vW: l.T(p+"self_attn.v_proj.weight", d, d), vB: l.T(p+"self_attn.v_proj.bias", d),
			oW: l.T(p+"self_attn.out_proj.weight", d, d), oB: l.T(p+"self_attn.out_proj.bias", d),
			fc1W: l.T(p+"mlp.fc1.weight", f, d), fc1B: l.T(p+"mlp.fc1.bias", f),
			fc2W: l.T(p+"mlp.fc2.weight", d, f), fc2B: l.T(p+"mlp.fc2.bias", d),
		})
	}
	m.finalW = l.T("final_layer_norm.weight", d)
	m.finalB = l.T("final_layer_norm.bias", d)
	if err := l.Err(); err != nil {
		l.Release()
		return nil, err
	}
	return m, nil
}

// Close frees the weights.
func (m *Model) Close() { m.loaded.Release() }

// Bytes is the memory the weights hold.
func (m *Model) Bytes() int64 { return m.loaded.Bytes() }

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
	h := m.HiddenSize / m.NumAttentionHeads
	idt := s.To(tensor.FromInt64(ids, n))
	x := s.Add(s.Embedding(m.tokenEmb, idt), s.Slice(m.pos, 0, 0, n))
	x = x.Reshape(1, n, m.HiddenSize)
	for _, ly := range m.layers {
		c := s.Child()
		r := c.LayerNorm(x, ly.ln1W, ly.ln1B, m.LayerNormEps)
		q := c.Linear(r, ly.qW, ly.qB).Reshape(1, n, m.NumAttentionHeads, h)
		k := c.Linear(r, ly.kW, ly.kB).Reshape(1, n, m.NumAttentionHeads, h)
		v := c.Linear(r, ly.vW, ly.vB).Reshape(1, n, m.NumAttentionHeads, h)
		a := c.Attention(q, k, v, tensor.AttnParams{Causal: true}).Reshape(1, n, m.HiddenSize)
		x2 := c.Add(x, c.Linear(a, ly.oW, ly.oB))
		r = c.LayerNorm(x2, ly.ln2W, ly.ln2B, m.LayerNormEps)
		r = c.Linear(r, ly.fc1W, ly.fc1B)
		if m.HiddenAct == "quick_gelu" {
			r = c.QuickGELU(r)
		} else {
			r = c.GELU(r)
		}
		x = c.Add(x2, c.Linear(r, ly.fc2W, ly.fc2B))
		c.Keep(x)
		c.Close()
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
