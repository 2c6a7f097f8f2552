package section

import (
	"fmt"
	"slices"

	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
)

// Extending a video, as FramePack Studio's "Video" (backward sections, with
// FramePack's weights) and "Video F1" (forward sections) generators do
// (modules/generators/video_*generator.py): the last frames of the input
// video are VAE-encoded and make the history; each section's context comes
// from its end and from what was generated, in a layout that depends on
// how many latent frames are available and on the number of context
// frames (num_cleaned_frames).

// Studio's limits on the input video.
const (
	// VideoEncodeFrames is how many of the input's last frames are
	// encoded at most: 27 latent frames, the most a section's context
	// reads (max_latents_used_for_context).
	VideoEncodeFrames = 27 * 4
	// VideoEncodeBatch is how many frames each vae_encode call takes
	// (vae_batch_size); each batch is encoded on its own.
	VideoEncodeBatch = 16
	// Context frames (num_cleaned_frames): Studio's slider, 2–10, 5.
	MinVideoContextFrames     = 2
	MaxVideoContextFrames     = 10
	DefaultVideoContextFrames = 5
)

// VideoEncodeRange is which of n input frames Studio encodes
// (min_real_frames_to_encode): the last min(n, VideoEncodeFrames), rounded
// down to a multiple of 4. count is 0 when n < 4.
func VideoEncodeRange(n int) (start, count int) {
	count = min(n, VideoEncodeFrames) / 4 * 4
	return n - count, count
}

// VideoLatentFrames is how many latent frames the encode of count frames
// gives: VideoEncodeBatch frames at a time, each batch (T frames) giving
// (T−1)/4 + 1 latents.
func VideoLatentFrames(count int) int {
	n := 0
	for i := 0; i < count; i += VideoEncodeBatch {
		n += (min(VideoEncodeBatch, count-i)-1)/4 + 1
	}
	return n
}

// MinVideoLatents is the fewest latent frames of input video with which
// every section's context has Studio's full layout (a 2x pair, at least
// one 4x frame — two for F1 — and all the context frames asked for; for
// F1 also a whole window): for backward sections max(4, c+2), for forward
// ones max(lws, c+3), with c = contextFrames. Shorter inputs take
// degenerate branches of Studio's code that mismatch its own indices.
func MinVideoLatents(contextFrames, lws int, forward bool) int {
	if forward {
		return max(lws, contextFrames+3)
	}
	return max(4, contextFrames+2)
}

// VideoPixels are frames (all one size) as the VAE takes them: x/127.5 − 1,
// float32, (1, 3, T, H, W).
func VideoPixels(frames []*RGB) *tensor.Tensor {
	w, h := frames[0].W, frames[0].H
	n := w * h
	t := len(frames)
	out := make([]float32, 3*t*n)
	for ti, f := range frames {
		for i := 0; i < n; i++ {
			for c := 0; c < 3; c++ {
				out[(c*t+ti)*n+i] = float32(f.Pix[3*i+c])/127.5 - 1
			}
		}
	}
	return tensor.FromFloat32(out, 1, 3, t, h, w)
}

// VAEEncodeVideo is Studio's video_encode of frames already cropped to
// their bucket: VideoEncodeBatch frames at a time, each batch through
// vae_encode (the posterior sampled with rng, in batch order, or its mode
// when rng is nil; times the scaling factor), the latents joined in time:
// (1, 16, VideoLatentFrames(len(frames)), h, w) f32 on the host. Errors
// panic inside s (tensor.Catch).
func VAEEncodeVideo(s *tensor.Scope, v *vae.VAE, frames []*RGB, til vae.Tiling, rng vae.Randn) *tensor.Tensor {
	var out *tensor.Tensor
	for i := 0; i < len(frames); i += VideoEncodeBatch {
		bs := s.Child()
		mean, logvar := v.EncodeWith(bs, VideoPixels(frames[i:min(i+VideoEncodeBatch, len(frames))]), til)
		var z []float32
		if rng == nil {
			z = slices.Clone(tensor.Float32s(vae.Mode(mean, logvar)))
		} else {
			z = vae.Sample(mean, logvar, rng).Float32s()
		}
		round, sf := tensor.Rounder(v.DType()), v.ScalingFactor()
		for k, x := range z {
			z[k] = round(round(x) * sf)
		}
		lat := tensor.FromFloat32(z, mean.Shape()...)
		bs.Close()
		if out == nil {
			out = lat
		} else {
			out = concatT(out, lat)
		}
	}
	return out
}

