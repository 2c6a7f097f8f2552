package framepack

import (
	"image"
	"math"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/section"
)

func TestRequestValidate(t *testing.T) {
	img := section.NewRGB(64, 48)
	ok := DefaultRequest()
	ok.RGB = img
	if err := ok.Validate(); err != nil {
		t.Fatalf("the default request: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(r *Request)
		want string
	}{
		{"no image", func(r *Request) { r.RGB = nil }, "no start image"},
		{"two images", func(r *Request) { r.Image = image.NewRGBA(image.Rect(0, 0, 4, 4)) }, "not both"},
		{"empty image", func(r *Request) { r.RGB = nil; r.Image = image.NewRGBA(image.Rect(0, 0, 0, 4)) }, "no pixels"},
		{"short RGB", func(r *Request) { r.RGB = &section.RGB{W: 4, H: 4, Pix: make([]uint8, 3)} }, "RGB image"},
		{"thin image", func(r *Request) { r.RGB = section.NewRGB(4000, 1) }, "aspect ratio"},
		{"zero seconds", func(r *Request) { r.Seconds = 0 }, "seconds"},
		{"long", func(r *Request) { r.Seconds = 120.5 }, "seconds"},
		{"NaN seconds", func(r *Request) { r.Seconds = math.NaN() }, "seconds"},
		{"no steps", func(r *Request) { r.Steps = 0 }, "steps"},
		{"many steps", func(r *Request) { r.Steps = 101 }, "steps"},
		{"no window", func(r *Request) { r.LatentWindowSize = 0 }, "window"},
		{"wide window", func(r *Request) { r.LatentWindowSize = 34 }, "window"},
		{"cfg", func(r *Request) { r.CFG = 0.5 }, "CFG"},
		{"gs", func(r *Request) { r.GS = 0 }, "gs"},
		{"rs", func(r *Request) { r.RS = 1.5 }, "rs"},
		{"resolution", func(r *Request) { r.Resolution = 10 }, "resolution"},
	} {
		r := ok
		c.edit(&r)
		err := r.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
	}
}
