package section

import (
	"slices"
	"testing"

	"github.com/framepack-go/framepack/tensor"
)

// framesOf is n latent frames (1, 16, n, 1, 2) whose every value is the
// frame's id.
func framesOf(ids ...float32) *tensor.Tensor {
	n := len(ids)
	t := tensor.New(tensor.F32, 1, 16, n, 1, 2)
	v := t.Float32s()
	for c := 0; c < 16; c++ {
		for i, id := range ids {
			v[(c*n+i)*2], v[(c*n+i)*2+1] = id, id
		}
	}
	return t
}

// ids reads back the frame ids of a framesOf-made tensor.
func ids(t *tensor.Tensor) []float32 {
	out := make([]float32, t.Dim(2))
	for i := range out {
		out[i] = t.Float32s()[i*2]
	}
	return out
}

func span(a, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = a + int64(i)
	}
	return out
}

// TestVideoContextBackward follows Studio's Video layout by hand: 8 latent
// frames of video (ids 1–8), 5 context frames, window 3, 3 sections
// (paddings 2, 1, 0); generated frames have ids 10+ (section 0), 20+ (1).
func TestVideoContextBackward(t *testing.T) {
	plan, err := NewPlan(1.2, 3)
	if err != nil || !slices.Equal(plan.Paddings, []int{2, 1, 0}) {
		t.Fatalf("plan %v, %v", plan.Paddings, err)
	}
	plan.Video = true
	hs, err := NewVideoHistory(framesOf(1, 2, 3, 4, 5, 6, 7, 8), false, 5)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		clean, clean2x, clean4x        []float32
		cleanIdx, latIdx, idx2x, idx4x []int64
	}
	cat := func(xs ...[]int64) []int64 { return slices.Concat(xs...) }
	for i, w := range []want{
		// pre: the video's last 4; post: 4 zero frames; 4x, 2x: the video
		// before pre. [pre 0–3 | blank 4–9 | window 10–12 | post 13–16 | 2x | 4x].
		{[]float32{5, 6, 7, 8, 0, 0, 0, 0}, []float32{3, 4}, []float32{1, 2},
			cat(span(0, 4), span(13, 4)), span(10, 3), span(17, 2), span(19, 2)},
		// History [10 11 12 | 1…8]: post its first 4, 4x and 2x its 7 frames
		// before pre.
		{[]float32{5, 6, 7, 8, 10, 11, 12, 1}, []float32{3, 4}, []float32{10, 11, 12, 1, 2},
			cat(span(0, 4), span(10, 4)), span(7, 3), span(14, 2), span(16, 5)},
		// The last: one pre (the video's last) and one post frame; the
		// context from the video alone.
		{[]float32{8, 20}, []float32{6, 7}, []float32{1, 2, 3, 4, 5},
			cat(span(0, 1), span(4, 1)), span(1, 3), span(5, 2), span(7, 5)},
	} {
		sec, clean, c2, c4, err := hs.VideoContext(plan, i, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(clean), w.clean) || !slices.Equal(ids(c2), w.clean2x) || !slices.Equal(ids(c4), w.clean4x) {
			t.Errorf("section %d: clean %v, 2x %v, 4x %v; want %v, %v, %v", i, ids(clean), ids(c2), ids(c4), w.clean, w.clean2x, w.clean4x)
		}
		if !slices.Equal(sec.CleanIndices, w.cleanIdx) || !slices.Equal(sec.LatentIndices, w.latIdx) ||
			!slices.Equal(sec.Clean2xIndices, w.idx2x) || !slices.Equal(sec.Clean4xIndices, w.idx4x) {
			t.Errorf("section %d: indices %v %v %v %v; want %v %v %v %v", i, sec.CleanIndices, sec.LatentIndices,
				sec.Clean2xIndices, sec.Clean4xIndices, w.cleanIdx, w.latIdx, w.idx2x, w.idx4x)
		}
		if sec.Last != (i == 2) || sec.Padding != plan.Paddings[i] {
			t.Errorf("section %d: last %v, padding %d", i, sec.Last, sec.Padding)
		}
		gen := framesOf(float32(10*(i+1)), float32(10*(i+1)+1), float32(10*(i+1)+2))
		if err := hs.Add(gen, nil, sec.Last); err != nil {
			t.Fatal(err)
		}
	}
	// No start latent on the last: only generated frames, newest first.
	if hs.Generated != 9 || !slices.Equal(ids(hs.Newest(0)), []float32{30, 31, 32, 20, 21, 22, 10, 11, 12}) {
		t.Errorf("history %d generated: %v", hs.Generated, ids(hs.Newest(0)))
	}
	if n, overlap := plan.DecodeLatents(2); n != 6 || overlap != 9 {
		t.Errorf("the last section decodes %d latents (overlap %d), want 6 (9): no start latent", n, overlap)
	}

	// An end latent is the first section's one post frame.
	hs, _ = NewVideoHistory(framesOf(1, 2, 3, 4, 5, 6, 7, 8), false, 5)
	sec, clean, _, _, err := hs.VideoContext(plan, 0, framesOf(99))
	if err != nil || !slices.Equal(ids(clean), []float32{5, 6, 7, 8, 99}) || !slices.Equal(sec.CleanIndices, cat(span(0, 4), span(13, 1))) {
		t.Errorf("with an end latent: clean %v, indices %v, %v", ids(clean), sec.CleanIndices, err)
	}
}