// NewVideoHistory is the history of a video extension: the input video's
// latents (1, 16, T, h, w), none generated yet. Backward (Studio's Video)
// sections are prepended to it, forward (Video F1) ones appended;
// contextFrames is num_cleaned_frames.
func NewVideoHistory(video *tensor.Tensor, forward bool, contextFrames int) (*History, error) {
	v := tensor.ToHost(video)
	if v.Rank() != 5 || v.Dim(0) != 1 || v.Dim(1) != 16 || v.DType() != tensor.F32 {
		return nil, fmt.Errorf("video latents %v (%s): want (1, 16, T, h, w) f32", v.Shape(), v.DType())
	}
	if contextFrames < MinVideoContextFrames || contextFrames > MaxVideoContextFrames {
		return nil, fmt.Errorf("video context frames must be in %d–%d, have %d", MinVideoContextFrames, MaxVideoContextFrames, contextFrames)
	}
	return &History{Latents: Frames(v, 0, v.Dim(2)), Forward: forward, video: v, contextFrames: contextFrames}, nil
}

// VideoLatents is how many latent frames of input video the history holds
// (0 unless it is a video extension's).
func (hs *History) VideoLatents() int {
	if hs.video == nil {
		return 0
	}
	return hs.video.Dim(2)
}

// VideoContext is section i's layout and context in a video extension
// (Studio's video_prepare_clean_latents_and_indices for backward plans,
// video_f1_prepare_clean_latents_and_indices for forward ones): the
// section with its indices, and clean_latents, clean_latents_2x,
// clean_latents_4x as host f32 tensors. end, when set, is the end image's
// latent, the first backward section's post frame.
func (hs *History) VideoContext(p Plan, i int, end *tensor.Tensor) (sec Section, clean, clean2x, clean4x *tensor.Tensor, err error) {
	if hs.video == nil {
		return sec, nil, nil, nil, fmt.Errorf("not a video extension's history")
	}
	if p.Forward != hs.Forward {
		return sec, nil, nil, nil, fmt.Errorf("a forward plan and a backward history, or the other way")
	}
	if end != nil {
		if err := hs.checkFrames("end latent", end); err != nil {
			return sec, nil, nil, nil, err
		}
	}
	if min := MinVideoLatents(hs.contextFrames, p.WindowSize, p.Forward); hs.video.Dim(2) < min {
		return sec, nil, nil, nil, fmt.Errorf("%d latent frames of video, fewer than the %d the context needs", hs.video.Dim(2), min)
	}
	if p.Forward {
		sec, clean, clean2x, clean4x = hs.forwardVideoContext(p, i)
	} else {
		sec, clean, clean2x, clean4x = hs.backwardVideoContext(p, i, end)
	}
	return sec, clean, clean2x, clean4x, nil
}

