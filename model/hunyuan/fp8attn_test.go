package hunyuan

import (
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/tensor"
)

// attnSpy records the FP8 flag of every attention call.
type attnSpy struct {
	*cpu.Backend
	fp8 []bool
}

func (a *attnSpy) Attention(dst, q, k, v *tensor.Tensor, p tensor.AttnParams) error {
	a.fp8 = append(a.fp8, p.FP8)
	return a.Backend.Attention(dst, q, k, v, p)
}

// Options.FP8Attention lets every block's attention run in FP8 (and only
// the blocks': the refiner's stays exact); without it none does.
func TestFP8AttentionOption(t *testing.T) {
	cfg := tinyConfig()
	sec := Section{Batch: 1, LatentH: 4, LatentW: 4, WindowSize: 2, LatentPadding: 1, ImageTokens: 5, TextTokens: 6, ValidText: 4}
	in := SectionInputs(cfg, sec, 1)
	for _, on := range []bool{false, true} {
		be := &attnSpy{Backend: cpu.New()}
		m, err := RandomModel(cfg, be, Options{FP8Attention: on}, 3)
		if err != nil {
			t.Fatal(err)
		}
		forward(t, m, in)
		m.Close()
		blocks := 0
		for _, f := range be.fp8 {
			if f {
				blocks++
			}
		}
		want := 0
		if on {
			want = cfg.NumLayers + cfg.NumSingleLayers
		}
		if blocks != want || len(be.fp8) < cfg.NumLayers+cfg.NumSingleLayers {
			t.Errorf("FP8Attention %v: %d of %d attention calls in FP8, want %d", on, blocks, len(be.fp8), want)
		}
	}
}
