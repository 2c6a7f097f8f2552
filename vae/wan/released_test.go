package wan

import (
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/plantest"
)

// The released Wan 2.1 vae/config.json loads through ReadConfig, equals
// DefaultConfig, and plans the released shapes and parameter count.
func TestReleasedConfigWanVAE(t *testing.T) {
	cfg, specs := plantest.Released(t, "wan_vae", ReadConfig, Plan)
	plantest.SameConfig(t, cfg, DefaultConfig())
	n := plantest.Shapes(t, specs, map[string]string{
		"encoder.conv_in.weight":                             "[96 3 3 3 3]",
		"encoder.down_blocks.2.resample.1.weight":            "[96 96 3 3]",
		"encoder.down_blocks.5.time_conv.weight":             "[192 192 3 1 1]",
		"encoder.down_blocks.6.conv_shortcut.weight":         "[384 192 1 1 1]",
		"encoder.mid_block.attentions.0.to_qkv.weight":       "[1152 384 1 1]",
		"encoder.mid_block.attentions.0.norm.gamma":          "[384 1 1]",
		"encoder.norm_out.gamma":                             "[384 1 1 1]",
		"encoder.conv_out.weight":                            "[32 384 3 3 3]",
		"quant_conv.weight":                                  "[32 32 1 1 1]",
		"post_quant_conv.weight":                             "[16 16 1 1 1]",
		"decoder.conv_in.weight":                             "[384 16 3 3 3]",
		"decoder.up_blocks.0.upsamplers.0.time_conv.weight":  "[768 384 3 1 1]",
		"decoder.up_blocks.0.upsamplers.0.resample.1.weight": "[192 384 3 3]",
		"decoder.up_blocks.1.resnets.0.conv_shortcut.weight": "[384 192 1 1 1]",
		"decoder.up_blocks.2.upsamplers.0.resample.1.weight": "[96 192 3 3]",
		"decoder.up_blocks.3.resnets.2.conv2.weight":         "[96 96 3 3 3]",
		"decoder.conv_out.weight":                            "[3 96 3 3 3]",
	})
	for _, s := range specs {
		if s.Name == "decoder.up_blocks.2.upsamplers.0.time_conv.weight" {
			t.Error("up block 2 upsamples in time: temperal_downsample[0] is false")
		}
	}
	// Independently: convs, resnets (two RMS norms' γ, two 3×3×3 convs, a
	// 1×1×1 shortcut when the width changes), the mid blocks.
	conv := func(in, out, kt, k int64) int64 { return in*out*kt*k*k + out }
	resnet := func(in, out int64) int64 {
		r := in + conv(in, out, 3, 3) + out + conv(out, out, 3, 3)
		if in != out {
			r += conv(in, out, 1, 1)
		}
		return r
	}
	mid := func(c int64) int64 { return 2*resnet(c, c) + c + conv(c, 3*c, 1, 1) + conv(c, c, 1, 1) }
	enc := conv(3, 96, 3, 3)
	// encoder: 96 → 96 (down 2d), 96 → 192 (down 3d), 192 → 384 (down 3d), 384 → 384
	enc += 2*resnet(96, 96) + conv(96, 96, 1, 3)
	enc += resnet(96, 192) + resnet(192, 192) + conv(192, 192, 1, 3) + conv(192, 192, 3, 1)
	enc += resnet(192, 384) + resnet(384, 384) + conv(384, 384, 1, 3) + conv(384, 384, 3, 1)
	enc += 2*resnet(384, 384) + mid(384) + 384 + conv(384, 32, 3, 3) + conv(32, 32, 1, 1)
	dec := conv(16, 16, 1, 1) + conv(16, 384, 3, 3) + mid(384)
	// decoder: 384 → 384 (up 3d to 192), 192 → 384 (up 3d to 192), 192 → 192 (up 2d to 96), 96 → 96
	dec += 3*resnet(384, 384) + conv(384, 192, 1, 3) + conv(384, 768, 3, 1)
	dec += resnet(192, 384) + 2*resnet(384, 384) + conv(384, 192, 1, 3) + conv(384, 768, 3, 1)
	dec += 3*resnet(192, 192) + conv(192, 96, 1, 3)
	dec += 3*resnet(96, 96) + 96 + conv(96, 3, 3, 3)
	t.Logf("released Wan 2.1 VAE: %d parameters (encoder %d, decoder %d)", n, enc, dec)
	if n != enc+dec {
		t.Errorf("%d parameters, the formula gives %d", n, enc+dec)
	}
}

// TestConfigRefusals: each unsupported or inconsistent key is refused,
// naming it.
func TestConfigRefusals(t *testing.T) {
	two, four := 2, 4
	for key, edit := range map[string]func(*Config){
		"is_residual":           func(c *Config) { c.IsResidual = true },
		"patch_size":            func(c *Config) { c.PatchSize = &two },
		"attn_scales":           func(c *Config) { c.AttnScales = []float64{0.5} },
		"temperal_downsample":   func(c *Config) { c.TemperalDownsample = []bool{true} },
		"scale_factor_spatial":  func(c *Config) { c.ScaleFactorSpatial = &four },
		"scale_factor_temporal": func(c *Config) { c.ScaleFactorTemporal = &two },
		"latents_std":           func(c *Config) { c.LatentsStd = c.LatentsStd[:3] },
		"dim_mult":              func(c *Config) { c.DimMult = nil },
	} {
		c := DefaultConfig()
		edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: err = %v, want one naming the key", key, err)
		}
	}
	one := 1
	c := DefaultConfig()
	c.PatchSize = &one // patchify with 1 is the identity
	if err := c.Validate(); err != nil {
		t.Errorf("patch_size 1: %v", err)
	}
}
