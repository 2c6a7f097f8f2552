// Package wan is Wan 2.1's causal video VAE (diffusers' AutoencoderKLWan):
// the encoder and decoder run chunk by chunk with diffusers' feature cache
// (one latent frame at a time when decoding, 1 + 4 + 4 … pixel frames when
// encoding), its spatial tiling (enable_tiling) with the same blend, and the
// tiles planned from a memory budget. Weight names are diffusers'.
package wan

import (
	"fmt"

	"github.com/framepack-go/framepack/weights"
)

// Config is the model's config.json. Missing keys take diffusers' class
// defaults, which are also the released Wan 2.1 VAE's values.
type Config struct {
	BaseDim            int       `json:"base_dim"`
	DecoderBaseDim     *int      `json:"decoder_base_dim"`
	ZDim               int       `json:"z_dim"`
	DimMult            []int     `json:"dim_mult"`
	NumResBlocks       int       `json:"num_res_blocks"`
	AttnScales         []float64 `json:"attn_scales"`
	TemperalDownsample []bool    `json:"temperal_downsample"`
	LatentsMean        []float32 `json:"latents_mean"`
	LatentsStd         []float32 `json:"latents_std"`
	IsResidual         bool      `json:"is_residual"`
	InChannels         int       `json:"in_channels"`
	OutChannels        int       `json:"out_channels"`
	PatchSize          *int      `json:"patch_size"`
	// ScaleFactorTemporal and ScaleFactorSpatial are what diffusers tiles
	// with; null means what the architecture gives.
	ScaleFactorTemporal *int `json:"scale_factor_temporal"`
	ScaleFactorSpatial  *int `json:"scale_factor_spatial"`
}

// ClassName is config.json's _class_name for this model.
const ClassName = "AutoencoderKLWan"

// DefaultConfig is the released Wan 2.1 VAE (Wan-AI/Wan2.1-*-Diffusers/vae).
func DefaultConfig() Config {
	t, s := 4, 8
	return Config{
		BaseDim: 96, ZDim: 16, DimMult: []int{1, 2, 4, 4}, NumResBlocks: 2,
		AttnScales: []float64{}, TemperalDownsample: []bool{false, true, true},
		LatentsMean: []float32{-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
			0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921},
		LatentsStd: []float32{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
			3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160},
		InChannels: 3, OutChannels: 3,
		ScaleFactorTemporal: &t, ScaleFactorSpatial: &s,
	}
}

// Validate reports a config this implementation cannot run, naming the key.
func (c *Config) Validate() error {
	n := len(c.DimMult)
	switch {
	case c.IsResidual:
		return fmt.Errorf("is_residual true (Wan 2.2's residual up/down blocks) is not supported")
	case c.PatchSize != nil && *c.PatchSize != 1:
		return fmt.Errorf("patch_size %d (Wan 2.2's patchified VAE) is not supported", *c.PatchSize)
	case len(c.AttnScales) > 0:
		// diffusers' WanEncoder3d calls its down-path attention blocks with
		// the feature cache, which they do not take: such a model cannot
		// encode there either.
		return fmt.Errorf("attn_scales %v is not supported (only [])", c.AttnScales)
	case n == 0:
		return fmt.Errorf("dim_mult is empty")
	case c.BaseDim <= 0 || c.ZDim <= 0 || c.InChannels <= 0 || c.OutChannels <= 0 || c.NumResBlocks <= 0:
		return fmt.Errorf("base_dim %d, z_dim %d, in_channels %d, out_channels %d, num_res_blocks %d must be positive",
			c.BaseDim, c.ZDim, c.InChannels, c.OutChannels, c.NumResBlocks)
	case c.NumResBlocks > weights.MaxLayers || n > weights.MaxLayers:
		return fmt.Errorf("num_res_blocks %d, %d dim_mult entries: more than any checkpoint holds (at most %d)", c.NumResBlocks, n, weights.MaxLayers)
	case c.DecoderBaseDim != nil && *c.DecoderBaseDim <= 0:
		return fmt.Errorf("decoder_base_dim %d must be positive", *c.DecoderBaseDim)
	case len(c.TemperalDownsample) != n-1:
		// The decoder reads the list reversed: it must be one per down block.
		return fmt.Errorf("temperal_downsample has %d entries for %d down blocks", len(c.TemperalDownsample), n-1)
	}
	for i, m := range c.DimMult {
		if m <= 0 {
			return fmt.Errorf("dim_mult[%d] = %d must be positive", i, m)
		}
		// The decoder's upsamplers halve the channels (WanResample's
		// upsample_out_dim = dim // 2), and the next block takes that half.
		if i < n-1 && (c.decoderBase()*m)%2 != 0 {
			return fmt.Errorf("decoder_base_dim × dim_mult[%d] = %d is odd; the upsampler halves it", i, c.decoderBase()*m)
		}
	}
	if len(c.LatentsMean) != 0 && len(c.LatentsMean) != c.ZDim || len(c.LatentsStd) != 0 && len(c.LatentsStd) != c.ZDim {
		return fmt.Errorf("latents_mean has %d and latents_std %d values for z_dim %d", len(c.LatentsMean), len(c.LatentsStd), c.ZDim)
	}
	for i, s := range c.LatentsStd {
		if !(s > 0) {
			return fmt.Errorf("latents_std[%d] = %v must be positive", i, s)
		}
	}
	if t := c.archTemporal(); t > 4 {
		// diffusers encodes 4 frames per chunk after the first.
		return fmt.Errorf("temperal_downsample %v compresses time by %d; the chunked encoder needs at most 4", c.TemperalDownsample, t)
	}
	// diffusers tiles with the scale factors; one that is not the
	// architecture's would cut tiles that do not fit the decoder's output.
	if c.ScaleFactorSpatial != nil && *c.ScaleFactorSpatial != c.archSpatial() {
		return fmt.Errorf("scale_factor_spatial %d, but dim_mult %v downsamples by %d (set it to %d)", *c.ScaleFactorSpatial, c.DimMult, c.archSpatial(), c.archSpatial())
	}
	if c.ScaleFactorTemporal != nil && *c.ScaleFactorTemporal != c.archTemporal() {
		return fmt.Errorf("scale_factor_temporal %d, but temperal_downsample %v downsamples by %d (set it to %d)", *c.ScaleFactorTemporal, c.TemperalDownsample, c.archTemporal(), c.archTemporal())
	}
	return nil
}

func (c *Config) decoderBase() int {
	if c.DecoderBaseDim != nil {
		return *c.DecoderBaseDim
	}
	return c.BaseDim
}

func (c *Config) archSpatial() int { return 1 << (len(c.DimMult) - 1) }

func (c *Config) archTemporal() int {
	t := 1
	for _, d := range c.TemperalDownsample {
		if d {
			t *= 2
		}
	}
	return t
}

// SpatialRatio is the spatial compression (8 for the released model).
func (c *Config) SpatialRatio() int { return c.archSpatial() }

// TemporalRatio is the temporal compression (4 for the released model).
func (c *Config) TemporalRatio() int { return c.archTemporal() }

// SampleFrames is the pixel frame count for t latent frames: the first
// latent frame gives one frame, each other TemporalRatio.
func (c *Config) SampleFrames(t int) int { return 1 + (t-1)*c.archTemporal() }

// LatentFrames is the latent frame count for t pixel frames: diffusers
// encodes frame 0, then chunks of 4 frames (a last partial chunk is
// dropped), each giving 4/TemporalRatio latent frames.
func (c *Config) LatentFrames(t int) int { return 1 + (t-1)/4*(4/c.archTemporal()) }
