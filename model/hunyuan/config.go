// Package hunyuan is FramePack's packed HunyuanVideo transformer
// (HunyuanVideoTransformer3DModelPacked in FramePack's
// diffusers_helper/models/hunyuan_video_packed.py, which diffusers ships as
// HunyuanVideoFramepackTransformer3DModel): the noisy latents of one section,
// packed with the 1x/2x/4x history latents and a SigLIP image context, denoised
// by 20 dual-stream and 40 single-stream blocks, plus FramePack's TeaCache.
//
// The code follows the reference's forward() and uses the checkpoint's own
// weight names. Compute runs in one dtype (Options.DType) with FramePack's
// precision patches: LayerNorm in the compute dtype, RMSNorm statistics in
// f32, RoPE tables and timestep sinusoids in f32, and the final projection in
// f32 (high_quality_fp32_output_for_inference).
//
// Each block's q, k, v projections (and, in the single blocks, the MLP
// input) run as one GEMM. When the backend has fused kernels (backend/gpu)
// the elementwise work around the GEMMs runs fused: LayerNorm with the
// modulation, the gated residual add (with the preceding GEMM's bias),
// q/k RMSNorm + RoPE written straight into the joint attention layout, and
// the GELU; otherwise op by op, which is also their reference. Under
// Options.HostBlocks every block's weights live in one host allocation
// (page-locked where the backend offers it) and are copied to the device
// one block ahead, overlapping compute.
package hunyuan

import (
	"fmt"

	"github.com/framepack-go/framepack/weights"
)

// Config is the model's config.json. Absent keys take the reference
// constructor's defaults (the 13B FramePackI2V_HY model except for the two
// FramePack additions, which default to off as in the reference).
type Config struct {
	InChannels          int     `json:"in_channels"`
	OutChannels         int     `json:"out_channels"`
	NumAttentionHeads   int     `json:"num_attention_heads"`
	AttentionHeadDim    int     `json:"attention_head_dim"`
	NumLayers           int     `json:"num_layers"`
	NumSingleLayers     int     `json:"num_single_layers"`
	NumRefinerLayers    int     `json:"num_refiner_layers"`
	MLPRatio            float64 `json:"mlp_ratio"`
	PatchSize           int     `json:"patch_size"`
	PatchSizeT          int     `json:"patch_size_t"`
	QKNorm              string  `json:"qk_norm"`
	GuidanceEmbeds      bool    `json:"guidance_embeds"`
	TextEmbedDim        int     `json:"text_embed_dim"`
	PooledProjectionDim int     `json:"pooled_projection_dim"`
	RopeTheta           float64 `json:"rope_theta"`
	RopeAxesDim         []int   `json:"rope_axes_dim"`
	HasImageProj        bool    `json:"has_image_proj"`
	ImageProjDim        int     `json:"image_proj_dim"`
	HasCleanXEmbedder   bool    `json:"has_clean_x_embedder"`
}

// DefaultConfig is the reference constructor's defaults.
func DefaultConfig() Config {
	return Config{
		InChannels: 16, OutChannels: 16,
		NumAttentionHeads: 24, AttentionHeadDim: 128,
		NumLayers: 20, NumSingleLayers: 40, NumRefinerLayers: 2,
		MLPRatio: 4, PatchSize: 2, PatchSizeT: 1, QKNorm: "rms_norm", GuidanceEmbeds: true,
		TextEmbedDim: 4096, PooledProjectionDim: 768,
		RopeTheta: 256, RopeAxesDim: []int{16, 56, 56},
		ImageProjDim: 1152,
	}
}

// FramePackI2V is the config of lllyasviel/FramePackI2V_HY: the defaults with
// the SigLIP image projection and the clean-latent embedders installed.
func FramePackI2V() Config {
	c := DefaultConfig()
	c.HasImageProj = true
	c.HasCleanXEmbedder = true
	return c
}

// Inner is the model width (heads × head_dim).
func (c Config) Inner() int { return c.NumAttentionHeads * c.AttentionHeadDim }

// MLPDim is the feed-forward width, int(inner · mlp_ratio) as the reference.
func (c Config) MLPDim() int { return int(float64(c.Inner()) * c.MLPRatio) }

// Validate reports a config this implementation cannot run.
func (c Config) Validate() error {
	switch {
	case c.NumAttentionHeads <= 0 || c.AttentionHeadDim <= 0:
		return fmt.Errorf("num_attention_heads %d and attention_head_dim %d must be positive", c.NumAttentionHeads, c.AttentionHeadDim)
	case c.InChannels <= 0 || c.OutChannels <= 0:
		return fmt.Errorf("in_channels %d and out_channels %d must be positive", c.InChannels, c.OutChannels)
	case c.NumLayers < 0 || c.NumSingleLayers < 0 || c.NumRefinerLayers < 0:
		return fmt.Errorf("negative layer count (%d double, %d single, %d refiner)", c.NumLayers, c.NumSingleLayers, c.NumRefinerLayers)
	case max(c.NumLayers, c.NumSingleLayers, c.NumRefinerLayers) > weights.MaxLayers:
		return fmt.Errorf("num_layers %d, num_single_layers %d, num_refiner_layers %d: more than any checkpoint holds (at most %d each)",
			c.NumLayers, c.NumSingleLayers, c.NumRefinerLayers, weights.MaxLayers)
	case c.PatchSize != 2 || c.PatchSizeT != 1:
		// The clean-latent embedders and the 2x/4x RoPE pooling are written
		// for this patching in the reference.
		return fmt.Errorf("patch_size %d / patch_size_t %d: only 2 / 1 is supported", c.PatchSize, c.PatchSizeT)
	case c.QKNorm != "rms_norm":
		return fmt.Errorf("qk_norm %q: only \"rms_norm\" is supported", c.QKNorm)
	case c.MLPDim() <= 0:
		return fmt.Errorf("mlp_ratio %v gives no feed-forward width", c.MLPRatio)
	case c.TextEmbedDim <= 0 || c.PooledProjectionDim <= 0:
		return fmt.Errorf("text_embed_dim %d and pooled_projection_dim %d must be positive", c.TextEmbedDim, c.PooledProjectionDim)
	case c.HasImageProj && c.ImageProjDim <= 0:
		return fmt.Errorf("image_proj_dim %d must be positive", c.ImageProjDim)
	case c.HasCleanXEmbedder && c.InChannels != 16:
		return fmt.Errorf("in_channels %d: the clean-latent embedders take 16 channels", c.InChannels)
	case c.RopeTheta <= 0:
		return fmt.Errorf("rope_theta %v must be positive", c.RopeTheta)
	}
	if len(c.RopeAxesDim) != 3 {
		return fmt.Errorf("rope_axes_dim %v: want 3 axes (T, Y, X)", c.RopeAxesDim)
	}
	sum := 0
	for _, d := range c.RopeAxesDim {
		if d <= 0 || d%2 != 0 {
			return fmt.Errorf("rope_axes_dim %v: every axis must be even and positive", c.RopeAxesDim)
		}
		sum += d
	}
	if sum != c.AttentionHeadDim {
		return fmt.Errorf("rope_axes_dim %v sums to %d, not attention_head_dim %d", c.RopeAxesDim, sum, c.AttentionHeadDim)
	}
	return nil
}
