// Package siglip is transformers' SiglipVisionModel, the image encoder whose
// last hidden state conditions FramePack's transformer (FLUX.1-Redux SigLIP).
package siglip

import (
	"fmt"

	"github.com/framepack-go/framepack/model/internal/encoder"
	"github.com/framepack-go/framepack/model/internal/load"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is the vision part of config.json.
type Config struct {
	HiddenSize        int     `json:"hidden_size"`
	IntermediateSize  int     `json:"intermediate_size"`
	NumHiddenLayers   int     `json:"num_hidden_layers"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	NumChannels       int     `json:"num_channels"`
	ImageSize         int     `json:"image_size"`
	PatchSize         int     `json:"patch_size"`
	LayerNormEps      float32 `json:"layer_norm_eps"`
	HiddenAct         string  `json:"hidden_act"`
}

// Model is a loaded SigLIP vision tower (the pooling head is not used).
type Model struct {
	Config
	patchW, patchB, pos *tensor.Tensor
	layers              []encoder.Layer
	act                 encoder.Act
	postW, postB        *tensor.Tensor
	loaded              *load.Loader
}

// Load reads a SiglipVisionModel folder (names with or without the
// "vision_model." prefix) onto be in dtype dt.
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
	if cfg.NumChannels == 0 {
		cfg.NumChannels = 3
	}
	switch {
	case cfg.NumAttentionHeads <= 0 || cfg.HiddenSize%cfg.NumAttentionHeads != 0:
		return nil, fmt.Errorf("%s: hidden_size %d is not a multiple of num_attention_heads %d", dir, cfg.HiddenSize, cfg.NumAttentionHeads)
	// flux_redux_bfl's 384 is not a multiple of its patch 14: the
	// unpadded stride-14 convolution sees 27 patches a side and ignores
	// the last 6 pixels, as transformers does.
	case cfg.PatchSize <= 0 || cfg.ImageSize < cfg.PatchSize:
		return nil, fmt.Errorf("%s: image_size %d is smaller than patch_size %d", dir, cfg.ImageSize, cfg.PatchSize)
	}
	act, err := encoder.ParseAct(cfg.HiddenAct)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d, f, p := cfg.HiddenSize, cfg.IntermediateSize, cfg.PatchSize
	n := (cfg.ImageSize / p) * (cfg.ImageSize / p)
	l := load.New(ck, be, dt)
	l.Prefix = "vision_model."
	m := &Model{Config: cfg, act: act, loaded: l}
	m.patchW = l.T("embeddings.patch_embedding.weight", d, cfg.NumChannels, p, p)
	m.patchB = l.T("embeddings.patch_embedding.bias", d)
	m.pos = l.T("embeddings.position_embedding.weight", n, d)
	m.layers = encoder.LoadLayers(l, "encoder.layers.", cfg.NumHiddenLayers, d, f)
	m.postW = l.T("post_layernorm.weight", d)
	m.postB = l.T("post_layernorm.bias", d)
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

// Forward encodes pixel values (B, 3, image_size, image_size), already
// normalised by the processor, to last_hidden_state (B, patches, hidden).
func (m *Model) Forward(s *tensor.Scope, pixels *tensor.Tensor) *tensor.Tensor {
	sh := pixels.Shape()
	if len(sh) != 4 || sh[1] != m.NumChannels || sh[2] != m.ImageSize || sh[3] != m.ImageSize {
		tensor.Fail("siglip", "pixel values %v, want (B, %d, %d, %d)", sh, m.NumChannels, m.ImageSize, m.ImageSize)
	}
	b, d := sh[0], m.HiddenSize
	x := s.Conv2d(s.Cast(s.To(pixels), m.loaded.DType()), m.patchW, m.patchB, [2]int{m.PatchSize, m.PatchSize}, [2]int{})
	n := x.Dim(2) * x.Dim(3)
	x = s.Transpose(x.Reshape(b, d, n), 1, 2) // (B, patches, hidden), row-major patches
	x = s.Add(x, m.pos)
	p := encoder.Params{Heads: m.NumAttentionHeads, Eps: m.LayerNormEps, Act: m.act}
	for i := range m.layers {
		next := m.layers[i].Forward(s, x, p)
		s.Free(x)
		x = next
	}
	return s.LayerNorm(x, m.postW, m.postB, m.LayerNormEps)
}
