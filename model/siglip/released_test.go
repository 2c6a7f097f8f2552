package siglip

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
)

// The released flux_redux_bfl image_encoder/config.json loads through
// ReadConfig (what Load uses) and plans the released shapes: image_size 384
// with patch 14 gives 27×27 = 729 tokens.
func TestReleasedConfigSigLIP(t *testing.T) {
	cfg, specs := plantest.Released(t, "image_encoder", ReadConfig, Plan)
	if cfg.Tokens() != 729 || cfg.PatchesPerSide() != 27 {
		t.Errorf("%d tokens (%d a side), want 729 (27)", cfg.Tokens(), cfg.PatchesPerSide())
	}
	n := plantest.Shapes(t, specs, map[string]string{
		"vision_model.embeddings.position_embedding.weight": "[729 1152]",
		"vision_model.embeddings.patch_embedding.weight":    "[1152 3 14 14]",
		"vision_model.encoder.layers.26.mlp.fc1.weight":     "[4304 1152]",
		"vision_model.post_layernorm.bias":                  "[1152]",
	})
	// Independently: the patch conv, the position table, 27 pre-LN encoder
	// layers, the final LayerNorm.
	d, f, p, tok, layers := int64(1152), int64(4304), int64(14), int64(27*27), int64(27)
	layer := 4*(d*d+d) + (f*d + f) + (d*f + d) + 4*d
	want := (d*3*p*p + d) + tok*d + layers*layer + 2*d
	// The released file also holds the pooling head, which FramePack does
	// not use (probe, attention in/out, LayerNorm, MLP): 0.428 B in all.
	head := d + (3*d*d + 3*d) + (d*d + d) + 2*d + (f*d + f) + (d*f + d)
	if n != want || n+head != 428_225_600 {
		t.Errorf("%d parameters (+ %d in the head = %d), want %d (428 225 600 with the head)", n, head, n+head, want)
	}
	t.Logf("released config image_encoder: ok (SigLIP %d layers, hidden %d, image %d / patch %d, image tokens %d, %d tensors, %.3f B params + %.3f B unused head)",
		cfg.NumHiddenLayers, cfg.HiddenSize, cfg.ImageSize, cfg.PatchSize, cfg.Tokens(), len(specs), float64(want)/1e9, float64(head)/1e9)
}

// The plan is what the checkpoint holds: the golden model's plan passes
// Check on its weights, and a wrong plan does not.
func TestPlanMatchesCheckpoint(t *testing.T) {
	cfg, _, ck := plantest.Checkpoint(t, golden.Cases(t, "image_encoder.siglip")[0].ModelDir, ReadConfig, Plan)
	cfg.ImageSize += cfg.PatchSize
	bad, _ := Plan(cfg)
	if err := ck.Check(bad); err == nil {
		t.Error("a plan with more patches passes Check")
	}
}
