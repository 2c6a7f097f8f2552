package vae

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/tensor"
)

// smallConfig has every code path of the released model (shortcuts in up
// blocks 2 and 3, temporal and spatial resampling, mid-block attention) at
// a size that decodes in well under a second on two cores.
func smallConfig() Config {
	c := DefaultConfig()
	c.BlockOutChannels = []int{8, 16, 16, 16}
	c.NormNumGroups = 4
	c.LayersPerBlock = 1
	return c
}

func randLatents(seed uint64, shape ...int) *tensor.Tensor {
	return tensor.RandN(rand.New(rand.NewPCG(seed, 7)), shape...)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// TestDecodePeakModel checks the peak-memory model against the peak that a
// counting backend measures, for every decode path and two dtypes.
func TestDecodePeakModel(t *testing.T) {
	cfg := smallConfig()
	cases := []struct {
		name  string
		shape []int
		til   Tiling
		dt    tensor.DType
	}{
		{"plain", []int{1, 16, 3, 4, 6}, DefaultTiling(), tensor.F32},
		{"plain image", []int{1, 16, 1, 6, 8}, DefaultTiling(), tensor.F32},
		{"framewise", []int{1, 16, 7, 4, 4}, DefaultTiling(), tensor.F32},
		{"framewise f16", []int{1, 16, 7, 4, 4}, DefaultTiling(), tensor.F16},
		{"spatial", []int{1, 16, 2, 6, 8}, SpatialTiling(32, 24), tensor.F32},
		{"spatial bf16", []int{1, 16, 2, 6, 8}, SpatialTiling(32, 24), tensor.BF16},
		{"framewise+spatial", []int{1, 16, 6, 4, 6}, SpatialTiling(32, 16), tensor.F32},
		{"short frames", []int{1, 16, 5, 4, 4}, Tiling{Framewise: true, TileFrames: 8, TileFrameStride: 4}.normalized(), tensor.F32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := meter()
			v := randomVAE(t, cfg, m, tc.dt, 3)
			base := m.Stats().InUse
			m.ResetPeak()
			z := randLatents(1, tc.shape...)
			out := decode(t, v, z, DecodeOptions{Tiling: tc.til})
			measured := m.Stats().Peak - base
			planned := DecodePeak(cfg, tc.shape, tc.til, tc.dt)
			zBytes := int64(z.Numel()) * int64(4+tc.dt.Size())
			t.Logf("%s %v %s: planned %d B, measured %d B (%.3f)", tc.dt, tc.shape, tc.til, planned, measured, float64(measured)/float64(planned))
			if measured > planned {
				t.Errorf("the model under-estimates: planned %d, measured %d", planned, measured)
			}
			if planned-measured > zBytes {
				t.Errorf("the model over-estimates by %d B (more than the latents' %d B)", planned-measured, zBytes)
			}
			if m.Stats().InUse != base {
				t.Errorf("the decode left %d B allocated", m.Stats().InUse-base)
			}
			want := []int{1, 3, cfg.SampleFrames(tc.shape[2]), 8 * tc.shape[3], 8 * tc.shape[4]}
			if got := out.Shape(); !slices.Equal(got, want) {
				t.Errorf("output %v, want %v", got, want)
			}
		})
	}
}

