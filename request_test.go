package framepack

import (
	"image"
	"math"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/section"
)

func TestRequestValidate(t *testing.T) {
	img := section.NewRGB(64, 48)
	ok := DefaultRequest()
	ok.RGB = img
	errtest.Rejects(t, ok, (*Request).Validate, []errtest.Edit[Request]{
		{Name: "no image", Edit: func(r *Request) { r.RGB = nil }, Want: "no start image"},
		{Name: "two images", Edit: func(r *Request) { r.Image = image.NewRGBA(image.Rect(0, 0, 4, 4)) }, Want: "not both"},
		{Name: "empty image", Edit: func(r *Request) { r.RGB = nil; r.Image = image.NewRGBA(image.Rect(0, 0, 0, 4)) }, Want: "no pixels"},
		{Name: "short RGB", Edit: func(r *Request) { r.RGB = &section.RGB{W: 4, H: 4, Pix: make([]uint8, 3)} }, Want: "RGB image"},
		{Name: "thin image", Edit: func(r *Request) { r.RGB = section.NewRGB(4000, 1) }, Want: "aspect ratio"},
		{Name: "zero seconds", Edit: func(r *Request) { r.Seconds = 0 }, Want: "seconds"},
		{Name: "long", Edit: func(r *Request) { r.Seconds = 120.5 }, Want: "seconds"},
		{Name: "NaN seconds", Edit: func(r *Request) { r.Seconds = math.NaN() }, Want: "seconds"},
		{Name: "no steps", Edit: func(r *Request) { r.Steps = 0 }, Want: "steps"},
		{Name: "many steps", Edit: func(r *Request) { r.Steps = 101 }, Want: "steps"},
		{Name: "no window", Edit: func(r *Request) { r.LatentWindowSize = 0 }, Want: "window"},
		{Name: "wide window", Edit: func(r *Request) { r.LatentWindowSize = 34 }, Want: "window"},
		{Name: "cfg", Edit: func(r *Request) { r.CFG = 0.5 }, Want: "CFG"},
		{Name: "gs", Edit: func(r *Request) { r.GS = 0 }, Want: "gs"},
		{Name: "rs", Edit: func(r *Request) { r.RS = 1.5 }, Want: "rs"},
		{Name: "resolution", Edit: func(r *Request) { r.Resolution = 10 }, Want: "resolution"},
		{Name: "cache", Edit: func(r *Request) { r.Cache = "fastcache" }, Want: "cache must be"},
		{Name: "cache threshold", Edit: func(r *Request) { r.CacheThreshold = 1.5 }, Want: "cache threshold"},
		{Name: "negative threshold", Edit: func(r *Request) { r.CacheThreshold = -0.1 }, Want: "cache threshold"},
		{Name: "NaN threshold", Edit: func(r *Request) { r.CacheThreshold = math.NaN() }, Want: "cache threshold"},
		{Name: "K", Edit: func(r *Request) { r.MagCacheK = 6 }, Want: "MagCache K"},
		{Name: "no K", Edit: func(r *Request) { r.Cache, r.MagCacheK = CacheMagCache, 0 }, Want: "MagCache K"},
		{Name: "retention", Edit: func(r *Request) { r.MagCacheRetention = 1.01 }, Want: "retention"},
	})
	// A Request not made by DefaultRequest: its zero knobs do for the
	// other caches.
	bare := Request{RGB: img, Seconds: 1, LatentWindowSize: 9, Steps: 25, CFG: 1, GS: 10, Resolution: 640, Cache: CacheNone}
	if err := bare.Validate(); err != nil {
		t.Errorf("a bare request without MagCache: %v", err)
	}
}

func TestCacheChoice(t *testing.T) {
	for _, c := range []struct {
		cache    string
		teacache bool
		want     string
	}{
		{"", true, CacheTeaCache}, {"", false, CacheNone}, {CacheMagCache, true, CacheMagCache},
		{CacheNone, true, CacheNone}, {CacheTeaCache, false, CacheTeaCache},
	} {
		r := Request{Cache: c.cache, TeaCache: c.teacache}
		if got := r.CacheChoice(); got != c.want {
			t.Errorf("Cache %q, TeaCache %v: %q, want %q", c.cache, c.teacache, got, c.want)
		}
	}
	r := DefaultRequest()
	if r.CacheChoice() != CacheTeaCache || r.magCache() != nil {
		t.Errorf("the default request runs %q", r.CacheChoice())
	}
	r.Cache, r.Steps = CacheMagCache, 8
	set := r.magCache()
	if set.Threshold != 0.1 || set.K != 3 || set.Retention != 0.2 || len(set.Ratios) != 8 || set.Ratios[1] != hunyuan.MagRatiosFramePack[3] {
		t.Errorf("MagCache defaults %+v", set)
	}
	r.Model, r.CacheThreshold = ModelF1, 0.25
	if set := r.magCache(); set.Threshold != 0.25 || set.Ratios[1] != hunyuan.MagRatiosF1[3] {
		t.Errorf("F1's MagCache %+v", set)
	}
	if r.teaCacheThreshold(0.2) != 0.25 {
		t.Error("CacheThreshold does not set TeaCache's threshold")
	}
	r.CacheThreshold = 0
	if r.teaCacheThreshold(0.2) != 0.2 {
		t.Error("without CacheThreshold, TeaCache's threshold is not the pipeline's")
	}
}

// TestRequestValidateSize: the checks of Validate for images known only by
// their size.
func TestRequestValidateSize(t *testing.T) {
	r := DefaultRequest()
	if err := r.ValidateSize(64, 48, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		w, h   int
		hasEnd bool
		edit   func(*Request)
		want   string
	}{
		{0, 48, false, nil, "no pixels"},
		{4000, 1, false, nil, "aspect ratio"},
		{64, 48, false, func(r *Request) { r.Steps = 0 }, "steps"},
		{64, 48, true, func(r *Request) { r.Model = ModelF1 }, "an end image needs"},
		{64, 48, false, func(r *Request) { r.Prompt = "[9s: late]"; r.Seconds = 2 }, "every part starts at or after the end"},
	} {
		r := DefaultRequest()
		if c.edit != nil {
			c.edit(&r)
		}
		errtest.Mentions(t, r.ValidateSize(c.w, c.h, c.hasEnd), c.want)
	}
}
