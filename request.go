package framepack

import (
	"fmt"
	"image"
	"math"
	"slices"
	"time"

	"github.com/framepack-go/framepack/backend/cpu"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/video"
)

// Request is one generation job. Start from DefaultRequest: its values are
// FramePack's defaults, and Generate takes every field as given.
type Request struct {
	// The start frame: Image, or RGB (exactly one), unless Video is set.
	Image image.Image
	RGB   *section.RGB

	// Video, set in place of the start frame, is a video to extend, as
	// FramePack Studio's "Video" (ModelFramePack: backward sections) and
	// "Video F1" (ModelF1: forward sections) generators do: its frames in
	// time order, all one size, each cropped to the bucket as an image is.
	// Its last frames (up to section.VideoEncodeFrames, a multiple of 4)
	// are VAE-encoded 16 at a time into the history the sections continue
	// from; the first of them conditions the sections through SigLIP. It
	// needs MinVideoFrames frames at least. An end image's latent ends the
	// generated part (ModelFramePack only); the embedding options do not
	// apply. Seconds is the length of the new part.
	Video []*section.RGB
	// VideoContextFrames is Studio's num_cleaned_frames (2–10; 5): how many
	// latent frames of the video's end, and of the new part, condition each
	// section at full resolution (more follows the video more closely).
	VideoContextFrames int
	// VideoNewOnly makes the result the new frames alone; otherwise it is
	// the whole input video, cropped, followed by them.
	VideoNewOnly bool

	// Prompt conditions both text encoders (LLaMA through the template,
	// CLIP raw); NegativePrompt is encoded only when CFG ≠ 1. A prompt with
	// timed parts ("[0s: a cat sits] [2s: the cat jumps]", or "[0s] a cat
	// sits [2s] the cat jumps") gives sections of the video their own
	// prompts, as FramePack Studio does (section.PromptSchedule); each
	// distinct prompt is encoded once.
	Prompt, NegativePrompt string
	// PromptBlend is FramePack Studio's blend_sections for timed prompts:
	// above 0, the section where the prompt changes mixes the two prompts'
	// conditioning with weight 1/PromptBlend (0: no blending).
	PromptBlend int
	// Seed seeds the one CPU torch generator all sections draw noise from,
	// so a seed gives the reference's noise.
	Seed uint64
	// Seconds is the target length (0 < Seconds ≤ 120); the video has
	// section.NewPlan(Seconds, LatentWindowSize)'s VideoFrames() frames.
	Seconds float64
	// LatentWindowSize is the latent frames per section (1–33; 9).
	LatentWindowSize int
	// Steps is the sampler steps per section (1–100).
	Steps int
	// CFG is the real classifier-free guidance scale (1 turns the negative
	// pass off), GS the distilled guidance scale, RS the CFG rescale.
	CFG, GS, RS float64
	// Cache picks how sampling skips transformer blocks on some steps,
	// reusing the last computed residual: CacheTeaCache (FramePack's
	// TeaCache: where the input barely moved), CacheMagCache
	// (MagCache4FramePack's MagCache: by the model's calibrated magnitude
	// ratios) or CacheNone. "" leaves the choice to TeaCache.
	Cache string
	// TeaCache is the older switch for Cache, read only when Cache is "":
	// true means CacheTeaCache, false CacheNone.
	TeaCache bool
	// CacheThreshold is the cache's threshold, in (0, 1]: TeaCache's
	// accumulated relative L1 distance, MagCache's accumulated error. 0
	// means the default: Options.TeaCacheThreshold or FramePack's 0.15
	// for TeaCache, MagCache4FramePack's 0.1 for MagCache.
	CacheThreshold float64
	// MagCacheK is how many calls in a row MagCache may skip (1–5; 3),
	// MagCacheRetention the share of each section's first steps that
	// always run the blocks (0–1; 0.2). MagCache4FramePack's defaults.
	MagCacheK         int
	MagCacheRetention float64
	// Resolution is the bucket resolution (640, FramePack's; smaller for
	// quick runs, see section.Buckets). Generate warns when it is far
	// beyond the one the model was made for (Pipeline.Resolution).
	Resolution int
	// PosteriorMean takes the VAE posterior's mean as the start latent
	// instead of a sample. FramePack samples with PyTorch's unseeded CUDA
	// generator, which no port can reproduce; the sample here draws from a
	// CPU torch generator seeded with Seed (separate from the noise's).
	PosteriorMean bool

	// Model is the transformer's variant: ModelFramePack (FramePack's
	// backward sections; "" means it) or ModelF1 (FramePack-F1's forward
	// sections). The checkpoints share one config, so it cannot be told
	// from the folder: set it to match the weights.
	Model string

	// The end frame (optional): EndImage or EndRGB, cropped to the start
	// image's bucket. It is ComfyUI-FramePackWrapper's end_latent: its
	// latent replaces the 1x history frame of the first section generated
	// (the video's end), and its SigLIP embedding is mixed into the start
	// image's by EmbedInterpolation. Not with ModelF1.
	EndImage image.Image
	EndRGB   *section.RGB
	// EmbedInterpolation is the wrapper's embed_interpolation, used only
	// with an end frame: EmbedDisabled (the start embedding times
	// StartEmbedStrength), EmbedLinear (start·f + end·(1−f), f = 1 − i/(S−1)
	// for the i-th section generated) or EmbedWeighted (f =
	// StartEmbedStrength). "" means EmbedDisabled.
	EmbedInterpolation string
	// StartEmbedStrength is the wrapper's start_embed_strength (0–1; 1).
	StartEmbedStrength float64

	// Progress, when set, is called at every stage and after every sampler
	// step, on Generate's goroutine.
	Progress func(Progress)

	// Resume, when set, goes on from a checkpoint of this same request
	// (Progress.Checkpoint): the sections after it run, the video so far
	// is the checkpoint's, and Result.Sections lists the sections run.
	Resume *Checkpoint
}

