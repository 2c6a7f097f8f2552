package section

import (
	"fmt"
	"math"

	"github.com/framepack-go/framepack/tensor"
)

// FPS is FramePack's frame rate.
const FPS = 30

// HistoryContext is the number of history latents a section conditions on:
// 1 (the 1x post frame) + 2 (2x) + 16 (4x).
const HistoryContext = 1 + 2 + 16

// Plan is FramePack's section arithmetic for one video: how many sections,
// and the padding of each, in generation order. Sections are generated
// backwards in time ("anti-drifting"): the first one generated ends the
// video, the last one starts it, right after the input image.
type Plan struct {
	Sections   int
	WindowSize int   // latent frames generated per section (latent_window_size)
	Paddings   []int // latent_paddings, one per section (all 0 when Forward)
	// Forward is FramePack-F1's order (demo_gradio_f1.py): sections in time
	// order, each conditioned on the end of the history and appended to it.
	Forward bool
	// Video is a video extension's plan (FramePack Studio's Video and
	// Video F1 generators): no start latent, so the last backward section
	// decodes no extra frame.
	Video bool
}

// NewForwardPlan is FramePack-F1's plan: the same number of sections as
// NewPlan, generated forward in time, no paddings.
func NewForwardPlan(seconds float64, lws int) (Plan, error) {
	p, err := NewPlan(seconds, lws)
	if err != nil {
		return p, err
	}
	p.Forward = true
	clear(p.Paddings)
	return p, nil
}

// NewPlan computes the plan for a video of about seconds seconds:
// max(round(seconds·30 / (4·lws)), 1) sections (Python's round, half to
// even). Paddings count down [S−1 … 0], except that beyond 4 sections
// FramePack repeats 2s: [3, 2, …, 2, 1, 0].
func NewPlan(seconds float64, lws int) (Plan, error) {
	if lws < 1 {
		return Plan{}, fmt.Errorf("latent window size must be at least 1, have %d", lws)
	}
	if math.IsNaN(seconds) || seconds <= 0 || seconds > 3600 {
		return Plan{}, fmt.Errorf("video length must be in (0, 3600] seconds, have %v", seconds)
	}
	s := int(math.Max(math.RoundToEven(seconds*FPS/float64(lws*4)), 1))
	p := Plan{Sections: s, WindowSize: lws, Paddings: make([]int, s)}
	if s > 4 {
		p.Paddings[0] = 3
		for i := 1; i < s-2; i++ {
			p.Paddings[i] = 2
		}
		p.Paddings[s-2], p.Paddings[s-1] = 1, 0
	} else {
		for i := range p.Paddings {
			p.Paddings[i] = s - 1 - i
		}
	}
	return p, nil
}

// SectionFrames is num_frames of a section: 4·lws − 3 pixel frames, which
// the sampler turns into (num_frames+3)/4 = lws latent frames.
func (p Plan) SectionFrames() int { return p.WindowSize*4 - 3 }

// VideoFrames is the length of the finished video: 4·(lws·S + 1) − 3.
func (p Plan) VideoFrames() int { return 4*(p.WindowSize*p.Sections+1) - 3 }

// Section is the index layout of one section (§1.7 of the spec). All
// indices are latent frame positions in the packed sequence
// [pre | blank (padding) | window | post | 2x | 4x].
type Section struct {
	Index   int // 0-based, in generation order
	Padding int // latent_padding (the blank is Padding·lws frames)
	Last    bool

	LatentIndices  []int64 // the noisy window (lws)
	CleanIndices   []int64 // [pre, post]: the start image and the 1x history frame
	Clean2xIndices []int64 // 2
	Clean4xIndices []int64 // 16
}

// Section returns the layout of section i (generation order).
func (p Plan) Section(i int) Section {
	if p.Forward {
		return p.forwardSection(i)
	}
	pad := p.Paddings[i] * p.WindowSize
	lws := int64(p.WindowSize)
	next := int64(1 + pad) // after pre and blank
	seq := func(n int64) []int64 {
		out := make([]int64, n)
		for k := range out {
			out[k] = next + int64(k)
		}
		next += n
		return out
	}
	sec := Section{Index: i, Padding: p.Paddings[i], Last: p.Paddings[i] == 0}
	sec.LatentIndices = seq(lws)
	post := seq(1)[0]
	sec.CleanIndices = []int64{0, post}
	sec.Clean2xIndices = seq(2)
	sec.Clean4xIndices = seq(16)
	return sec
}