// TestPlanRealSection prints the plan for one FramePack section at 544×704
// at a few budgets and checks its choices: the largest tiles that fit,
// never above the budget, smaller budgets never give larger tiles.
func TestPlanRealSection(t *testing.T) {
	cfg := DefaultConfig()
	shape := []int{1, 16, 18, 68, 88}
	full := DecodePeak(cfg, shape, DefaultTiling(), tensor.F16)
	t.Logf("frame-wise, untiled in space, f16: %.0f MiB", mib(full))
	prev := int64(math.MaxInt64)
	for _, gib := range []float64{64, 24, 16, 8, 4.2, 2, 1, 0.5, 0.25} {
		budget := int64(gib * (1 << 30))
		opts, planned := PlanDecode(cfg, shape, budget, tensor.F16)
		t.Logf("budget %6.2f GiB: %-50s planned %8.1f MiB", gib, opts.Tiling, mib(planned))
		if planned > budget {
			t.Errorf("budget %.2f GiB: planned %d above it", gib, planned)
		}
		if planned > prev {
			t.Errorf("budget %.2f GiB: planned %d above the plan for a larger budget (%d)", gib, planned, prev)
		}
		prev = planned
		// Nothing earlier in the ladder fits.
		for _, l := range tilingLadder() {
			if l == opts.Tiling {
				break
			}
			if p := DecodePeak(cfg, shape, l, tensor.F16); p <= budget {
				t.Errorf("budget %.2f GiB: %s fits (%d) but %s was chosen", gib, l, p, opts.Tiling)
			}
		}
	}
	if got := PlanDecodeDefault(t, cfg, shape, 64<<30); got != DefaultTiling() {
		t.Errorf("a roomy budget chose %s, want diffusers' default", got)
	}
	opts, planned := PlanDecode(cfg, shape, 1<<20, tensor.F16)
	if planned <= 1<<20 {
		t.Errorf("1 MiB: planned %d fits?", planned)
	}
	t.Logf("1 MiB (nothing fits): %s, planned %.1f MiB", opts.Tiling, mib(planned))
}

func PlanDecodeDefault(t *testing.T, cfg Config, shape []int, budget int64) Tiling {
	opts, _ := PlanDecode(cfg, shape, budget, tensor.F16)
	return opts.Tiling
}

// TestPlannedDecodeFits decodes under a capped backend with the planner's
// tiling: no allocation is refused and the measured peak stays in budget.
func TestPlannedDecodeFits(t *testing.T) {
	cfg := smallConfig()
	shape := []int{1, 16, 6, 6, 8}
	m := meter()
	v := randomVAE(t, cfg, m, tensor.F32, 5)
	untiled := DecodePeak(cfg, shape, DefaultTiling(), tensor.F32)
	budget := untiled * 2 / 5
	opts, planned := PlanDecode(cfg, shape, budget, tensor.F32)
	if planned > budget || !opts.Spatial {
		t.Fatalf("plan %s at %d for a budget of %d", opts.Tiling, planned, budget)
	}
	base := m.Stats().InUse
	setCap(m, base+budget)
	m.ResetPeak()
	var st DecodeStats
	opts.Stats = &st
	decode(t, v, randLatents(2, shape...), opts)
	t.Logf("budget %d B: %s, planned %d B, measured %d B, %d tiles", budget, opts.Tiling, planned, m.Stats().Peak-base, st.Tiles)
	if st.Retries != 0 || m.Stats().Refused != 0 {
		t.Errorf("%d retries, %d refused allocations", st.Retries, m.Stats().Refused)
	}
}

// TestDecodeRetriesSmallerTiles forces a tiling that does not fit the cap:
// the decode shrinks its tiles and finishes, and its result is the tiled
// decode at the final tiling.
func TestDecodeRetriesSmallerTiles(t *testing.T) {
	cfg := smallConfig()
	shape := []int{1, 16, 2, 6, 8}
	m := meter()
	v := randomVAE(t, cfg, m, tensor.F32, 9)
	z := randLatents(4, shape...)
	forced := DefaultTiling() // untiled in space
	need := DecodePeak(cfg, shape, forced, tensor.F32)
	base := m.Stats().InUse
	setCap(m, base+need/2)
	var st DecodeStats
	var logs []string
	out := decode(t, v, z, DecodeOptions{Tiling: forced, Stats: &st, Log: func(f string, a ...any) {
		logs = append(logs, f)
	}})
	t.Logf("cap %d B (forced tiling needs %d): finished at %s after %d retries, %d refused allocations", need/2, need, st.Tiling, st.Retries, m.Stats().Refused)
	if st.Retries == 0 || m.Stats().Refused == 0 || len(logs) != st.Retries {
		t.Fatalf("no retry: %+v, %d failures, %d log lines", st, m.Stats().Refused, len(logs))
	}
	if m.Stats().InUse != base {
		t.Errorf("the failed attempts left %d B allocated", m.Stats().InUse-base)
	}
	setCap(m, 0)
	want := decode(t, v, z, DecodeOptions{Tiling: st.Tiling, NoRetry: true})
	if d := numcmp.RelL2(out.Float32s(), want.Float32s()); d != 0 {
		t.Errorf("retried result differs from the decode at %s: rel_l2 %g", st.Tiling, d)
	}

	// NoRetry gives the out-of-memory error instead.
	setCap(m, base+need/2)
	s := tensor.NewScope(m)
	defer s.Close()
	err := tensor.Catch(func() { v.Decode(s, z, DecodeOptions{Tiling: forced, NoRetry: true}) })
	if err == nil {
		t.Fatal("NoRetry decode above the cap succeeded")
	}
	// A cap below even the smallest tiling fails with a clear error.
	setCap(m, base+1024)
	err = tensor.Catch(func() { v.Decode(s, z, DefaultDecode()) })
	if err == nil {
		t.Fatal("decode with 1 KiB succeeded")
	}
	t.Logf("1 KiB cap: %v", err)
}

