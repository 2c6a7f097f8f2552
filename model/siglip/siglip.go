// Package siglip is transformers' SiglipVisionModel, the image encoder whose
// last hidden state conditions FramePack's transformer (FLUX.1-Redux SigLIP).
package siglip

import (
	"fmt"

	"github.com/framepack-go/framepack/internal/hfmodel"
	"github.com/framepack-go/framepack/model/internal/encoder"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/weights"
)

// Config is the vision part of config.json.
type Config struct {
	hfmodel.Dims
	NumChannels  int     `json:"num_channels"`
	ImageSize    int     `json:"image_size"`
	PatchSize    int     `json:"patch_size"`
	LayerNormEps float32 `json:"layer_norm_eps"`
}

// Model is a loaded SigLIP vision tower (the pooling head is not used).
type Model struct {
	Config
	patchW, patchB, pos *tensor.Tensor
	layers              []encoder.Layer
	act                 encoder.Act
	postW, postB        *tensor.Tensor
	hfmodel.Weights     // Close, WeightTensors, Bytes
}

// ReadConfig reads and checks dir/config.json as Load does. Keys the model
// does not use (architectures, torch_dtype, transformers_version, ...) are
// ignored.
func ReadConfig(dir string) (Config, error) {
	return hfmodel.ReadConfig(dir, "siglip", func(c *Config) {
		if c.NumChannels == 0 {
			c.NumChannels = 3
		}
	})
}

// Validate reports a config this implementation cannot run, naming the key.
func (c Config) Validate() error {
	switch {
	case c.NumHiddenLayers > weights.MaxLayers:
		return fmt.Errorf("num_hidden_layers %d is more than any checkpoint holds (at most %d)", c.NumHiddenLayers, weights.MaxLayers)
	case c.HiddenSize <= 0 || c.IntermediateSize <= 0 || c.NumHiddenLayers < 0 || c.NumChannels <= 0:
		return fmt.Errorf("hidden_size %d, intermediate_size %d, num_hidden_layers %d, num_channels %d must be positive",
			c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumChannels)
	case c.NumAttentionHeads <= 0 || c.HiddenSize%c.NumAttentionHeads != 0:
		return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d", c.HiddenSize, c.NumAttentionHeads)
	case c.PatchSize <= 0 || c.ImageSize < c.PatchSize:
		return fmt.Errorf("image_size %d holds no patch of patch_size %d", c.ImageSize, c.PatchSize)
	}
	_, err := encoder.ParseAct(c.HiddenAct)
	return err
}

// PatchesPerSide is floor(image_size / patch_size): the patch embedding is a
// stride-patch_size convolution without padding, so when the image size is
// not a multiple (384 and 14 in the released flux_redux_bfl encoder) the last
// image_size mod patch_size pixel rows and columns are never read.
func (c Config) PatchesPerSide() int { return c.ImageSize / c.PatchSize }

// Tokens is the number of image tokens, PatchesPerSide² (729 released).
func (c Config) Tokens() int { return c.PatchesPerSide() * c.PatchesPerSide() }

// Plan lists the weights a model of config cfg reads (checkpoint names with
// the "vision_model." prefix, and shapes) without loading anything.
func Plan(cfg Config) ([]weights.Spec, error) {
	return hfmodel.Plan(cfg, cfg.Validate, build)
}

// Load reads a SiglipVisionModel folder (names with or without the
// "vision_model." prefix) onto be in dtype dt.
func Load(dir string, be tensor.Backend, dt tensor.DType) (*Model, error) {
	return hfmodel.Load(dir, be, dt, ReadConfig, build)
}

// build reads the weights of cfg through l (a plan only records them).
func build(l *weights.Builder, cfg Config) *Model {
	act, _ := encoder.ParseAct(cfg.HiddenAct) // checked by Validate
	d, f, p := cfg.HiddenSize, cfg.IntermediateSize, cfg.PatchSize
	l = l.Sub("vision_model")
	m := &Model{Config: cfg, act: act, Weights: hfmodel.Held(l)}
	m.patchW = l.Get("embeddings.patch_embedding.weight", d, cfg.NumChannels, p, p)
	m.patchB = l.Get("embeddings.patch_embedding.bias", d)
	m.pos = l.Get("embeddings.position_embedding.weight", cfg.Tokens(), d)
	m.layers = encoder.LoadLayers(l, "encoder.layers.", cfg.NumHiddenLayers, d, f)
	m.postW = l.Get("post_layernorm.weight", d)
	m.postB = l.Get("post_layernorm.bias", d)
	return m
}

// Forward encodes pixel values (B, 3, S, S), already normalised by the
// processor, to last_hidden_state (B, Tokens, hidden). S is image_size or
// any side with the same PatchesPerSide (the position table has Tokens
// rows); the convolution reads the first PatchesPerSide·patch_size rows and
// columns.
func (m *Model) Forward(s *tensor.Scope, pixels *tensor.Tensor) *tensor.Tensor {
	sh := pixels.Shape()
	if len(sh) != 4 || sh[1] != m.NumChannels || sh[2] != sh[3] || sh[2]/m.PatchSize != m.PatchesPerSide() {
		tensor.Fail("siglip", "pixel values %v, want (B, %d, S, S) with S/%d = %d patches a side (S = image_size %d)",
			sh, m.NumChannels, m.PatchSize, m.PatchesPerSide(), m.ImageSize)
	}
	b, d := sh[0], m.HiddenSize
	x := s.Conv2d(s.Cast(s.To(pixels), m.ComputeDType()), m.patchW, m.patchB, [2]int{m.PatchSize, m.PatchSize}, [2]int{})
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