// DefaultRequest is FramePack's demo defaults: seed 31337, 5 seconds,
// window 9, 25 steps, CFG 1, GS 10, RS 0, TeaCache on, the 640 buckets;
// timed prompts blended over FramePack Studio's default 4 sections;
// MagCache4FramePack's K and retention ratio for Cache CacheMagCache.
// Pipeline.DefaultRequest is the same at the resolution the loaded model
// was made for (the tiny model's is far smaller than 640).
func DefaultRequest() Request {
	return Request{Seed: 31337, Seconds: 5, LatentWindowSize: 9, Steps: 25, CFG: 1, GS: 10, RS: 0, TeaCache: true, Resolution: 640,
		PromptBlend: 4, StartEmbedStrength: 1, MagCacheK: hunyuan.MagCacheK, MagCacheRetention: hunyuan.MagCacheRetention,
		VideoContextFrames: section.DefaultVideoContextFrames}
}

// Step caches (Request.Cache).
const (
	CacheNone     = "none"
	CacheTeaCache = "teacache"
	CacheMagCache = "magcache"
)

// Caches are the Request.Cache values.
var Caches = []string{CacheTeaCache, CacheMagCache, CacheNone}

// Limits of the MagCache knobs (MagCache4FramePack's sliders).
const MaxMagCacheK = 5

// CacheChoice is the step cache the request runs with: Cache, or what
// TeaCache says when Cache is "".
func (r *Request) CacheChoice() string {
	switch {
	case r.Cache != "":
		return r.Cache
	case r.TeaCache:
		return CacheTeaCache
	}
	return CacheNone
}

// Model variants (Request.Model).
const (
	ModelFramePack = "framepack" // lllyasviel/FramePackI2V_HY
	ModelF1        = "f1"        // lllyasviel/FramePack_F1_I2V_HY_20250503
)

// Image embedding interpolation with an end frame (Request.EmbedInterpolation).
const (
	EmbedDisabled = "disabled"
	EmbedLinear   = "linear"
	EmbedWeighted = "weighted_average"
)

// teaCacheThreshold is TeaCache's threshold: CacheThreshold, else the
// pipeline's (0: FramePack's 0.15).
func (r *Request) teaCacheThreshold(pipeline float32) float32 {
	if r.CacheThreshold != 0 {
		return float32(r.CacheThreshold)
	}
	return pipeline
}

// magCache is the request's MagCache for each section, nil unless Cache
// is CacheMagCache: MagCache4FramePack's curve for the model variant,
// interpolated to Steps.
func (r *Request) magCache() *hunyuan.MagCacheSettings {
	if r.CacheChoice() != CacheMagCache {
		return nil
	}
	curve := hunyuan.MagRatiosFramePack
	if r.forward() {
		curve = hunyuan.MagRatiosF1
	}
	th := r.CacheThreshold
	if th == 0 {
		th = hunyuan.MagCacheThreshold
	}
	return &hunyuan.MagCacheSettings{Ratios: hunyuan.MagRatios(curve, r.Steps), Threshold: th, K: r.MagCacheK,
		Retention: r.MagCacheRetention}
}

// forward is whether the request runs F1's forward sections.
func (r *Request) forward() bool { return r.Model == ModelF1 }

