package framepack

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/pipeline"
)

// FPS is the frame rate FramePack generates and writes at.
const FPS = 30

// Sections is FramePack's section count for a video of seconds at latent
// window lws: int(max(round(seconds·30 / (lws·4)), 1)), Python's round
// (half to even).
func Sections(seconds float64, lws int) int {
	return int(math.Max(math.RoundToEven(seconds*FPS/float64(lws*4)), 1))
}

// FrameCount is the length in frames of a video of sections sections at
// latent window lws: every section adds lws latent frames and the last one
// the start latent too, and n latents decode to 4n − 3 frames.
func FrameCount(sections, lws int) int { return 4*(lws*sections+1) - 3 }

// LatentPaddings is FramePack's inverted ("anti-drifting") padding
// schedule: [S−1, …, 1, 0], or [3, 2, …, 2, 1, 0] when S > 4.
func LatentPaddings(sections int) []int {
	out := make([]int, 0, sections)
	if sections > 4 {
		out = append(out, 3)
		for i := 0; i < sections-3; i++ {
			out = append(out, 2)
		}
		return append(out, 1, 0)
	}
	for p := sections - 1; p >= 0; p-- {
		out = append(out, p)
	}
	return out
}

// SectionIndices are the frame indices of one section's transformer call:
// arange(1 + pad + lws + 1 + 2 + 16) split into [pre | blank | window |
// post | 2x | 4x], with the clean indices [pre, post].
type SectionIndices struct {
	Latent, Clean, Clean2x, Clean4x []int64
}

// IndicesFor lays out the indices for padding p (pad = p·lws).
func IndicesFor(p, lws int) SectionIndices {
	pad := p * lws
	ar := func(start, n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(start + i)
		}
		return out
	}
	post := 1 + pad + lws
	return SectionIndices{
		Latent:  ar(1+pad, lws),
		Clean:   []int64{0, int64(post)},
		Clean2x: ar(post+1, 2),
		Clean4x: ar(post+3, 16),
	}
}

// Buckets returns the (height, width) buckets of a resolution. 640 is
// FramePack's own list (bucket_tools.py has no other); any other
// resolution scales that list by resolution/640 and rounds each side to a
// multiple of 32 (at least 32), which keeps the property of the original
// buckets that both latent sides are multiples of 4.
func Buckets(resolution int) ([][2]int, error) {
	if resolution < MinResolution || resolution > MaxResolution {
		return nil, fmt.Errorf("resolution %d is outside %d–%d", resolution, MinResolution, MaxResolution)
	}
	if resolution == 640 {
		return pipeline.Buckets640, nil
	}
	out := make([][2]int, len(pipeline.Buckets640))
	for i, b := range pipeline.Buckets640 {
		for j := range b {
			v := int(math.Round(float64(b[j]*resolution)/640/32)) * 32
			out[i][j] = max(v, 32)
		}
	}
	return out, nil
}

// Resolution limits: FramePack's 640 and smaller sizes for quick runs; above
// 1280 the transformer's sequence grows past what the model was trained on.
const (
	MinResolution = 64
	MaxResolution = 1280
)

// NearestBucket is FramePack's find_nearest_bucket over Buckets(resolution):
// the bucket minimising |h·bw − w·bh|, the later one on a tie.
func NearestBucket(h, w, resolution int) (bh, bw int, err error) {
	if resolution == 640 {
		bh, bw = pipeline.NearestBucket(h, w)
		return bh, bw, nil
	}
	list, err := Buckets(resolution)
	if err != nil {
		return 0, 0, err
	}
	best := int64(math.MaxInt64)
	for _, b := range list {
		m := int64(h)*int64(b[1]) - int64(w)*int64(b[0])
		if m < 0 {
			m = -m
		}
		if m <= best {
			best, bh, bw = m, b[0], b[1]
		}
	}
	return bh, bw, nil
}
