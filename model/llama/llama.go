// Package llama is transformers' LlamaModel as HunyuanVideo's text encoder
// uses it: causal, GQA, SwiGLU, half-split rotary embedding; FramePack takes
// hidden_states[-3], the output of the third-to-last decoder layer.
package llama

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/internal/hfmodel"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is the part of config.json the model uses.
type Config struct {
	hfmodel.Dims
	NumKeyValueHeads int     `json:"num_key_value_heads"`
	HeadDim          int     `json:"head_dim"`
	VocabSize        int     `json:"vocab_size"`
	RMSNormEps       float32 `json:"rms_norm_eps"`
	RopeTheta        float64 `json:"rope_theta"`
	RopeParameters   *struct {
		RopeTheta float64 `json:"rope_theta"`
		RopeType  string  `json:"rope_type"`
	} `json:"rope_parameters"`
	RopeScaling   map[string]any `json:"rope_scaling"`
	AttentionBias bool           `json:"attention_bias"`
	MLPBias       bool           `json:"mlp_bias"`
}

func (c *Config) theta() float64 {
	if c.RopeParameters != nil && c.RopeParameters.RopeTheta > 0 {
		return c.RopeParameters.RopeTheta
	}
	if c.RopeTheta > 0 {
		return c.RopeTheta
	}
	return 10000
}

type layer struct {
	inputNorm, postNorm *tensor.Tensor
	q, k, v, o          *tensor.Tensor
	gate, up, down      *tensor.Tensor
}

// Model is a loaded LLaMA decoder stack (no LM head).
type Model struct {
	Config
	dt              tensor.DType
	embed           *tensor.Tensor
	layers          []layer
	norm            *tensor.Tensor
	hfmodel.Weights // Close, WeightTensors, Bytes
}

// ReadConfig reads and checks dir/config.json as Load does. The rotary base
// is the old top-level rope_theta (with rope_scaling null) or the newer
// rope_parameters; keys the model does not use (torch_dtype,
// transformers_version, ...) are ignored.
func ReadConfig(dir string) (Config, error) {
	return hfmodel.ReadConfig(dir, "llama", func(c *Config) {
		if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
			c.HeadDim = c.HiddenSize / c.NumAttentionHeads
		}
		if c.NumKeyValueHeads == 0 {
			c.NumKeyValueHeads = c.NumAttentionHeads
		}
	})
}

// Validate reports a config this implementation cannot run, naming the key.
func (c Config) Validate() error {
	switch {
	case c.NumHiddenLayers > weights.MaxLayers:
		return fmt.Errorf("num_hidden_layers %d is more than any checkpoint holds (at most %d)", c.NumHiddenLayers, weights.MaxLayers)
	case c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.VocabSize <= 0 || c.NumHiddenLayers < 0 || c.HeadDim <= 0:
		return fmt.Errorf("hidden_size %d, intermediate_size %d, vocab_size %d, num_hidden_layers %d, head_dim %d must be positive",
			c.HiddenSize, c.IntermediateSize, c.VocabSize, c.NumHiddenLayers, c.HeadDim)
	case c.NumAttentionHeads <= 0 || c.NumKeyValueHeads <= 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0:
		return fmt.Errorf("%d attention heads do not group into %d key/value heads", c.NumAttentionHeads, c.NumKeyValueHeads)
	case c.HeadDim%2 != 0:
		return fmt.Errorf("head_dim %d is odd", c.HeadDim)
	case c.HiddenAct != "" && c.HiddenAct != "silu":
		return fmt.Errorf("unsupported hidden_act %q", c.HiddenAct)
	case len(c.RopeScaling) > 0 || (c.RopeParameters != nil && c.RopeParameters.RopeType != "" && c.RopeParameters.RopeType != "default"):
		return fmt.Errorf("rope scaling is not supported")
	case c.AttentionBias || c.MLPBias:
		return fmt.Errorf("attention_bias %v, mlp_bias %v: biases are not supported", c.AttentionBias, c.MLPBias)
	}
	return nil
}

// Theta is the rotary base (10000 when the config gives none).
func (c Config) Theta() float64 { return c.theta() }

// Plan lists the weights a model of config cfg reads (checkpoint names and
// shapes) without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	return hfmodel.Plan(cfg, cfg.Validate, build)
}

// Load reads a LlamaModel folder onto be in dtype dt.
func Load(dir string, be tensor.Backend, dt tensor.DType) (*Model, error) {
	return hfmodel.Load(dir, be, dt, ReadConfig, build)
}

// build reads the weights of cfg through l (a plan only records them).
func build(l *weights.Builder, cfg Config) *Model {
	d, f := cfg.HiddenSize, cfg.IntermediateSize
	qd, kvd := cfg.NumAttentionHeads*cfg.HeadDim, cfg.NumKeyValueHeads*cfg.HeadDim
	m := &Model{Config: cfg, dt: l.DType(), Weights: hfmodel.Held(l)}
	m.embed = l.Get("embed_tokens.weight", cfg.VocabSize, d)
	for i := 0; i < cfg.NumHiddenLayers; i++ {
		p := fmt.Sprintf("layers.%d.", i)
		m.layers = append(m.layers, layer{
			inputNorm: l.Get(p+"input_layernorm.weight", d),
			postNorm:  l.Get(p+"post_attention_layernorm.weight", d),
			q:         interleaveRows(l, p+"self_attn.q_proj.weight", qd, d, cfg.HeadDim),
			k:         interleaveRows(l, p+"self_attn.k_proj.weight", kvd, d, cfg.HeadDim),
			v:         l.Get(p+"self_attn.v_proj.weight", kvd, d),
			o:         l.Get(p+"self_attn.o_proj.weight", d, qd),
			gate:      l.Get(p+"mlp.gate_proj.weight", f, d),
			up:        l.Get(p+"mlp.up_proj.weight", f, d),
			down:      l.Get(p+"mlp.down_proj.weight", d, f),
		})
	}
	m.norm = l.Get("norm.weight", d)
	return m
}