// forwardSection is F1's layout: [start | 4x (16) | 2x (2) | 1x | window].
func (p Plan) forwardSection(i int) Section {
	lws := int64(p.WindowSize)
	seq := func(a, n int64) []int64 {
		out := make([]int64, n)
		for k := range out {
			out[k] = a + int64(k)
		}
		return out
	}
	return Section{Index: i, Last: i == p.Sections-1,
		Clean4xIndices: seq(1, 16), Clean2xIndices: seq(17, 2), CleanIndices: []int64{0, 19}, LatentIndices: seq(20, lws)}
}

// DecodeLatents is how many of the newest history latents section i decodes
// (0 means all generated so far: the first section), and Overlap the pixel
// frames its decode shares with the video so far (soft-appended). Later
// sections decode their own latents with the previous section's (2·lws,
// plus the start latent on the last).
func (p Plan) DecodeLatents(i int) (latents, overlap int) {
	if i == 0 {
		return 0, 0
	}
	latents = 2 * p.WindowSize
	if !p.Forward && !p.Video && p.Paddings[i] == 0 {
		latents++
	}
	return latents, p.WindowSize*4 - 3
}

// PixelFrames is the number of pixel frames the VAE decodes from n latents.
func PixelFrames(n int) int { return 4*n - 3 }

// History is FramePack's history_latents, on the host in float32: the
// generated latents, most recent in generation order first (which is
// earliest in time), followed by HistoryContext zero frames. A Forward
// history (F1's) is the other way round: HistoryContext zero frames, then
// the start latent and the generated latents in time order.
type History struct {
	Latents   *tensor.Tensor // (1, 16, Generated + 19, h, w)
	Generated int            // total_generated_latent_frames
	Forward   bool

	// A video extension's (NewVideoHistory): the input video's latents,
	// where the 19 zero frames would be, and num_cleaned_frames.
	video         *tensor.Tensor
	contextFrames int
}

// NewHistory is the empty history for h×w latents.
func NewHistory(h, w int) *History {
	return &History{Latents: tensor.New(tensor.F32, 1, 16, HistoryContext, h, w)}
}

// NewForwardHistory is F1's initial history: 19 zero frames and the start
// latent, which counts as generated.
func NewForwardHistory(start *tensor.Tensor) (*History, error) {
	hs := &History{Latents: tensor.New(tensor.F32, 1, 16, HistoryContext, start.Dim(3), start.Dim(4)), Forward: true}
	if err := hs.checkFrames("start latent", start); err != nil {
		return nil, err
	}
	hs.Latents = concatT(hs.Latents, tensor.ToHost(start))
	hs.Generated = start.Dim(2)
	return hs, nil
}

// Context returns a section's history conditioning, host f32 tensors:
// clean_latents = [start, history[0]], clean_latents_2x = history[1:3],
// clean_latents_4x = history[3:19]. start is the image's latent (1, 16, 1,
// h, w).
func (hs *History) Context(start *tensor.Tensor) (clean, clean2x, clean4x *tensor.Tensor, err error) {
	if err := hs.checkFrames("start latent", start); err != nil {
		return nil, nil, nil, err
	}
	if start.Dim(2) != 1 {
		return nil, nil, nil, fmt.Errorf("start latent %v: want one frame", start.Shape())
	}
	if hs.Forward {
		// The last 19 frames: [4x (16) | 2x (2) | 1x].
		n := hs.Latents.Dim(2)
		clean = concatT(tensor.ToHost(start), hs.frames(n-1, n))
		return clean, hs.frames(n-3, n-1), hs.frames(n-HistoryContext, n-3), nil
	}
	post := hs.frames(0, 1)
	clean = concatT(tensor.ToHost(start), post)
	return clean, hs.frames(1, 3), hs.frames(3, HistoryContext), nil
}

