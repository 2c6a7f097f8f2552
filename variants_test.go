package framepack

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/framepack-go/framepack/section"
)

// TestGenerateF1 runs F1's forward sections on the tiny model: after each
// section the latents are the start latent then lws more per section, in
// time order, and the video grows at its end (its first frames, decoded
// from the first section only, stay put). The runs are the shared ones.
func TestGenerateF1(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	p := loadTiny(t)
	req := smallRequest(testImage(t))
	req.Model = ModelF1
	req.Seconds = 0.8 // 2 sections
	req.Steps = 2
	res := runShared(t, req)
	var first []byte
	var firstLatent []float32
	for k := range res.AfterLatents {
		lat, px, frames := res.AfterLatents[k], res.AfterPixels[k], res.AfterFrames[k]
		n := 1 + req.LatentWindowSize*(k+1)
		if lat.Dim(2) != n || px.Dim(2) != 4*n-3 || frames != 4*n-3 {
			t.Errorf("section %d done: latents %v, pixels %v, %d frames; want %d latent frames", k+1, lat, px, frames, n)
			continue
		}
		l0 := section.Frames(lat, 0, 1).Float32s()
		px0 := section.Frames(px, 0, 1).HostBytes()
		if k == 0 {
			firstLatent, first = slices.Clone(l0), bytes.Clone(px0)
		} else if !slices.Equal(l0, firstLatent) || !bytes.Equal(px0, first) {
			t.Errorf("section %d changed the video's first latent or frame", k+1)
		}
	}
	if len(res.Sections) != 2 || len(res.AfterLatents) != 2 || res.T != 25 || res.Latents.Dim(2) != 7 {
		t.Fatalf("%d sections (%d reported), %d frames, latents %v", len(res.Sections), len(res.AfterLatents), res.T, res.Latents.Shape())
	}
	j := p.newJob(context.Background(), req)
	crop, err := section.ResizeAndCenterCrop(req.RGB, res.Width, res.Height)
	if err != nil {
		t.Fatal(err)
	}
	start, err := j.encodeImage(crop)
	if err == nil {
		err = p.Unload()
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(start[0].Float32s(), firstLatent) {
		t.Error("the first latent is not the start latent")
	}
	req.Model = ModelFramePack
	if back := runShared(t, req); bytes.Equal(back.Pix, res.Pix) {
		t.Error("F1 and FramePack gave the same frames")
	}
}

// TestGenerateEndImage checks that the end image conditions the run and
// that each embedding interpolation is its own video; F1 refuses it.
func TestGenerateEndImage(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	p := loadTiny(t)
	img := testImage(t)
	end := &section.RGB{W: img.W, H: img.H, Pix: slices.Clone(img.Pix)}
	slices.Reverse(end.Pix) // turned 180° (and BGR)
	req := smallRequest(img)
	// Two sections: the end image conditions the first generated, and the
	// linear interpolation moves from one embedding to the other over
	// them (TestGoldenGenerateEndImage checks three against the reference).
	req.Seconds, req.Steps = 0.8, 2
	plain := runShared(t, req)
	req.EndRGB = end
	var videos [][]byte
	for _, mode := range []string{EmbedDisabled, EmbedLinear, EmbedWeighted} {
		req.EmbedInterpolation, req.StartEmbedStrength = mode, 0.5
		res, err := p.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.T != plain.T || bytes.Equal(res.Pix, plain.Pix) {
			t.Errorf("%s: %d frames (want %d), same as without the end image: %v", mode, res.T, plain.T, bytes.Equal(res.Pix, plain.Pix))
		}
		for _, v := range videos {
			if bytes.Equal(v, res.Pix) {
				t.Errorf("%s gave the frames of another interpolation", mode)
			}
		}
		videos = append(videos, res.Pix)
	}
	req.Model = ModelF1
	if _, err := p.Generate(context.Background(), req); err == nil {
		t.Error("F1 with an end image: no error")
	}
}