// TestVideoContextForward follows Studio's Video F1 layout by hand:
// [start | 4x | 2x | 1x | window] from the end of the history.
func TestVideoContextForward(t *testing.T) {
	plan, _ := NewForwardPlan(0.8, 3)
	plan.Video = true
	hs, err := NewVideoHistory(framesOf(1, 2, 3, 4, 5, 6, 7, 8), true, 5)
	if err != nil {
		t.Fatal(err)
	}
	sec, clean, c2, c4, err := hs.VideoContext(plan, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(clean), []float32{8, 5, 6, 7, 8}) || !slices.Equal(ids(c2), []float32{3, 4}) || !slices.Equal(ids(c4), []float32{1, 2}) {
		t.Errorf("section 0: clean %v, 2x %v, 4x %v", ids(clean), ids(c2), ids(c4))
	}
	if !slices.Equal(sec.CleanIndices, []int64{0, 5, 6, 7, 8}) || !slices.Equal(sec.Clean4xIndices, span(1, 2)) ||
		!slices.Equal(sec.Clean2xIndices, span(3, 2)) || !slices.Equal(sec.LatentIndices, span(9, 3)) {
		t.Errorf("section 0 indices %v %v %v %v", sec.CleanIndices, sec.Clean4xIndices, sec.Clean2xIndices, sec.LatentIndices)
	}
	if err := hs.Add(framesOf(10, 11, 12), nil, false); err != nil {
		t.Fatal(err)
	}
	sec, clean, c2, c4, _ = hs.VideoContext(plan, 1, nil)
	if !slices.Equal(ids(clean), []float32{8, 8, 10, 11, 12}) || !slices.Equal(ids(c2), []float32{6, 7}) || !slices.Equal(ids(c4), []float32{1, 2, 3, 4, 5}) {
		t.Errorf("section 1: clean %v, 2x %v, 4x %v", ids(clean), ids(c2), ids(c4))
	}
	if !slices.Equal(sec.LatentIndices, span(12, 3)) || !sec.Last {
		t.Errorf("section 1: window %v, last %v", sec.LatentIndices, sec.Last)
	}
	if hs.Generated != 3 || !slices.Equal(ids(hs.Newest(0)), []float32{10, 11, 12}) {
		t.Errorf("generated %d: %v", hs.Generated, ids(hs.Newest(0)))
	}

	// Too short a video for the layout: an error, not a degenerate one.
	hs, _ = NewVideoHistory(framesOf(1, 2, 3, 4, 5, 6, 7), true, 5)
	if _, _, _, _, err := hs.VideoContext(plan, 0, nil); err == nil {
		t.Error("7 latent frames with 5 context frames accepted for F1")
	}
}

func TestVideoEncodeRange(t *testing.T) {
	for _, c := range []struct{ n, start, count, latents int }{
		{3, 3, 0, 0}, {4, 0, 4, 1}, {30, 2, 28, 7}, {108, 0, 108, 27}, {500, 392, 108, 27}, {17, 1, 16, 4}, {20, 0, 20, 5},
	} {
		s, n := VideoEncodeRange(c.n)
		if s != c.start || n != c.count || VideoLatentFrames(n) != c.latents {
			t.Errorf("%d frames: from %d, %d encoded (%d latents); want %d, %d (%d)", c.n, s, n, VideoLatentFrames(n), c.start, c.count, c.latents)
		}
	}
}
