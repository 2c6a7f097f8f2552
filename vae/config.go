// Package vae is HunyuanVideo's 3-D causal VAE (diffusers'
// AutoencoderKLHunyuanVideo): the encoder, the decoder, the diagonal Gaussian
// posterior, and diffusers' frame-wise and spatially tiled decode paths, with
// the tile sizes planned from a memory budget by a peak-memory model of the
// decoder.
package vae

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/framepack-go/framepack/weights"
)

// Config is the model's config.json. Missing keys take diffusers' class
// defaults, which are also the released checkpoint's values.
type Config struct {
	InChannels               int      `json:"in_channels"`
	OutChannels              int      `json:"out_channels"`
	LatentChannels           int      `json:"latent_channels"`
	DownBlockTypes           []string `json:"down_block_types"`
	UpBlockTypes             []string `json:"up_block_types"`
	BlockOutChannels         []int    `json:"block_out_channels"`
	LayersPerBlock           int      `json:"layers_per_block"`
	ActFn                    string   `json:"act_fn"`
	NormNumGroups            int      `json:"norm_num_groups"`
	ScalingFactor            float32  `json:"scaling_factor"`
	SpatialCompressionRatio  int      `json:"spatial_compression_ratio"`
	TemporalCompressionRatio int      `json:"temporal_compression_ratio"`
	MidBlockAddAttention     bool     `json:"mid_block_add_attention"`
}

const (
	downBlockType = "HunyuanVideoDownBlock3D"
	upBlockType   = "HunyuanVideoUpBlock3D"
	normEps       = 1e-6
)

// DefaultConfig is the released HunyuanVideo VAE
// (hunyuanvideo-community/HunyuanVideo/vae).
func DefaultConfig() Config {
	n := 4
	down, up := make([]string, n), make([]string, n)
	for i := range down {
		down[i], up[i] = downBlockType, upBlockType
	}
	return Config{
		InChannels: 3, OutChannels: 3, LatentChannels: 16,
		DownBlockTypes: down, UpBlockTypes: up,
		BlockOutChannels: []int{128, 256, 512, 512},
		LayersPerBlock:   2, ActFn: "silu", NormNumGroups: 32,
		ScalingFactor:           0.476986,
		SpatialCompressionRatio: 8, TemporalCompressionRatio: 4,
		MidBlockAddAttention: true,
	}
}

// Validate reports a config this implementation cannot run, naming the key.
func (c *Config) Validate() error {
	n := len(c.BlockOutChannels)
	switch {
	case n == 0:
		return fmt.Errorf("block_out_channels is empty")
	case c.InChannels <= 0 || c.OutChannels <= 0 || c.LatentChannels <= 0:
		return fmt.Errorf("in_channels %d, out_channels %d, latent_channels %d must be positive", c.InChannels, c.OutChannels, c.LatentChannels)
	case c.LayersPerBlock <= 0:
		return fmt.Errorf("layers_per_block %d must be positive", c.LayersPerBlock)
	case c.LayersPerBlock > weights.MaxLayers || n > weights.MaxLayers:
		return fmt.Errorf("layers_per_block %d, %d blocks: more than any checkpoint holds (at most %d)", c.LayersPerBlock, n, weights.MaxLayers)
	case c.ActFn != "silu" && c.ActFn != "swish":
		return fmt.Errorf("act_fn %q is not supported (only silu)", c.ActFn)
	case c.TemporalCompressionRatio != 4:
		return fmt.Errorf("temporal_compression_ratio %d is not supported (the decoder needs 4)", c.TemporalCompressionRatio)
	case c.SpatialCompressionRatio <= 0 || bits.OnesCount(uint(c.SpatialCompressionRatio)) != 1:
		return fmt.Errorf("spatial_compression_ratio %d must be a power of two", c.SpatialCompressionRatio)
	case c.NormNumGroups <= 0:
		return fmt.Errorf("norm_num_groups %d must be positive", c.NormNumGroups)
	case !(c.ScalingFactor > 0) || math.IsInf(float64(c.ScalingFactor), 0):
		// Latents are divided by it before decoding: 0 makes them Inf.
		return fmt.Errorf("scaling_factor %v must be positive and finite", c.ScalingFactor)
	}
	if len(c.DownBlockTypes) != n || len(c.UpBlockTypes) != n {
		return fmt.Errorf("%d down_block_types and %d up_block_types for %d block_out_channels", len(c.DownBlockTypes), len(c.UpBlockTypes), n)
	}
	for i := 0; i < n; i++ {
		if c.DownBlockTypes[i] != downBlockType {
			return fmt.Errorf("down_block_types[%d] %q is not supported", i, c.DownBlockTypes[i])
		}
		if c.UpBlockTypes[i] != upBlockType {
			return fmt.Errorf("up_block_types[%d] %q is not supported", i, c.UpBlockTypes[i])
		}
		if ch := c.BlockOutChannels[i]; ch <= 0 || ch%c.NormNumGroups != 0 {
			return fmt.Errorf("block_out_channels[%d] = %d is not a positive multiple of norm_num_groups %d", i, ch, c.NormNumGroups)
		}
	}
	if s := log2(c.SpatialCompressionRatio); s > n {
		return fmt.Errorf("spatial_compression_ratio %d needs %d blocks, have %d", c.SpatialCompressionRatio, s, n)
	}
	if n < 3 {
		return fmt.Errorf("%d blocks cannot compress time by 4", n)
	}
	return nil
}

func log2(v int) int { return bits.Len(uint(v)) - 1 }

// resample says how block i scales: spatial ×2 and/or temporal ×2 (down in
// the encoder, up in the decoder), as diffusers chooses for a temporal ratio
// of 4: spatial in the first log2(spatial) blocks, temporal in the two blocks
// before the last.
func (c *Config) resample(i int) (spatial, temporal bool) {
	n := len(c.BlockOutChannels)
	spatial = i < log2(c.SpatialCompressionRatio)
	temporal = i >= n-1-log2(c.TemporalCompressionRatio) && i != n-1
	return
}

// LatentFrames is the latent frame count for t pixel frames ((t−1)/4 + 1).
func (c *Config) LatentFrames(t int) int { return (t-1)/c.TemporalCompressionRatio + 1 }

// SampleFrames is the pixel frame count for t latent frames ((t−1)·4 + 1).
func (c *Config) SampleFrames(t int) int { return (t-1)*c.TemporalCompressionRatio + 1 }