// endFrame is the end image, if any.
func (r *Request) endFrame() (*section.RGB, error) {
	return frameOf("End", "end ", r.EndImage, r.EndRGB)
}

// frameOf checks one of a request's frames, given as an image or as RGB
// (the fields field+"Image" and field+"RGB"; what names it in prose), and
// returns it, or nil when neither is set.
func frameOf(field, what string, img image.Image, rgb *section.RGB) (*section.RGB, error) {
	switch {
	case img != nil && rgb != nil:
		return nil, fmt.Errorf("request: set %sImage or %sRGB, not both", field, field)
	case rgb != nil:
		if rgb.W <= 0 || rgb.H <= 0 || len(rgb.Pix) != 3*rgb.W*rgb.H {
			return nil, fmt.Errorf("request: %sRGB image of %d×%d with %d bytes", what, rgb.W, rgb.H, len(rgb.Pix))
		}
		return rgb, nil
	case img != nil:
		b := img.Bounds()
		if b.Dx() <= 0 || b.Dy() <= 0 {
			return nil, fmt.Errorf("request: the %simage has no pixels (%d×%d)", what, b.Dx(), b.Dy())
		}
		if int64(b.Dx())*int64(b.Dy()) > section.MaxImagePixels {
			return nil, fmt.Errorf("request: a %d×%d %simage is too large (limit %d megapixels)", b.Dx(), b.Dy(), what, section.MaxImagePixels/1000000)
		}
		return section.FromImage(img), nil
	}
	return nil, nil
}

// Stages reported through Progress.
const (
	StageTextEncode  = "text encode"
	StageVAEEncode   = "vae encode"
	StageImageEncode = "image encode"
	StageSample      = "sample"
	StageDecode      = "decode"
	// StageSectionDone follows each section's decode; its Progress carries
	// the history latents and the video so far.
	StageSectionDone = "section done"
)

// Progress is a report from Generate.
type Progress struct {
	Stage string
	// Section is 1-based in generation order (the video's end first; its
	// start first with ModelF1), of Sections; 0 before the section loop.
	Section, Sections int
	// Step is 1-based during StageSample, of Steps.
	Step, Steps int
	// Frames is the video length generated so far, in frames.
	Frames int
	// Tiles is the decoder runs a StageDecode's decode is planned in (1
	// when untiled), Tile how many are done: 0 in the report that starts
	// the decode, then 1-based as each one ends (reported for a decode in
	// line only, not for one beside the next section's sampling). An
	// out-of-memory retry at a smaller tiling counts its own Tiles.
	Tile, Tiles int
	// Denoised is the sampler's current x0 prediction (1, 16, lws, h, w)
	// during StageSample; valid only during the call.
	Denoised *tensor.Tensor
	// Latents and Pixels, at StageSectionDone: every latent frame generated
	// so far in time order (FramePack's real_history_latents, (1, 16, n, h,
	// w) f32) and the video so far (its history_pixels, (1, 3, T, H, W),
	// unclamped, in the VAE's dtype), on the host; valid only during the
	// call.
	Latents, Pixels *tensor.Tensor
	// Checkpoint, at StageSectionDone, is what Request.Resume needs to go
	// on after this section; its tensors are valid only during the call
	// (Checkpoint.MarshalBinary copies them).
	Checkpoint *Checkpoint
	// Stats, at StageSectionDone, is the section's (Decode: how long its
	// decode took, also when it ran beside the next sampling); valid only
	// during the call.
	Stats *SectionStats
}

// PreviewRGB is FramePack's live preview of p.Denoised: the latent frames
// side by side at latent resolution through the fixed latent-to-RGB map.
func (p Progress) PreviewRGB() (*section.RGB, error) {
	if p.Denoised == nil {
		return nil, fmt.Errorf("no latents to preview at stage %q", p.Stage)
	}
	s := tensor.NewScope(cpu.New())
	defer s.Close()
	var im *section.RGB
	var perr error
	if err := tensor.Catch(func() {
		x := s.To(tensor.ToHost(p.Denoised))
		im, perr = section.PreviewImage(tensor.ToHost(section.PreviewLatents(s, x)))
	}); err != nil {
		return nil, err
	}
	return im, perr
}

