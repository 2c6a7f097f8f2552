package llama

import (
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
)

var releasedDir = plantest.ReleasedDir("text_encoder")

// The released hunyuanvideo-community text_encoder/config.json (old-style
// rope_theta with rope_scaling null, head_dim, torch_dtype) loads through
// ReadConfig (what Load uses) and plans the released shapes.
func TestReleasedConfigLlama(t *testing.T) {
	cfg, specs := plantest.Plan(t, releasedDir, ReadConfig, Plan)
	if cfg.Theta() != 500000 {
		t.Errorf("rope theta %v, want 500000", cfg.Theta())
	}
	n := plantest.Shapes(t, specs, map[string]string{
		"embed_tokens.weight":               "[128320 4096]",
		"layers.31.self_attn.k_proj.weight": "[1024 4096]",
		"layers.0.mlp.down_proj.weight":     "[4096 14336]",
		"norm.weight":                       "[4096]",
	})
	// Independently: embedding, 32 × (2 norms, q, k, v (8 KV heads of 128),
	// o, gate, up, down), final norm.
	v, d, f, kv, layers := int64(128320), int64(4096), int64(14336), int64(8*128), int64(32)
	want := v*d + layers*(2*d+d*d+2*kv*d+d*d+3*d*f) + d
	if n != want {
		t.Errorf("%d parameters, want %d", n, want)
	}
	t.Logf("released config text_encoder: ok (LLaMA %d layers, hidden %d, %d/%d heads of %d, rope theta %g, embedding %d rows, %d tensors, %.3f B params)",
		cfg.NumHiddenLayers, cfg.HiddenSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim, cfg.Theta(), cfg.VocabSize, len(specs), float64(n)/1e9)
}

// Newer transformers write rope_parameters instead of rope_theta; both load,
// and a rope scaling, which the model does not do, is refused by name.
func TestReleasedConfigLlamaRopeStyles(t *testing.T) {
	edit := func(f func(m map[string]any)) string { return plantest.EditedConfig(t, releasedDir, f) }
	newStyle := edit(func(m map[string]any) {
		delete(m, "rope_theta")
		delete(m, "rope_scaling")
		m["rope_parameters"] = map[string]any{"rope_theta": 500000.0, "rope_type": "default"}
		m["dtype"] = "float16"
		m["transformers_version"] = "5.0.0"
	})
	cfg, err := ReadConfig(newStyle)
	if err != nil || cfg.Theta() != 500000 {
		t.Errorf("rope_parameters: theta %v, %v", cfg.Theta(), err)
	}
	scaled := edit(func(m map[string]any) {
		m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0}
	})
	if _, err := ReadConfig(scaled); err == nil || !strings.Contains(err.Error(), "rope scaling") || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("rope_scaling llama3: %v", err)
	}
}

// The plan is what the checkpoint holds.
func TestPlanMatchesCheckpoint(t *testing.T) {
	_, specs, ck := plantest.Checkpoint(t, golden.Cases(t, "text_encoder.llama")[0].ModelDir, ReadConfig, Plan)
	if n := len(ck.Names()); n != len(specs) {
		t.Errorf("the checkpoint holds %d tensors, the plan %d", n, len(specs))
	}
}
