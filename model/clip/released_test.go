package clip

import (
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
)

// The released hunyuanvideo-community text_encoder_2/config.json (legacy
// eos_token_id 2, quick_gelu, torch_dtype) loads through ReadConfig (what
// Load uses) and plans the released shapes.
func TestReleasedConfigCLIP(t *testing.T) {
	cfg, specs := plantest.Released(t, "text_encoder_2", ReadConfig, Plan)
	if cfg.EOSTokenID != 2 {
		t.Errorf("eos_token_id %d, want the legacy 2", cfg.EOSTokenID)
	}
	n := plantest.Shapes(t, specs, map[string]string{
		"text_model.embeddings.token_embedding.weight":    "[49408 768]",
		"text_model.embeddings.position_embedding.weight": "[77 768]",
		"text_model.encoder.layers.11.mlp.fc2.weight":     "[768 3072]",
		"text_model.final_layer_norm.weight":              "[768]",
	})
	// Independently: token and position tables, 12 pre-LN encoder layers,
	// the final LayerNorm.
	v, p, d, f, layers := int64(49408), int64(77), int64(768), int64(3072), int64(12)
	want := v*d + p*d + layers*(4*(d*d+d)+(f*d+f)+(d*f+d)+4*d) + 2*d
	if n != want {
		t.Errorf("%d parameters, want %d", n, want)
	}
	t.Logf("released config text_encoder_2: ok (CLIP-L text %d layers, hidden %d, %d positions, legacy eos id %d, %d tensors, %.1f M params)",
		cfg.NumHiddenLayers, cfg.HiddenSize, cfg.MaxPositionEmbeddings, cfg.EOSTokenID, len(specs), float64(n)/1e6)
}

// The plan is what the checkpoint holds.
func TestPlanMatchesCheckpoint(t *testing.T) {
	for _, c := range golden.Cases(t, "text_encoder.clip") {
		plantest.Checkpoint(t, c.ModelDir, ReadConfig, Plan)
	}
}