// SectionStats describe one generated section.
type SectionStats struct {
	Index, Padding int // 1-based generation order; FramePack's latent padding (0 with ModelF1)
	LatentFrames   int // latents this section added (lws, +1 on the last)
	Frames         int // video frames after it
	Sample, Decode time.Duration
	// SampleIdle is how long, of Sample, the device's queue stood empty
	// because the host waited on it (0 where the backend does not measure
	// it: tensor.QueueIdler).
	SampleIdle time.Duration
	// TeaCache counts the transformer calls that ran the blocks and those
	// that reused the cached residual (0/0 when TeaCache is off).
	TeaCacheComputed, TeaCacheSkipped int
	DecodeTiling                      string
	// TransformerCalls counts the section's transformer calls (two a step
	// with real CFG) and CacheSkipped lists, 0-based, those that reused
	// the step cache's residual instead of running the blocks (TeaCache's
	// or MagCache's).
	TransformerCalls int
	CacheSkipped     []int
	// DecodeOverlapped: the decode ran beside the next section's sampling
	// (its Decode time then overlaps that Sample time).
	DecodeOverlapped bool
	// DecodeWait is, for an overlapped decode, how long the loop waited
	// for it after the next section's sampling.
	DecodeWait time.Duration
	// DecodeInline is, for an overlapped decode, the part of Decode that
	// ran before the next sampling began: on a GPU, whose work goes
	// through one stream, the decode itself (only the soft append on the
	// host runs beside the sampling).
	DecodeInline time.Duration
}

// Result is a finished video.
type Result struct {
	video.Frames
	FPS int
	// Width and Height are the bucket the image was cropped to.
	Width, Height int
	// Latents are every generated latent frame in time order, start latent
	// first: (1, 16, lws·S + 1, H/8, W/8), f32 on the host (with either
	// model). Extending a video, the new latents alone (lws·S).
	Latents  *tensor.Tensor
	Sections []SectionStats
	// InputFrames is how many of the frames are the input video's (0
	// unless extending a video without VideoNewOnly): they come first.
	InputFrames int
	// Stage times before the section loop, and in total.
	TextEncode, VAEEncode, ImageEncode, Total time.Duration
	// PeakBytes is the compute device's peak use during the job.
	PeakBytes int64
	// Loads is every model load of the job, in order; empty when every
	// model stayed loaded from the Pipeline's previous call.
	Loads []ModelLoad
}

// ModelLoad is one model's weights read onto its backend.
type ModelLoad struct {
	Part string // PartTextEncoder, …; PartVAE for its encoder and its decoder
	// Stage is the stage whose time includes the load: StageTextEncode,
	// StageVAEEncode, StageImageEncode or StageDecode; "" for the
	// transformer's, which no stage time includes (a section's Sample is
	// timed from its first step).
	Stage string
	Time  time.Duration
	// Bytes is what the load placed: the weights on the device and in host
	// memory, in the dtypes they are held in (the compute dtype; FP8 codes
	// and their scales for FP8 weights; the part kept on the device when
	// blocks stream from the checkpoint).
	Bytes int64
	// Overlapped: the load ran beside other stages (the transformer loading
	// while the encoders run); the job waited only Wait for it.
	Overlapped bool
	Wait       time.Duration
}

// Waited is the time the job spent waiting for the load: all of it, or
// Wait for one that ran beside other stages.
func (l ModelLoad) Waited() time.Duration {
	if l.Overlapped {
		return l.Wait
	}
	return l.Time
}

// FPS is the frame rate FramePack generates and writes at.
const FPS = section.FPS

// PromptTemplate is HunyuanVideo's prompt template for the LLaMA text
// encoder; {} is the prompt.
const PromptTemplate = section.PromptTemplate

// Resolution limits (section.Buckets).
const (
	MinResolution = section.MinResolution
	MaxResolution = section.MaxResolution
)

// Maximums Generate accepts.
const (
	MaxSeconds          = 120
	MaxLatentWindowSize = 33
	MaxSteps            = 100
)

// Validate checks the request as Generate will, without running it.
func (r *Request) Validate() error {
	_, err := r.validate()
	return err
}

// validate checks a request and returns its start image.
func (r *Request) validate() (*section.RGB, error) {
	img, err := frameOf("", "", r.Image, r.RGB)
	switch {
	case err != nil:
		return nil, err
	case img != nil && len(r.Video) > 0:
		return nil, fmt.Errorf("request: set a start image or a video, not both")
	case len(r.Video) > 0:
		if img, err = r.checkVideo(); err != nil {
			return nil, err
		}
	case img == nil:
		return nil, fmt.Errorf("request: no start image")
	}
	end, err := r.endFrame()
	if err != nil {
		return nil, err
	}
	return img, r.validateFor(img.W, img.H, end != nil)
}

// ValidateSize is Validate for a request whose images are not decoded yet:
// the start image has w×h pixels, and hasEnd says an end image will be
// given (the images themselves are not looked at). A batch checks its jobs
// so, decoding each image only when its job runs.
func (r *Request) ValidateSize(w, h int, hasEnd bool) error {
	if w <= 0 || h <= 0 {
		return fmt.Errorf("request: the image has no pixels (%d×%d)", w, h)
	}
	return r.validateFor(w, h, hasEnd)
}

