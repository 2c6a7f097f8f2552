package framepack

import (
	"fmt"
	"math"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/localcomm"
	"github.com/framepack-go/framepack/tensor"
)

// generateRanks runs req on n in-process ranks of the tiny pipeline (each
// its own CPU pipeline, one Local communicator) and returns each rank's
// result.
func generateRanks(t *testing.T, n int, req Request) []*Result {
	t.Helper()
	res := make([]*Result, n)
	errs := localcomm.Run(localcomm.New(n), func(c tensor.Comm) error {
		p, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t), Comm: c})
		if err != nil {
			return err
		}
		defer p.Close()
		res[c.Rank()], err = p.Generate(t.Context(), req)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return res
}

// A whole job on 2 ranks (sequence parallel), and with real CFG on 2 and 4
// ranks (the passes side by side, each half sequence parallel on 4), gives
// the latents and video of one pipeline without ranks (the shared runs) on
// rank 0; the other ranks return the latents and no frames. CFG on
// 2 ranks without TeaCache runs in the full suite only (testmode): cfg_4
// splits the passes the same way, and cfg_teacache_2 does on 2 ranks.
func TestParallelGenerate(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	img := testImage(t)
	for _, c := range []struct {
		name     string
		ranks    int
		cfg      float64
		teacache bool
		full     bool
	}{
		{"seq_2", 2, 1, true, false},
		{"cfg_2", 2, 3, false, true},
		{"cfg_4", 4, 3, false, false},
		{"cfg_teacache_2", 2, 3, true, false}, // TeaCache keeps both passes on every rank
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.full && !testmode.Full() {
				t.Skipf("%s=1 runs it: cfg_4 and cfg_teacache_2 split the CFG passes over ranks", testmode.Env)
			}
			t.Parallel()
			req := smallRequest(img)
			req.Seconds, req.Steps = 0.8, 2 // 2 sections
			req.CFG, req.TeaCache = c.cfg, c.teacache
			if c.cfg != 1 {
				req.NegativePrompt = "blurry"
			}
			want := runShared(t, req).Result
			got := generateRanks(t, c.ranks, req)
			for r, res := range got {
				if d := numcmp.RelL2(res.Latents.ToFloat32(), want.Latents.ToFloat32()); d > 1e-5 || math.IsNaN(d) {
					t.Errorf("rank %d: latents rel_l2 %.3g from one pipeline's", r, d)
				}
				if r > 0 && res.T != 0 {
					t.Errorf("rank %d returned %d frames: only rank 0 decodes", r, res.T)
				}
			}
			if got[0].T != want.T || fmt.Sprint(got[0].Width, got[0].Height) != fmt.Sprint(want.Width, want.Height) {
				t.Fatalf("rank 0: %d frames %d×%d, one pipeline %d %d×%d", got[0].T, got[0].Width, got[0].Height, want.T, want.Width, want.Height)
			}
			diff := 0
			for i := range got[0].Pix {
				if d := int(got[0].Pix[i]) - int(want.Pix[i]); d > 1 || d < -1 {
					diff++
				}
			}
			if diff > 0 {
				t.Errorf("rank 0 frames: %d of %d bytes differ by more than 1 from one pipeline's", diff, len(want.Pix))
			}
		})
	}
}
