package hunyuan

import (
	"math"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/testdevice"
	"github.com/framepack-go/framepack/tensor"
)

// tinyConfig is a small config with every code path.
func tinyConfig() Config {
	c := FramePackI2V()
	c.NumAttentionHeads, c.AttentionHeadDim = 2, 16
	c.RopeAxesDim = []int{4, 6, 6}
	c.NumLayers, c.NumSingleLayers, c.NumRefinerLayers = 1, 1, 1
	c.TextEmbedDim, c.PooledProjectionDim, c.ImageProjDim = 32, 8, 24
	return c
}

func TestRandomModelSection(t *testing.T) {
	cfg := tinyConfig()
	sec := Section{Batch: 1, LatentH: 10, LatentW: 6, WindowSize: 2, LatentPadding: 1, ImageTokens: 5, TextTokens: 12, ValidText: 7}
	in := SectionInputs(cfg, sec, 1)
	if want := []int64{0, 4}; in.CleanLatentIndices[0] != want[0] || in.CleanLatentIndices[1] != want[1] {
		t.Errorf("clean indices %v, want %v", in.CleanLatentIndices, want)
	}
	if img, txt := cfg.Tokens(sec); img != 74 || txt != 12 {
		t.Errorf("tokens %d + %d, want 74 + 12", img, txt)
	}
	be := testdevice.Backend(t)
	var outs [][]float32
	for _, opts := range []Options{{}, {HostBlocks: true}, {HostBlocks: true, KeepBlockBytes: 200 << 10}} {
		m, err := RandomModel(cfg, be, opts, 7)
		if err != nil {
			t.Fatal(err)
		}
		out := forward(t, m, in)
		m.Close()
		if got := out.Shape(); !slices.Equal(got, []int{1, 16, 2, 10, 6}) {
			t.Fatalf("output %v", got)
		}
		for _, v := range out.Float32s() {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatal("non-finite output")
			}
		}
		outs = append(outs, out.Float32s())
	}
	for i := 1; i < len(outs); i++ {
		if r := numcmp.RelL2(outs[i], outs[0]); r != 0 {
			t.Errorf("same seed, host blocks (case %d): rel_l2 %g, want 0", i, r)
		}
	}

	m, err := RandomModel(cfg, be, Options{DType: tensor.BF16}, 7)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if r := numcmp.RelL2(forward(t, m, in).Float32s(), outs[0]); r > 0.05 || math.IsNaN(r) {
		t.Errorf("bf16 random model: rel_l2 %g from f32", r)
	}
}

func TestBenchSectionSize(t *testing.T) {
	cfg := FramePackI2V()
	img, txt := cfg.Tokens(BenchSection())
	// §3.2's table for 544×704: 17226 image-stream tokens.
	if img != 17226 || txt != 829 {
		t.Errorf("tokens %d + %d, want 17226 + 829", img, txt)
	}
	gemm, attn := cfg.BlockFLOPs(img, txt)
	t.Logf("one forward: %.1f TFLOP GEMM, %.1f TFLOP attention", gemm/1e12, attn/1e12)
}