// TestDecodePath checks diffusers' _decode dispatch, including 0.33.1's
// width threshold taken from the stride.
func TestDecodePath(t *testing.T) {
	cfg := DefaultConfig()
	til := SpatialTiling(32, 24) // latent tile 4, stride 3
	fixed := til
	fixed.FixedWidthThreshold = true
	for _, tc := range []struct {
		til     Tiling
		t, h, w int
		want    decodePath
		boxes   int
	}{
		{til, 2, 4, 4, pathSpatial, 4},  // 0.33.1: w 4 > stride 3
		{fixed, 2, 4, 4, pathPlain, 1},  // ≥ 0.34: w 4 ≤ tile 4
		{til, 2, 4, 3, pathPlain, 1},    // w 3 ≤ 3, h 4 ≤ 4
		{til, 2, 5, 3, pathSpatial, 2},  // h 5 > 4
		{til, 5, 4, 4, pathTemporal, 2}, // frame-wise: tiles [0,5) and [3,5); inside, w 4 ≤ 4: untiled
		{til, 5, 4, 5, pathTemporal, 8}, // inside: w 5 > 4: 2×2 spatial tiles per temporal tile
		{DefaultTiling(), 4, 64, 64, pathPlain, 1},
		{DefaultTiling(), 10, 8, 8, pathTemporal, 4}, // 0, 3, 6, 9 (the one-frame tail)
		{Tiling{}.normalized(), 10, 8, 8, pathPlain, 1},
	} {
		if got := tc.til.decodePath(&cfg, tc.t, tc.h, tc.w); got != tc.want {
			t.Errorf("%s on %dx%dx%d: path %d, want %d", tc.til, tc.t, tc.h, tc.w, got, tc.want)
		}
		if n := len(decodeBoxes(&cfg, tc.t, tc.h, tc.w, tc.til)); n != tc.boxes {
			t.Errorf("%s on %dx%dx%d: %d tiles, want %d", tc.til, tc.t, tc.h, tc.w, n, tc.boxes)
		}
	}
}

// meter is the CPU behind a memory budget that counts live bytes and their
// peak, with no cap until setCap sets one.
func meter() *memory.Backend {
	return memory.Budgeted(cpu.New(), memory.Budget{Device: "test", Cap: noCap})
}

const noCap = 1 << 50

// setCap caps m's live bytes at c (≤ 0: no cap).
func setCap(m *memory.Backend, c int64) {
	if c <= 0 {
		c = noCap
	}
	m.SetBudget(memory.Budget{Device: "test", Cap: c})
}

// randomVAE is RandomWeights, failing the test on an error; the VAE closes
// when the test ends.
func randomVAE(t *testing.T, cfg Config, be tensor.Backend, dt tensor.DType, seed uint64) *VAE {
	t.Helper()
	v, err := RandomWeights(cfg, be, dt, seed)
	return errtest.Closing(t, v, err)
}
