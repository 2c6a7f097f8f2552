package hunyuan

import (
	"fmt"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/internal/testutil/plantest"
	"github.com/framepack-go/framepack/weights"
)

// The released lllyasviel/FramePackI2V_HY transformer/config.json loads
// through ReadConfig (what Load uses), equals FramePackI2V(), and plans the
// released shapes: 12.87 B parameters.
func TestReleasedConfigTransformer(t *testing.T) {
	cfg, err := ReadConfig(plantest.ReleasedDir("transformer"))
	if err != nil {
		t.Fatal(err)
	}
	plantest.SameConfig(t, cfg, FramePackI2V())
	if cfg.Inner() != 3072 {
		t.Errorf("hidden size %d, want 3072", cfg.Inner())
	}
	specs, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	shapes := map[string]string{}
	for _, s := range specs {
		n += s.Numel()
		shapes[s.Name] = fmt.Sprint(s.Shape)
	}
	for name, want := range map[string]string{
		"x_embedder.proj.weight":                         "[3072 16 1 2 2]",
		"clean_x_embedder.proj_4x.weight":                "[3072 16 4 8 8]",
		"image_projection.up.weight":                     "[9216 1152]",
		"context_embedder.proj_in.weight":                "[3072 4096]",
		"transformer_blocks.19.attn.add_v_proj.weight":   "[3072 3072]",
		"single_transformer_blocks.39.proj_out.weight":   "[3072 15360]",
		"single_transformer_blocks.0.attn.norm_k.weight": "[128]",
		"proj_out.weight":                                "[64 3072]",
	} {
		if shapes[name] != want {
			t.Errorf("%s: shape %s, want %s", name, shapes[name], want)
		}
	}
	// Independently, module by module as diffusers builds them.
	D, hd, F, T, P, S := int64(3072), int64(128), int64(4*3072), int64(4096), int64(768), int64(1152)
	lin := func(in, out int64) int64 { return in*out + out }
	want := lin(16*1*2*2, D) + // x_embedder
		lin(16*1*2*2, D) + lin(16*2*4*4, D) + lin(16*4*8*8, D) + // clean_x_embedder
		lin(256, D) + lin(D, D) + lin(T, D) + lin(D, D) + lin(T, D) + // refiner: time, text, proj_in
		2*(2*D+4*lin(D, D)+2*D+lin(D, F)+lin(F, D)+lin(D, 2*D)) + // 2 refiner blocks
		lin(256, D) + lin(D, D) + lin(256, D) + lin(D, D) + lin(P, D) + lin(D, D) + // time, guidance, pooled text
		lin(S, 3*D) + lin(3*D, D) + // image_projection
		20*(2*lin(D, 6*D)+8*lin(D, D)+4*hd+2*(lin(D, F)+lin(F, D))) + // double blocks
		40*(lin(D, 3*D)+3*lin(D, D)+lin(D, F)+2*hd+lin(D+F, D)) + // single blocks
		lin(D, 2*D) + lin(D, 2*2*16) // norm_out, proj_out
	if n != want {
		t.Errorf("%d parameters, want %d", n, want)
	}
	t.Logf("released config transformer: ok (FramePack packed HunyuanVideo, hidden %d = %d heads × %d, %d double + %d single blocks, rope axes %v, %d tensors, %.3f B params)",
		cfg.Inner(), cfg.NumAttentionHeads, cfg.AttentionHeadDim, cfg.NumLayers, cfg.NumSingleLayers, cfg.RopeAxesDim, len(specs), float64(n)/1e9)
}

// The plan is what the checkpoint holds, one file or sharded.
func TestPlanMatchesCheckpoint(t *testing.T) {
	for _, c := range golden.Cases(t, "transformer") {
		_, specs := plantest.Plan(t, c.ModelDir, ReadConfig, Plan)
		ck, err := weights.Open(c.ModelDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := ck.Check(specs); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		if n := len(ck.Names()); n != len(specs) {
			t.Errorf("%s: the checkpoint holds %d tensors, the plan %d", c.Name, n, len(specs))
		}
		ck.Close()
	}
}