// validateFor checks everything but the images, for a start image of w×h
// pixels and, when hasEnd, an end image.
func (r *Request) validateFor(w, h int, hasEnd bool) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(r.Seconds) || r.Seconds <= 0 || r.Seconds > MaxSeconds:
		return fmt.Errorf("request: seconds must be in (0, %d], have %v", MaxSeconds, r.Seconds)
	case r.LatentWindowSize < 1 || r.LatentWindowSize > MaxLatentWindowSize:
		return fmt.Errorf("request: latent window size must be in 1–%d, have %d", MaxLatentWindowSize, r.LatentWindowSize)
	case r.Steps < 1 || r.Steps > MaxSteps:
		return fmt.Errorf("request: steps must be in 1–%d, have %d", MaxSteps, r.Steps)
	case !finite(r.CFG) || r.CFG < 1 || r.CFG > 32:
		return fmt.Errorf("request: CFG must be in 1–32, have %v", r.CFG)
	case !finite(r.GS) || r.GS < 1 || r.GS > 32:
		return fmt.Errorf("request: distilled guidance (gs) must be in 1–32, have %v", r.GS)
	case !finite(r.RS) || r.RS < 0 || r.RS > 1:
		return fmt.Errorf("request: CFG rescale (rs) must be in 0–1, have %v", r.RS)
	case r.PromptBlend < 0 || r.PromptBlend > 100:
		return fmt.Errorf("request: prompt blend must be in 0–100 sections, have %d", r.PromptBlend)
	case r.Model != "" && r.Model != ModelFramePack && r.Model != ModelF1:
		return fmt.Errorf("request: model must be %q or %q, have %q", ModelFramePack, ModelF1, r.Model)
	case r.EmbedInterpolation != "" && r.EmbedInterpolation != EmbedDisabled && r.EmbedInterpolation != EmbedLinear && r.EmbedInterpolation != EmbedWeighted:
		return fmt.Errorf("request: embed interpolation must be %q, %q or %q, have %q", EmbedDisabled, EmbedLinear, EmbedWeighted, r.EmbedInterpolation)
	case !finite(r.StartEmbedStrength) || r.StartEmbedStrength < 0 || r.StartEmbedStrength > 1:
		return fmt.Errorf("request: start embed strength must be in 0–1, have %v", r.StartEmbedStrength)
	case !slices.Contains(Caches, r.CacheChoice()):
		return fmt.Errorf("request: cache must be %q, %q or %q, have %q", CacheTeaCache, CacheMagCache, CacheNone, r.Cache)
	case !finite(r.CacheThreshold) || r.CacheThreshold < 0 || r.CacheThreshold > 1:
		return fmt.Errorf("request: cache threshold must be in (0, 1] (0: the cache's default), have %v", r.CacheThreshold)
	}
	// The MagCache knobs are checked whatever the cache (a zero K is
	// refused only where MagCache runs: a Request not made by
	// DefaultRequest has one).
	switch {
	case r.MagCacheK < 0 || r.MagCacheK > MaxMagCacheK || (r.MagCacheK == 0 && r.CacheChoice() == CacheMagCache):
		return fmt.Errorf("request: MagCache K must be in 1–%d, have %d", MaxMagCacheK, r.MagCacheK)
	case !finite(r.MagCacheRetention) || r.MagCacheRetention < 0 || r.MagCacheRetention > 1:
		return fmt.Errorf("request: MagCache retention ratio must be in 0–1, have %v", r.MagCacheRetention)
	}
	spans, err := section.ParseTimedPrompt(r.Prompt)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	if within, _ := section.PastTheEnd(spans, r.Seconds); spans != nil && within == nil {
		return fmt.Errorf("request: timed prompt: every part starts at or after the end of the %gs video", r.Seconds)
	}
	if hasEnd && r.forward() {
		return fmt.Errorf("request: an end image needs FramePack's backward sections, not %s", ModelF1)
	}
	bh, bw, err := section.NearestBucket(h, w, r.Resolution)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	// The crop resizes the image to cover the bucket; a very thin image
	// would be blown up to a huge intermediate first.
	if s := max(float64(bw)/float64(w), float64(bh)/float64(h)); float64(w)*s*float64(h)*s > 64*float64(bw*bh) {
		return fmt.Errorf("request: a %d×%d image is too far from the %d×%d bucket's aspect ratio to crop", w, h, bw, bh)
	}
	return nil
}
