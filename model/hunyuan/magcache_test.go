package hunyuan

import (
	"slices"
	"testing"

	"github.com/framepack-go/framepack/internal/numcmp"
	"github.com/framepack-go/framepack/internal/testutil/golden"
)

// TestMagRatios checks the nearest interpolation of the 25-point curve:
// call i takes point round(i·24/(steps−1)), halves to even as NumPy's
// round; a single step takes the last point.
func TestMagRatios(t *testing.T) {
	c := MagRatiosFramePack
	if len(c) != 25 || len(MagRatiosF1) != 25 {
		t.Fatalf("curves of %d and %d points, want 25", len(c), len(MagRatiosF1))
	}
	pick := func(idx ...int) []float64 {
		out := make([]float64, len(idx))
		for i, k := range idx {
			out[i] = c[k]
		}
		return out
	}
	for _, tc := range []struct {
		steps int
		want  []float64
	}{
		{25, c},
		{1, pick(24)},
		{2, pick(0, 24)},
		// 24/7 = 3.43: 0, 3.43, 6.86, 10.29, 13.71, 17.14, 20.57, 24.
		{8, pick(0, 3, 7, 10, 14, 17, 21, 24)},
		// 24/16 = 1.5: the halves 1.5, 4.5, 7.5 … go to the even neighbour.
		{17, pick(0, 2, 3, 4, 6, 8, 9, 10, 12, 14, 15, 16, 18, 20, 21, 22, 24)},
	} {
		if got := MagRatios(c, tc.steps); !slices.Equal(got, tc.want) {
			t.Errorf("%d steps: %v, want %v", tc.steps, got, tc.want)
		}
	}
	if got := MagRatios(c, 50); len(got) != 50 || got[0] != c[0] || got[49] != c[24] {
		t.Errorf("50 steps: %v", got)
	}
}

// TestMagCacheSchedule walks the decision by hand for MagCache4FramePack's
// defaults over 8 steps (ratios 1.0, 1.03125, 1.03906, 1.03906, 1.01562,
// 1.04688, 0.98828, 0.78906; int(0.2·8) = 1 call always computes):
// call 1 skips (error 0.031), call 2 computes (0.031 + 0.072 > 0.1), call 3
// skips (0.039), call 4 skips (0.039 + 0.055), call 5 computes (error
// 0.199), call 6 skips (0.012), call 7 computes (|1 − 0.789| > 0.06).
func TestMagCacheSchedule(t *testing.T) {
	set := MagCacheSettings{Ratios: MagRatios(MagRatiosFramePack, 8), Threshold: MagCacheThreshold, K: MagCacheK, Retention: MagCacheRetention}
	if got, want := MagCacheSkips(set, 8), []int{1, 3, 4, 6}; !slices.Equal(got, want) {
		t.Errorf("skips %v, want %v", got, want)
	}
	// The cycle starts again after 8 calls (real CFG's second pass runs
	// through it as the reference's counter does).
	if got, want := MagCacheSkips(set, 16), []int{1, 3, 4, 6, 9, 11, 12, 14}; !slices.Equal(got, want) {
		t.Errorf("two cycles: skips %v, want %v", got, want)
	}
	// K = 1: never two skips in a row; call 4 computes, call 5 skips.
	set.K = 1
	if got, want := MagCacheSkips(set, 8), []int{1, 3, 5}; !slices.Equal(got, want) {
		t.Errorf("K 1: skips %v, want %v", got, want)
	}
	// Retention 0.5: the first 4 calls compute; 4 and 5 skip (error
	// 0.016, then 0.079), 6 computes (0.130).
	set.K, set.Retention = MagCacheK, 0.5
	if got, want := MagCacheSkips(set, 8), []int{4, 5}; !slices.Equal(got, want) {
		t.Errorf("retention 0.5: skips %v, want %v", got, want)
	}
}

// TestGoldenMagCache runs a golden case's inputs through a 8-call MagCache
// cycle: computed calls match the case, and a skipped call adds the last
// computed residual to its own input — with the same input, the last
// computed output.
func TestGoldenMagCache(t *testing.T) {
	c := golden.Cases(t, "transformer")[2]
	m := loadModel(t, c.ModelDir, Options{})
	in := caseInputs(c)
	set := MagCacheSettings{Ratios: MagRatios(MagRatiosFramePack, 8), Threshold: MagCacheThreshold, K: MagCacheK, Retention: MagCacheRetention}
	if err := m.InitMagCache(&set); err != nil {
		t.Fatal(err)
	}
	first := forward(t, m, in)
	c.Compare(t, "output", first)
	if r := numcmp.RelL2(forward(t, m, in).Float32s(), first.Float32s()); r > 1e-6 {
		t.Errorf("skipped call 1: rel_l2 %.3g from the computed call 0", r)
	}
	c.Compare(t, "output", forward(t, m, in)) // call 2 computes
	// Call 3 skips with a changed input: not the computed output.
	in2 := *in
	in2.HiddenStates = scaled(in.HiddenStates, 1.01)
	if r := numcmp.RelL2(forward(t, m, &in2).Float32s(), first.Float32s()); r < 1e-4 {
		t.Errorf("skipped call 3 on another input: rel_l2 %.3g, the input was not used", r)
	}
	calls, skips := m.CacheCalls()
	if calls != 4 || !slices.Equal(skips, []int{1, 3}) {
		t.Errorf("%d calls, skipped %v; want 4, [1 3]", calls, skips)
	}
	if comp, skip := m.TeaCacheStats(); comp != 0 || skip != 0 {
		t.Errorf("TeaCache counted %d/%d under MagCache", comp, skip)
	}

	// Bad settings are refused; nil turns it off.
	for _, bad := range []MagCacheSettings{{Threshold: 0.1, K: 1}, {Ratios: set.Ratios, K: 1},
		{Ratios: set.Ratios, Threshold: 0.1}, {Ratios: set.Ratios, Threshold: 0.1, K: 1, Retention: 1.5}} {
		if err := m.InitMagCache(&bad); err == nil {
			t.Errorf("InitMagCache(%+v) accepted", bad)
		}
	}
	if err := m.InitMagCache(nil); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		forward(t, m, in)
	}
	if calls, skips := m.CacheCalls(); calls != 3 || len(skips) != 0 {
		t.Errorf("off: %d calls, skipped %v; want 3, none", calls, skips)
	}
}
