package vae

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
)

// The released hunyuanvideo-community vae/config.json loads through
// ReadConfig (what Load uses), equals DefaultConfig, and plans the released
// shapes.
func TestReleasedConfigVAE(t *testing.T) {
	cfg, specs := plantest.Released(t, "vae", ReadConfig, Plan)
	plantest.SameConfig(t, cfg, DefaultConfig())
	n := plantest.Shapes(t, specs, map[string]string{
		"encoder.conv_in.conv.weight":                             "[128 3 3 3 3]",
		"encoder.conv_out.conv.weight":                            "[32 512 3 3 3]",
		"decoder.conv_in.conv.weight":                             "[512 16 3 3 3]",
		"decoder.up_blocks.3.resnets.0.conv_shortcut.conv.weight": "[128 256 1 1 1]",
		"post_quant_conv.weight":                                  "[16 16 1 1 1]",
	})
	// Independently: causal 3×3×3 convs, resnets (two GroupNorms, two convs,
	// a 1×1×1 shortcut when the width changes), the mid-block attention.
	conv := func(in, out, k int64) int64 { return in*out*k*k*k + out }
	resnet := func(in, out int64) int64 {
		r := 2*in + conv(in, out, 3) + 2*out + conv(out, out, 3)
		if in != out {
			r += conv(in, out, 1)
		}
		return r
	}
	mid := func(c int64) int64 { return 2*resnet(c, c) + 2*c + 4*(c*c+c) }
	ch := []int64{128, 256, 512, 512}
	enc := conv(3, 128, 3)
	prev := ch[0]
	for i, c := range ch {
		enc += resnet(prev, c) + resnet(c, c)
		if i < 3 {
			enc += conv(c, c, 3)
		}
		prev = c
	}
	enc += mid(512) + 2*512 + conv(512, 32, 3) + conv(32, 32, 1)
	dec := conv(16, 16, 1) + conv(16, 512, 3) + mid(512)
	prev = 512
	for i := 3; i >= 0; i-- {
		c := ch[i]
		dec += resnet(prev, c) + 2*resnet(c, c)
		if i > 0 {
			dec += conv(c, c, 3)
		}
		prev = c
	}
	dec += 2*128 + conv(128, 3, 3)
	if n != enc+dec {
		t.Errorf("%d parameters, want %d (encoder %d, decoder %d)", n, enc+dec, enc, dec)
	}
	t.Logf("released config vae: ok (HunyuanVideo causal 3-D VAE, channels %v, %d latent channels, %d× spatial, %d× temporal, scaling %g, %d tensors, %.3f B params)",
		cfg.BlockOutChannels, cfg.LatentChannels, cfg.SpatialCompressionRatio, cfg.TemporalCompressionRatio, cfg.ScalingFactor, len(specs), float64(n)/1e9)
}

// The plan is what the checkpoint holds.
func TestPlanMatchesCheckpoint(t *testing.T) {
	plantest.Checkpoint(t, golden.Cases(t, "vae.decode")[0].ModelDir, ReadConfig, Plan)
}
