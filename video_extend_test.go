package framepack

import (
	"bytes"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/section"
)

// testVideo is n (at most 40) frames of 225×75 panning across testImage:
// a 96×32 bucket at resolution 64.
func testVideo(t *testing.T, n int) []*section.RGB {
	img := testImage(t)
	out := make([]*section.RGB, n)
	for i := range out {
		out[i] = img.Crop(i/2, i/8, i/2+225, i/8+75)
	}
	return out
}

// TestGenerateVideo extends a 20-frame video on the tiny model with both
// variants: the result is the cropped input followed by the new part (or
// the new part alone), the latents are the new ones, and the first frames
// are the input's own. The runs are the shared ones, which
// TestResumeFromCheckpoint resumes.
func TestGenerateVideo(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	frames := testVideo(t, 20)
	for _, c := range []struct {
		model   string
		newOnly bool
	}{{ModelFramePack, false}, {ModelF1, true}} {
		req := smallRequest(nil)
		req.RGB, req.Video, req.Model, req.VideoNewOnly = nil, frames, c.model, c.newOnly
		// 2 sections of 3 latent frames: 21 new frames; 2 context frames
		// take 20 frames (5 latent frames) for either model.
		req.Seconds, req.Steps, req.VideoContextFrames = 0.8, 2, 2
		res := runShared(t, req)
		want, input := 21, 0
		if !c.newOnly {
			want, input = 41, 20
		}
		if res.T != want || res.InputFrames != input || res.W != 96 || res.H != 32 {
			t.Errorf("%s, new only %v: %d frames (%d input) of %d×%d; want %d (%d) of 96×32", c.model, c.newOnly,
				res.T, res.InputFrames, res.W, res.H, want, input)
		}
		if s := res.Latents.Shape(); len(s) != 5 || s[2] != 6 || s[3] != 4 || s[4] != 12 {
			t.Errorf("%s: latents %v, want (1, 16, 6, 4, 12)", c.model, s)
		}
		if !c.newOnly {
			crop, _ := section.ResizeAndCenterCrop(frames[0], 96, 32)
			if !bytes.Equal(res.Pix[:len(crop.Pix)], crop.Pix) {
				t.Errorf("%s: the first frame is not the input's, cropped", c.model)
			}
		}
		if len(res.Sections) != 2 {
			t.Errorf("%s: %d sections", c.model, len(res.Sections))
		}
		if !strings.Contains(res.Log, "after 5 latent frames of video") {
			t.Errorf("%s: the log does not describe the video:\n%s", c.model, res.Log)
		}
	}
}

func TestVideoRequestValidate(t *testing.T) {
	frames := testVideo(t, 40)
	ok := DefaultRequest()
	ok.Video, ok.LatentWindowSize, ok.Resolution = frames, 3, 64
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	odd := append(append([]*section.RGB(nil), frames[:39]...), section.NewRGB(64, 48))
	for _, c := range []struct {
		name string
		edit func(r *Request)
		want string
	}{
		{"too short", func(r *Request) { r.Video = frames[:27] }, "too short: 27 frames"},
		{"too short for F1", func(r *Request) { r.Video, r.Model = frames[:31], ModelF1 }, "needs at least 32"},
		{"sizes", func(r *Request) { r.Video = odd }, "frame 39 is 64×48"},
		{"both", func(r *Request) { r.RGB = frames[0] }, "not both"},
		{"context frames", func(r *Request) { r.VideoContextFrames = 1 }, "context frames must be in 2–10"},
		{"F1 end image", func(r *Request) { r.Model, r.EndRGB = ModelF1, frames[0] }, "end image needs"},
		{"embedding", func(r *Request) { r.EndRGB, r.EmbedInterpolation = frames[0], EmbedLinear }, "not a video"},
	} {
		r := ok
		c.edit(&r)
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if MinVideoFrames(5, 3, false) != 28 || MinVideoFrames(5, 9, true) != 36 || MinVideoFrames(10, 9, false) != 48 {
		t.Errorf("MinVideoFrames: %d, %d, %d", MinVideoFrames(5, 3, false), MinVideoFrames(5, 9, true), MinVideoFrames(10, 9, false))
	}
}
