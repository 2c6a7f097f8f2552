package framepack

import (
	"image"
	"math"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/errtest"
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
	})
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