// backwardVideoContext is the Video generator's layout
// [pre | blank | window | post | 2x | 4x]: pre the input video's last
// context frames, post the earliest generated ones (zeros, or the end
// latent, before any), 2x and 4x from the input video's end before pre.
// The last section (padding 0) uses one pre and one post frame.
func (hs *History) backwardVideoContext(p Plan, i int, end *tensor.Tensor) (Section, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor) {
	lws, pad := p.WindowSize, p.Paddings[i]
	isStart, isEnd := pad == 0, i == 0 // the generated part's start (time) and end
	tv, th := hs.video.Dim(2), hs.Latents.Dim(2)
	available := th
	if isStart {
		available = tv
	}
	ecf := hs.contextFrames - 1
	if isStart {
		ecf = 1
	}
	pre := ecf
	n2x, n4x := 1, 1
	if available > pre+1 {
		n2x = min(2, max(1, available-pre-1))
	}
	if available > pre+n2x {
		n4x = min(16, max(1, available-pre-n2x))
	}
	total := min(n2x+n4x, available-pre)
	post := ecf
	if isEnd && end != nil {
		post = 1
	}
	next := int64(0)
	seq := func(n int) []int64 {
		out := make([]int64, n)
		for k := range out {
			out[k] = next + int64(k)
		}
		next += int64(n)
		return out
	}
	preIdx := seq(pre)
	seq(pad * lws) // blank
	sec := Section{Index: i, Padding: pad, Last: isStart}
	sec.LatentIndices = seq(lws)
	sec.CleanIndices = append(preIdx, seq(post)...)
	sec.Clean2xIndices = seq(n2x)
	sec.Clean4xIndices = seq(n4x)

	// history[-(total+pre):-pre]; Python clamps the slice to the history.
	var clean2x, clean4x *tensor.Tensor
	if a, b := max(th-(total+pre), 0), max(th-pre, 0); total > 0 && b-a == n4x+n2x {
		clean4x, clean2x = hs.frames(a, a+n4x), hs.frames(a+n4x, b)
	} else {
		clean4x, clean2x = hs.frames(0, 1), hs.frames(0, 1)
	}
	preLat := Frames(hs.video, tv-min(ecf, tv), tv)
	postLat := hs.frames(0, min(ecf, th))
	if isEnd {
		postLat = tensor.New(tensor.F32, 1, 16, 1, hs.video.Dim(3), hs.video.Dim(4))
		if end != nil {
			postLat = Frames(tensor.ToHost(end), 0, 1)
		}
	}
	return sec, concatT(repeatFrames(preLat, pre), repeatFrames(postLat, post)), clean2x, clean4x
}

// forwardVideoContext is the Video F1 generator's layout
// [start | 4x | 2x | 1x | window]: start the input video's last latent,
// 4x, 2x and 1x (num_cleaned_frames − 1 frames) the end of the history.
func (hs *History) forwardVideoContext(p Plan, i int) (Section, *tensor.Tensor, *tensor.Tensor, *tensor.Tensor) {
	lws := p.WindowSize
	tv, th := hs.video.Dim(2), hs.Latents.Dim(2)
	available := th
	// MinVideoLatents makes the window whole (adjusted_latent_frames =
	// lws) and leaves Studio's clamps of the context frames idle.
	ecf := 0
	if hs.contextFrames > 1 {
		ecf = hs.contextFrames - 1
	}
	if available > 2 {
		ecf = min(ecf, available-2)
	} else {
		ecf = 0
	}
	n2x, n4x := 0, 0
	if available > ecf+1 {
		n2x = min(2, max(1, available-ecf-1))
	}
	if available > ecf+n2x {
		n4x = min(16, max(1, available-ecf-n2x))
	}
	total := min(n4x+n2x+ecf, available)
	next := int64(0)
	seq := func(n int) []int64 {
		out := make([]int64, n)
		for k := range out {
			out[k] = next + int64(k)
		}
		next += int64(n)
		return out
	}
	start := seq(1)
	sec := Section{Index: i, Last: i == p.Sections-1}
	sec.Clean4xIndices = seq(n4x)
	sec.Clean2xIndices = seq(n2x)
	sec.CleanIndices = append(start, seq(ecf)...)
	sec.LatentIndices = seq(lws)

	ctx := hs.frames(th-total, th)
	clean4x := Frames(ctx, 0, n4x)
	clean2x := Frames(ctx, n4x, n4x+n2x)
	clean1x := Frames(ctx, n4x+n2x, n4x+n2x+ecf)
	return sec, concatT(Frames(hs.video, tv-1, tv), clean1x), clean2x, clean4x
}

// repeatFrames is x repeated along time until it has n frames, cut to n
// (Studio pads short pre and post context this way).
func repeatFrames(x *tensor.Tensor, n int) *tensor.Tensor {
	if x.Dim(2) >= n {
		return x
	}
	out := x
	for out.Dim(2) < n {
		out = concatT(out, x)
	}
	return Frames(out, 0, n)
}
