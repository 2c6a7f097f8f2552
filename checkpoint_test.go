package framepack

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testmode"
)

// A job resumed from the checkpoint after each of its sections — marshalled
// and read back, as a server stores it — makes the video and latents of
// the run that never stopped, bit for bit, with either model, from an
// image or extending a video (the input before the new frames, or not).
// The FramePack job has three sections, so that a resume runs a middle
// section and then the last; the others go through the same loop with
// their own history and resume two-section jobs in the default suite, three
// in the full one (testmode). The uninterrupted runs are the shared ones
// (runShared), which TestGenerateF1 and TestGenerateVideo check too.
func TestResumeFromCheckpoint(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	p := loadTiny(t)
	img := testImage(t)
	frames := testVideo(t, 20)
	for _, c := range []struct {
		name, model    string
		video, newOnly bool
	}{
		{ModelFramePack, ModelFramePack, false, false},
		{ModelF1, ModelF1, false, false},
		{"video", ModelFramePack, true, false},
		{"video-f1-new-only", ModelF1, true, true},
	} {
		model := c.model
		t.Run(c.name, func(t *testing.T) {
			req := smallRequest(img)
			req.Model = model
			req.Seconds, req.Steps = 1.2, 2 // 3 sections
			sections := 3
			if c.name != ModelFramePack && !testmode.Full() {
				req.Seconds, sections = 0.8, 2
			}
			if c.video {
				req.RGB, req.Video, req.VideoContextFrames, req.VideoNewOnly = nil, frames, 2, c.newOnly
			}
			whole := runShared(t, req)
			ckpts := whole.Checkpoints
			if len(ckpts) != sections {
				t.Fatalf("%d checkpoints for %d sections", len(ckpts), sections)
			}
			for k, b := range ckpts {
				c, err := UnmarshalCheckpoint(b)
				if err != nil {
					t.Fatal(err)
				}
				if c.Section != k+1 || c.Sections != sections {
					t.Fatalf("checkpoint %d is after section %d of %d", k, c.Section, c.Sections)
				}
				r := req
				r.Progress, r.Resume = nil, c
				res, err := p.Generate(context.Background(), r)
				if err != nil {
					t.Fatalf("resuming after section %d: %v", k+1, err)
				}
				if len(res.Sections) != sections-(k+1) {
					t.Errorf("resumed after section %d: %d sections ran, want %d", k+1, len(res.Sections), sections-(k+1))
				}
				if !bytes.Equal(res.Pix, whole.Pix) || res.T != whole.T {
					t.Errorf("resumed after section %d of %d: the video differs from the uninterrupted run's", k+1, sections)
				}
				if !bytes.Equal(res.Latents.HostBytes(), whole.Latents.HostBytes()) {
					t.Errorf("resumed after section %d of %d: the latents differ", k+1, sections)
				}
			}
			// A checkpoint of another request is refused: another seed, an
			// image's for a video or a video's for an image.
			ck, _ := UnmarshalCheckpoint(ckpts[0])
			r := req
			r.Progress, r.Resume, r.Seed = nil, ck, req.Seed+1
			if _, err := p.Generate(context.Background(), r); err == nil {
				t.Error("a checkpoint of another seed was accepted")
			}
			r = req
			r.Progress, r.Resume = nil, ck
			if c.video {
				r.RGB, r.Video = img, nil
			} else {
				r.RGB, r.Video, r.VideoContextFrames = nil, frames, 2
			}
			if _, err := p.Generate(context.Background(), r); err == nil || !strings.Contains(err.Error(), "the checkpoint extends") {
				t.Errorf("the checkpoint of an image for a video, or the other way: %v", err)
			}
		})
	}
	if _, err := UnmarshalCheckpoint([]byte("framepack checkpoint 1\n\x05\x00\x00\x00{}")); err == nil {
		t.Error("a truncated checkpoint was accepted")
	}
}