// Add records a section's generated latents (1, 16, lws, h, w): on the last
// section the start latent goes in front, then all of it is prepended to
// the history. A Forward history appends them (last is ignored).
func (hs *History) Add(generated, start *tensor.Tensor, last bool) error {
	if err := hs.checkFrames("generated latents", generated); err != nil {
		return err
	}
	g := tensor.ToHost(generated)
	if g.DType() != tensor.F32 {
		return fmt.Errorf("generated latents are %s, want f32", g.DType())
	}
	if hs.Forward {
		hs.Generated += g.Dim(2)
		hs.Latents = concatT(hs.Latents, g)
		return nil
	}
	if last && hs.video == nil {
		if err := hs.checkFrames("start latent", start); err != nil {
			return err
		}
		g = concatT(tensor.ToHost(start), g)
	}
	hs.Generated += g.Dim(2)
	hs.Latents = concatT(g, hs.Latents)
	return nil
}

// Newest returns the first n latents of the history (all generated ones
// when n is 0), the last n of a Forward one: what a section decodes, in
// time order.
func (hs *History) Newest(n int) *tensor.Tensor {
	if n <= 0 || n > hs.Generated {
		n = hs.Generated
	}
	if hs.Forward {
		t := hs.Latents.Dim(2)
		return hs.frames(t-n, t)
	}
	return hs.frames(0, n)
}

func (hs *History) checkFrames(what string, t *tensor.Tensor) error {
	if t == nil {
		return fmt.Errorf("%s missing", what)
	}
	s, h := t.Shape(), hs.Latents.Shape()
	if len(s) != 5 || s[0] != 1 || s[1] != 16 || s[3] != h[3] || s[4] != h[4] {
		return fmt.Errorf("%s %v: want (1, 16, T, %d, %d)", what, s, h[3], h[4])
	}
	if t.DType() != tensor.F32 {
		return fmt.Errorf("%s is %s, want f32", what, t.DType())
	}
	return nil
}

// frames copies history frames [a, b).
func (hs *History) frames(a, b int) *tensor.Tensor {
	return Frames(hs.Latents, a, b)
}

// Frames copies frames [a, b) of a host f32 (B, C, T, H, W) tensor.
func Frames(t *tensor.Tensor, a, b int) *tensor.Tensor {
	s := t.Shape()
	plane := s[3] * s[4]
	out := tensor.New(tensor.F32, s[0], s[1], b-a, s[3], s[4])
	src, dst := t.Float32s(), out.Float32s()
	for bc := 0; bc < s[0]*s[1]; bc++ {
		copy(dst[bc*(b-a)*plane:(bc+1)*(b-a)*plane], src[(bc*s[2]+a)*plane:(bc*s[2]+b)*plane])
	}
	return out
}

// concatT joins host f32 (B, C, T, H, W) tensors along time.
func concatT(x, y *tensor.Tensor) *tensor.Tensor {
	sx, sy := x.Shape(), y.Shape()
	plane := sx[3] * sx[4]
	tx, ty := sx[2], sy[2]
	out := tensor.New(tensor.F32, sx[0], sx[1], tx+ty, sx[3], sx[4])
	a, b, dst := x.Float32s(), y.Float32s(), out.Float32s()
	for bc := 0; bc < sx[0]*sx[1]; bc++ {
		o := dst[bc*(tx+ty)*plane:]
		copy(o, a[bc*tx*plane:(bc+1)*tx*plane])
		copy(o[tx*plane:], b[bc*ty*plane:(bc+1)*ty*plane])
	}
	return out
}

// Concat joins host f32 (B, C, T, H, W) tensors along time.
func Concat(x, y *tensor.Tensor) *tensor.Tensor { return concatT(tensor.ToHost(x), tensor.ToHost(y)) }

// Mix is a·x + b·y elementwise (x·a when y is nil) in float32, each
// product rounded before the sum as PyTorch computes it: a new host f32
// tensor of x's shape.
func Mix(x *tensor.Tensor, a float32, y *tensor.Tensor, b float32) *tensor.Tensor {
	xv := tensor.Float32s(x)
	out := make([]float32, len(xv))
	var yv []float32
	if y != nil {
		if yv = tensor.Float32s(y); len(yv) != len(xv) {
			tensor.Fail("section", "mixing %v with %v", x.Shape(), y.Shape())
		}
	}
	for i, v := range xv {
		o := float32(v * a)
		if yv != nil {
			o = float32(o + float32(b*yv[i]))
		}
		out[i] = o
	}
	return tensor.FromFloat32(out, x.Shape()...)
}