// interleaveRows loads a q or k projection with each head's output channels
// reordered from LLaMA's half-split layout [0..D/2) ++ [D/2..D) to pairs
// (i, i+D/2). q and k get the same order, so q·k is unchanged, and the
// half-split rotation becomes the interleaved one the RoPE kernel does.
// The reorder is a copy on the weight's backend: (heads, 2, D/2, cols) →
// (heads, D/2, 2, cols).
func interleaveRows(l *weights.Builder, name string, rows, cols, headDim int) *tensor.Tensor {
	w := l.Get(name, rows, cols)
	if w == nil {
		return nil
	}
	defer l.Free(w)
	var out *tensor.Tensor
	if err := tensor.Catch(func() {
		s := tensor.NewScope(w.Backend())
		defer s.Close()
		out = s.Permute(w.Reshape(rows/headDim, 2, headDim/2, cols), 0, 2, 1, 3).Reshape(rows, cols)
		s.Keep(out)
	}); err != nil {
		l.Fail("llama: %s: reordering the heads' rows: %v", name, err)
		return nil
	}
	return l.Adopt(out)
}

// Output holds the hidden states FramePack needs.
type Output struct {
	// Hidden[i] is hidden_states[i] of transformers for the indices asked
	// for: 0 the embeddings, i the output of layer i−1, NumHiddenLayers the
	// final-normed output.
	Hidden map[int]*tensor.Tensor
}

// Forward runs the valid tokens of one right-padded sequence (padding never
// reaches them through the causal mask) and returns hidden_states at the
// requested indices; negative indices count from the end as in Python
// (−3 is what FramePack uses). Layers after the last one needed are skipped.
func (m *Model) Forward(s *tensor.Scope, ids []int64, want ...int) Output {
	n := len(ids)
	if n == 0 {
		tensor.Fail("llama", "no tokens")
	}
	for _, id := range ids {
		if id < 0 || id >= int64(m.VocabSize) {
			tensor.Fail("llama", "token id %d outside the vocabulary of %d", id, m.VocabSize)
		}
	}
	total := m.NumHiddenLayers + 1
	need := map[int]bool{}
	last := 0
	for _, w := range want {
		if w < 0 {
			w += total
		}
		if w < 0 || w >= total {
			tensor.Fail("llama", "hidden state %d of %d", w, total)
		}
		need[w] = true
		last = max(last, w)
	}
	out := Output{Hidden: map[int]*tensor.Tensor{}}
	cos, sin := m.rope(s, n)
	x := s.Embedding(m.embed, s.To(tensor.FromInt64(ids, n))).Reshape(1, n, m.HiddenSize)
	if need[0] {
		out.Hidden[0] = x
	}
	hd, nq, nkv := m.HeadDim, m.NumAttentionHeads, m.NumKeyValueHeads
	for i := 0; i < m.NumHiddenLayers && i < last; i++ {
		ly := m.layers[i]
		c := s.Child()
		r := c.RMSNorm(x, ly.inputNorm, m.RMSNormEps)
		q := c.RoPE(c.Linear(r, ly.q, nil).Reshape(1, n, nq, hd), cos, sin)
		k := c.RoPE(c.Linear(r, ly.k, nil).Reshape(1, n, nkv, hd), cos, sin)
		v := c.Linear(r, ly.v, nil).Reshape(1, n, nkv, hd)
		a := c.Attention(q, k, v, tensor.AttnParams{Causal: true}).Reshape(1, n, nq*hd)
		x = c.Add(x, c.Linear(a, ly.o, nil))
		r = c.RMSNorm(x, ly.postNorm, m.RMSNormEps)
		g := c.Mul(c.SiLU(c.Linear(r, ly.gate, nil)), c.Linear(r, ly.up, nil))
		x = c.Add(x, c.Linear(g, ly.down, nil))
		c.Keep(x)
		c.Close()
		if need[i+1] && i+1 < m.NumHiddenLayers {
			out.Hidden[i+1] = x
		}
	}
	if need[m.NumHiddenLayers] {
		out.Hidden[m.NumHiddenLayers] = s.RMSNorm(x, m.norm, m.RMSNormEps)
	}
	return out
}

// rope builds the cos/sin tables for positions 0..n−1 in the interleaved
// pair order of the reordered q/k projections: pair i turns by inv_freq[i].
func (m *Model) rope(s *tensor.Scope, n int) (cos, sin *tensor.Tensor) {
	d := m.HeadDim
	c := make([]float32, n*d)
	sn := make([]float32, n*d)
	theta := m.theta()
	for i := 0; i < d/2; i++ {
		// transformers computes inv_freq in float32 from an int64 arange.
		inv := float32(1.0 / math.Pow(theta, float64(float32(2*i))/float64(d)))
		for p := 0; p < n; p++ {
			a := float64(float32(p) * inv)
			cv, sv := float32(math.Cos(a)), float32(math.Sin(a))
			c[p*d+2*i], c[p*d+2*i+1] = cv, cv
			sn[p*d+2*i], sn[p*d+2*i+1] = sv, sv
		}
	}
	return s.To(tensor.FromFloat32(c, n, d)), s.To(tensor.FromFloat32(sn, n, d))
}
