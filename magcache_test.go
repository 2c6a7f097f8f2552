package framepack

import (
	"slices"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/model/hunyuan"
)

// TestGenerateMagCache runs the tiny model with MagCache for both variants
// and with real CFG: every section skips the calls MagCache4FramePack's
// schedule skips (with real CFG the counter runs over both passes, as the
// reference's does), and the log says how many.
func TestGenerateMagCache(t *testing.T) {
	p, logs := loadTinyLogged(t, Options{})
	img := testImage(t)
	for _, c := range []struct {
		model   string
		cfg     float64
		seconds float64
		curve   []float64
	}{
		{ModelFramePack, 1, 0.2, hunyuan.MagRatiosFramePack},
		{ModelF1, 1, 0.1, hunyuan.MagRatiosF1},
		{ModelFramePack, 2, 0.1, hunyuan.MagRatiosFramePack},
	} {
		req := smallRequest(img)
		req.Seconds, req.Steps, req.Model, req.CFG, req.Cache = c.seconds, 8, c.model, c.cfg, CacheMagCache
		req.LatentWindowSize = 1 // 0.2 s: two sections, 0.1 s: one
		res := generateQuiet(t, p, req)
		calls := 8
		if c.cfg != 1 {
			calls = 16
		}
		set := hunyuan.MagCacheSettings{Ratios: hunyuan.MagRatios(c.curve, 8), Threshold: 0.1, K: 3, Retention: 0.2}
		want := hunyuan.MagCacheSkips(set, calls)
		if len(want) == 0 {
			t.Fatal("the schedule skips nothing")
		}
		for _, s := range res.Sections {
			if s.TransformerCalls != calls || !slices.Equal(s.CacheSkipped, want) {
				t.Errorf("%s, cfg %v, section %d: %d calls, skipped %v; want %d, %v", c.model, c.cfg, s.Index,
					s.TransformerCalls, s.CacheSkipped, calls, want)
			}
			if s.TeaCacheComputed != 0 || s.TeaCacheSkipped != 0 {
				t.Errorf("section %d: TeaCache counted under MagCache", s.Index)
			}
		}
	}
	if !strings.Contains(logs.String(), "(MagCache: 4 computed, 4 skipped)") {
		t.Errorf("the log does not report MagCache's skips:\n%s", logs)
	}

	// --cache none: every call runs the blocks.
	req := smallRequest(img)
	req.Seconds, req.LatentWindowSize, req.Cache = 0.1, 1, CacheNone
	for _, s := range generateQuiet(t, p, req).Sections {
		if s.TransformerCalls != req.Steps || len(s.CacheSkipped) != 0 {
			t.Errorf("no cache: section %d: %d calls, skipped %v", s.Index, s.TransformerCalls, s.CacheSkipped)
		}
	}
}
