package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/atomicfile"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
	"github.com/spf13/cobra"
)

// generateFlags are `framepack generate`'s options.
type generateFlags struct {
	image, prompt, negative string
	seconds                 float64
	seed                    string
	steps, window           int
	cfg, gs, rs             float64
	teacache                bool
	cache                   string
	cacheThreshold          float64
	magCacheK               int
	magCacheRetention       float64
	resolution, crf         int
	models, out             string
	device, dtype           string
	weightsMode             string
	fp8Compute              string
	fp8Attention            bool
	vramLimit, preserve     memory.Size
	ramLimit                memory.Size
	vaeTile                 int
	posteriorMean           bool
	parts                   map[string]*string
	json                    bool
	loras                   []string
	promptsFile             string
	promptsPath             string // --prompts-file, once read into prompt
	promptBlend             int
	model                   string
	endImage, embedInterp   string
	startEmbed              float64
	jobs                    string
	writeSections           bool
	preview                 string
	video                   string
	videoContextFrames      int
	newOnly                 bool
	writeLatents            string
	gpus                    string

	// Resolved by check.
	loraFiles         []lora.File
	seedValue         uint64
	seedRandom        bool
	output            videoOutput
	endRGB            *section.RGB
	changedResolution bool // --resolution given (in --jobs, on the command line or the job's line)
	// --video's frames, cropped to their bucket.
	videoFrames []*section.RGB
}

const generateLong = `Generate a video from a start image and a prompt with FramePack's HunyuanVideo model,
section by section as FramePack's demo does, and write it as H.264 through ffmpeg: -o ending
in .mp4, .mov or .mkv picks the container; a name without extension is a folder of PNG frames
(also where a video goes, as NAME_frames, when ffmpeg is missing). Beside it goes the
settings file, the output's name plus .json (out.mp4.json): prompt, seed, every setting, the
model folders with their config hashes, the stage timings and the version; the same settings
are in the video's comment tag. An existing output is replaced only when it is a regular file
(or a folder of frame_*.png) and no input of the job (an existing settings file only when
framepack wrote it); symbolic links, devices and other folders are refused.

The model folder (--models, or $FRAMEPACK_MODELS) has the Hugging Face layout FramePack uses:
transformer/ (lllyasviel/FramePackI2V_HY, or lllyasviel/FramePack_F1_I2V_HY_20250503 with
--model f1: FramePack-F1, which generates forward in time; both checkpoints have the same config,
so --model must name F1's weights); vae/, text_encoder/, text_encoder_2/, tokenizer/,
tokenizer_2/ (hunyuanvideo-community/HunyuanVideo); image_encoder/ (lllyasviel/flux_redux_bfl).
Without one, a tiny random-weight model built into the binary runs instead: the video is
noise, but every stage runs — a smoke test for a machine without the 30+ GB of weights
(at --resolution 128 unless set).

--end-image makes the video end on that image (cropped to the start image's bucket), as
ComfyUI-FramePackWrapper's end_latent does: it conditions the first section generated, and
--embed-interpolation mixes its image embedding with the start image's (FramePack model only).

--jobs FILE runs many jobs with the models loaded once: one JSON object a line, its keys
generate's long flag names (or "o"), e.g. {"image":"a.png","prompt":"…","seconds":2,"seed":1,
"o":"a.mp4","steps":10}; the command line's flags are every job's defaults, and the flags
that choose the models, the device and the memory apply to all of them. Each job prints one
result line (a JSON "result" or "error" record with --json, carrying its "line"); a bad line
fails only its job, and the exit status is 1 when any job failed.

--write-sections writes the video so far to the output after every section, as FramePack
does, each time replacing it whole; the last write is the full video.`

func newGenerate() *cobra.Command {
	cmd, _ := newGenerateCmd()
	return cmd
}

// newGenerateCmd is the generate command and the flags it fills (also a
// job line's, in --jobs).
func newGenerateCmd() (*cobra.Command, *generateFlags) {
	def := framepack.DefaultRequest()
	f := &generateFlags{parts: map[string]*string{}}
	cmd := &cobra.Command{
		Use:   "generate --image IMAGE [--prompt TEXT] [-o out.mp4] | --jobs JOBS.jsonl",
		Short: "Generate a video from an image and a prompt, as FramePack does",
		Long:  generateLong,
		Example: `  framepack generate --image testdata/images/scene.png --seconds 1 -o out.mp4
  framepack generate --models ~/models/framepack --image girl.png --prompt "The girl dances gracefully." -o dance.mp4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ev *events
			if f.json {
				ev = &events{w: cmd.OutOrStdout()}
			}
			err := runGenerate(cmd.Context(), cmd, f, ev)
			if err != nil {
				ev.emit("error", map[string]any{"error": errorText(err)})
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.image, "image", "", "start image (PNG, JPEG or WebP)")
	fl.StringVar(&f.video, "video", "", "extend this video instead of animating an image: a video file ffmpeg reads, or a folder of frames (PNG, JPEG or WebP, in name order)")
	fl.IntVar(&f.videoContextFrames, "video-context-frames", def.VideoContextFrames, fmt.Sprintf("with --video: latent frames of its end (and of the new part) each section sees at full resolution (%d–%d; more follows the video more closely)", section.MinVideoContextFrames, section.MaxVideoContextFrames))
	fl.BoolVar(&f.newOnly, "new-only", false, "with --video: write only the new frames, not the input video before them")
	fl.StringVar(&f.prompt, "prompt", "", `what happens in the video; timed parts as FramePack Studio writes them, "[0s: a cat sits] [2s: the cat jumps]", or "[0s] a cat sits [2s] the cat jumps"`)
	fl.StringVar(&f.promptsFile, "prompts-file", "", "read the (timed) prompt from this file, its lines joined by spaces")
	fl.IntVar(&f.promptBlend, "prompt-blend", def.PromptBlend, "timed prompts: the section where the prompt changes takes 1/N of the new prompt, as FramePack Studio's blend_sections (0: off; each section's prompt and shares are printed)")
	fl.StringVar(&f.model, "model", framepack.ModelFramePack, "transformer variant: framepack (FramePackI2V_HY, backward sections) or f1 (FramePack_F1_I2V_HY_20250503, forward sections)")
	fl.StringVar(&f.endImage, "end-image", "", "end image: the video ends on it (PNG, JPEG or WebP; not with --model f1)")
	fl.StringVar(&f.embedInterp, "embed-interpolation", framepack.EmbedDisabled, "with --end-image: disabled, linear or weighted_average (ComfyUI-FramePackWrapper's embed_interpolation)")
	fl.Float64Var(&f.startEmbed, "start-embed-strength", def.StartEmbedStrength, "with --end-image: the start image embedding's weight (0–1)")
	fl.StringVar(&f.negative, "negative-prompt", "", "negative prompt (used only with --cfg > 1)")
	fl.Float64Var(&f.seconds, "seconds", def.Seconds, "video length in seconds (up to 120), rounded to whole sections as FramePack does: at --window 9, 1 gives 1.23 s, 2 and 3 give 2.43 s (the length is printed before sampling)")
	fl.StringVar(&f.seed, "seed", strconv.FormatUint(def.Seed, 10), "seed of the noise: 0–18446744073709551615, or random (or -1) for a random one, printed")
	fl.IntVar(&f.steps, "steps", def.Steps, "sampler steps per section (1–100)")
	fl.IntVar(&f.window, "window", def.LatentWindowSize, "latent window size: latent frames per section (1–33)")
	fl.Float64Var(&f.cfg, "cfg", def.CFG, "real CFG scale (1: off)")
	fl.Float64Var(&f.gs, "gs", def.GS, "distilled guidance scale")
	fl.Float64Var(&f.rs, "rs", def.RS, "CFG rescale (0–1)")
	fl.BoolVar(&f.teacache, "teacache", def.TeaCache, "TeaCache: skip transformer blocks on steps that barely change (faster, slightly different); the older switch for --cache teacache (--teacache=false: --cache none)")
	fl.StringVar(&f.cache, "cache", "", "step cache, reusing the transformer's last residual on some steps: teacache (FramePack's TeaCache), magcache (MagCache4FramePack's MagCache) or none; default teacache, or as --teacache says")
	fl.Float64Var(&f.cacheThreshold, "cache-threshold", 0, "the step cache's threshold, in (0, 1]; higher skips more (0: the cache's default, 0.15 for teacache, 0.1 for magcache)")
	fl.IntVar(&f.magCacheK, "magcache-k", def.MagCacheK, fmt.Sprintf("magcache: at most this many steps in a row reuse the residual (1–%d)", framepack.MaxMagCacheK))
	fl.Float64Var(&f.magCacheRetention, "magcache-retention", def.MagCacheRetention, "magcache: the share of each section's first steps that always run the transformer (0–1)")
	fl.IntVar(&f.resolution, "resolution", def.Resolution, fmt.Sprintf("bucket resolution, %d–%d (default: what the model was made for: FramePack's 640, or its transformer config's %s, as the tiny models' %d)", framepack.MinResolution, framepack.MaxResolution, framepack.ResolutionKey, tinymodel.Resolution))
	fl.BoolVar(&f.posteriorMean, "posterior-mean", false, "start latent = the VAE posterior's mean instead of a seeded sample")
	fl.IntVar(&f.crf, "crf", video.DefaultCRF, "x264 CRF of the MP4 (0–51, lower is better)")
	fl.StringVar(&f.models, "models", "", "model folder (default $FRAMEPACK_MODELS, else the built-in tiny model)")
	fl.StringVarP(&f.out, "output", "o", "out.mp4", "output: .mp4, .mov or .mkv, or a folder for PNG frames (a name without extension)")
	fl.BoolVar(&f.json, "json", false, "print progress, stage timings and the result as JSON, one object a line, on stdout")
	fl.StringVar(&f.device, "device", framepack.DeviceAuto, "auto, cpu or gpu")
	fl.StringVar(&f.dtype, "dtype", "", "compute dtype f32, bf16 or f16 (default: f32 on the CPU; bf16 transformer, f16 others on a GPU)")
	fl.StringVar(&f.weightsMode, "weights", "", "transformer block weights: empty for the compute dtype, or fp8 (FP8 E4M3 with per-channel scales, as stored in an fp8 checkpoint or quantized at load)")
	fl.BoolVar(&f.fp8Attention, "fp8-attention", false, "let the transformer's attention run in FP8 where the GPU has an engine for it (cuDNN on Hopper): faster, about 7% relative error on each attention's output")
	fl.StringVar(&f.fp8Compute, "fp8-compute", "auto", "with --weights fp8: on quantizes the block linears' inputs per token and multiplies in FP8, off widens the weights on the fly (weight-only), auto is on where the GPU has FP8 tensor cores")
	vramLimitVar(fl, &f.vramLimit, `hard cap on device memory ("20G", "90%"; default: the device's safe default)`)
	preserveVar(fl, &f.preserve, `memory kept free for activations while weights stream (default 6G)`)
	ramLimitVar(fl, &f.ramLimit, `host memory budget ("16G", "50%"; default: available memory less max(2G, 1/8 of RAM)); streamed weights are read from the mapped checkpoint when a pinned copy would not fit`)
	fl.StringArrayVar(&f.loras, "lora", nil, "HunyuanVideo LoRA merged into the transformer, file.safetensors[:scale] (diffusers/PEFT, kohya or musubi-tuner keys; repeatable)")
	fl.IntVar(&f.vaeTile, "vae-tile", 0, "decode in spatial tiles of this many pixels (stride 3/4 of it; 0: planned from the budget)")
	for _, part := range []string{framepack.PartTransformer, framepack.PartVAE, framepack.PartTextEncoder, framepack.PartTextEncoder2,
		framepack.PartTokenizer, framepack.PartTokenizer2, framepack.PartImageEncoder, framepack.PartFeatureExtractor} {
		f.parts[part] = new(string)
		fl.StringVar(f.parts[part], strings.ReplaceAll(part, "_", "-"), "", "folder of the "+part+" (default <models>/"+part+")")
	}
	fl.StringVar(&f.jobs, "jobs", "", "run the jobs of a JSON-lines file (one object a line, keys are long flag names) with the models loaded once")
	fl.StringVar(&f.gpus, "gpus", "", gpusUsage)
	fl.StringVar(&f.preview, "preview", "", "write the latent preview (as FramePack's demo shows it) to this PNG after every sampler step, replacing it whole each time")
	fl.BoolVar(&f.writeSections, "write-sections", false, "write the video so far to the output after every section (replaced each time; the last write is the whole video)")
	fl.StringVar(&f.writeLatents, "write-latents", "", "also write the latents to this .safetensors file: every section's generated and history latents, named as FramePack's worker records them (bench compare)")
	return cmd, f
}

// check validates everything that can be checked before loading a model,
// so bad input fails at once with one clear error: a usage error (exit
// status 2).
func (f *generateFlags) check() (*section.RGB, error) {
	if err := f.checkLoad(); err != nil {
		return nil, usage(err)
	}
	img, err := f.checkJob(f, "", true)
	return img, usage(err)
}

// checkLoad checks the flags that choose the models, the device and the
// memory: in --jobs, those of every job.
func (f *generateFlags) checkLoad() error {
	f.loraFiles = nil
	for _, a := range f.loras {
		lf, err := lora.ParseArg(a)
		if err != nil {
			return fmt.Errorf("--lora: %w", err)
		}
		if st, err := os.Stat(lf.Path); err != nil || st.IsDir() {
			return fmt.Errorf("--lora: %s is not a file", lf.Path)
		}
		f.loraFiles = append(f.loraFiles, lf)
	}
	if _, err := device.ParseChoice(f.device); err != nil {
		return err
	}
	if f.dtype != "" {
		if _, err := tensor.ParseDType(f.dtype); err != nil {
			return fmt.Errorf("--dtype: %w", err)
		}
	}
	if f.weightsMode != "" && f.weightsMode != "fp8" {
		return fmt.Errorf("--weights %q: want fp8 or nothing", f.weightsMode)
	}
	if _, err := framepack.ParseFP8Compute(f.fp8Compute); err != nil {
		return fmt.Errorf("--fp8-compute: %w", err)
	}
	if f.vaeTile != 0 && (f.vaeTile < 32 || f.vaeTile%32 != 0) {
		return fmt.Errorf("--vae-tile %d: want a multiple of 32, at least 32", f.vaeTile)
	}
	if f.models != "" {
		if st, err := os.Stat(f.models); err != nil || !st.IsDir() {
			return fmt.Errorf("--models %s: the folder does not exist", f.models)
		}
	}
	return nil
}

// checkJob checks one job's flags; load holds the flags checkLoad checked
// (f itself, or in --jobs the command line's, whose file is jobsFile).
// With decode the images are decoded and the start image returned;
// without, only their headers are read (a batch decodes each when its job
// runs). A video to extend is read either way, before any model loads: an
// unreadable or too short video fails at once.
func (f *generateFlags) checkJob(load *generateFlags, jobsFile string, decode bool) (*section.RGB, error) {
	switch {
	case f.image == "" && f.video == "":
		return nil, errors.New("--image is required (or --video, to extend a video)")
	case f.image != "" && f.video != "":
		return nil, errors.New("--image and --video: give one")
	}
	var err error
	if f.seedValue, f.seedRandom, err = parseSeed(f.seed); err != nil {
		return nil, err
	}
	if f.promptsFile != "" {
		if f.prompt != "" {
			return nil, errors.New("--prompt and --prompts-file: give one")
		}
		b, err := os.ReadFile(f.promptsFile)
		if err != nil {
			return nil, fmt.Errorf("--prompts-file: %w", err)
		}
		f.prompt = strings.Join(strings.Fields(strings.ReplaceAll(string(b), "\r", "")), " ")
		f.promptsPath, f.promptsFile = f.promptsFile, ""
	}
	if _, err := section.ParseTimedPrompt(f.prompt); err != nil {
		return nil, fmt.Errorf("--prompt: %w", err)
	}
	var img *section.RGB
	switch {
	case f.video != "":
		if f.videoFrames, err = readVideoInput(context.Background(), f.video, f.resolution, f.newOnly, slog.Default()); err != nil {
			return nil, err
		}
		if err = f.loadEndImage(); err == nil {
			err = f.validate(nil)
		}
	case decode:
		if img, err = f.loadImages(); err != nil {
			return nil, err
		}
		err = f.validate(img)
	default:
		err = f.validateHeaders()
	}
	if err != nil {
		return nil, err
	}
	if f.crf < 0 || f.crf > 51 {
		return nil, fmt.Errorf("--crf %d: want 0–51", f.crf)
	}
	if f.output, err = checkVideoOutput(f.out, true); err != nil {
		return nil, err
	}
	if err := checkNotInput(f.output, true, f.inputs(load, jobsFile)); err != nil {
		return nil, err
	}
	if err := checkPreview(f.preview); err != nil {
		return nil, err
	}
	if err := checkLatentsOutput(f.writeLatents, f.output); err != nil {
		return nil, err
	}
	return img, nil
}

// loadImages decodes the start image, and the end image when given.
func (f *generateFlags) loadImages() (*section.RGB, error) {
	img, err := section.LoadImage(f.image)
	if err != nil {
		return nil, err
	}
	return img, f.loadEndImage()
}

// loadEndImage decodes the end image, when given.
func (f *generateFlags) loadEndImage() error {
	f.endRGB = nil
	if f.endImage != "" {
		var err error
		if f.endRGB, err = section.LoadImage(f.endImage); err != nil {
			return fmt.Errorf("--end-image: %w", err)
		}
	}
	return nil
}

// validate checks the request the flags make with the start image img.
func (f *generateFlags) validate(img *section.RGB) error {
	req := f.request(img)
	return requestError(req.Validate())
}

// validateHeaders is validate for images not decoded: their headers are
// read for their sizes.
func (f *generateFlags) validateHeaders() error {
	w, h, err := section.ImageSize(f.image)
	if err != nil {
		return err
	}
	if f.endImage != "" {
		if _, _, err := section.ImageSize(f.endImage); err != nil {
			return fmt.Errorf("--end-image: %w", err)
		}
	}
	req := f.request(nil)
	return requestError(req.ValidateSize(w, h, f.endImage != ""))
}

// requestError is a Request's error with the flags' names.
func requestError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(flagNames.Replace(strings.TrimPrefix(err.Error(), "request: ")))
}

// inputs are the files and folders a job reads, each named by its flag:
// the images, the prompts file, the model folders, the LoRAs and the jobs
// file (from load, the flags that apply to every job).
func (f *generateFlags) inputs(load *generateFlags, jobsFile string) []input {
	in := []input{{"--image", f.image}, {"--video", f.video}, {"--end-image", f.endImage}, {"--prompts-file", f.promptsPath}, {"--jobs", jobsFile}}
	if dir := modelFolder(load); dir != "" {
		in = append(in, input{"--models", dir})
	}
	for part, p := range load.parts {
		in = append(in, input{"--" + strings.ReplaceAll(part, "_", "-"), *p})
	}
	for _, lf := range load.loraFiles {
		in = append(in, input{"--lora", lf.Path})
	}
	return in
}

// parseSeed reads --seed: a whole number 0–2⁶⁴−1, or "random" or -1 for a
// random one (below 2³², short enough to type back).
func parseSeed(s string) (seed uint64, random bool, err error) {
	t := strings.TrimSpace(s)
	if t == "random" || t == "-1" {
		return uint64(rand.Uint32()), true, nil
	}
	v, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("--seed %q: want a whole number from 0 to 18446744073709551615, or random (or -1)", s)
	}
	return v, false, nil
}

// flagNames maps the request's field names in errors to the flags.
var flagNames = strings.NewReplacer("latent window size", "--window", "distilled guidance (gs)", "--gs",
	"CFG rescale (rs)", "--rs", "CFG must", "--cfg must", "seconds must", "--seconds must", "steps must", "--steps must",
	"resolution", "--resolution", "model must", "--model must", "embed interpolation", "--embed-interpolation",
	"start embed strength", "--start-embed-strength", "cache must", "--cache must", "cache threshold", "--cache-threshold",
	"MagCache K", "--magcache-k", "MagCache retention ratio", "--magcache-retention",
	"video context frames", "--video-context-frames", "the video is", "--video is")

func (f *generateFlags) request(img *section.RGB) framepack.Request {
	r := framepack.DefaultRequest()
	r.RGB = img
	r.Prompt, r.NegativePrompt = f.prompt, f.negative
	r.Seed, r.Seconds, r.Steps, r.LatentWindowSize = f.seedValue, f.seconds, f.steps, f.window
	r.CFG, r.GS, r.RS, r.TeaCache = f.cfg, f.gs, f.rs, f.teacache
	r.Cache, r.CacheThreshold, r.MagCacheK, r.MagCacheRetention = f.cache, f.cacheThreshold, f.magCacheK, f.magCacheRetention
	if f.video != "" {
		r.RGB, r.Video = nil, f.videoFrames
	}
	r.VideoContextFrames, r.VideoNewOnly = f.videoContextFrames, f.newOnly
	r.PromptBlend = f.promptBlend
	r.Resolution, r.PosteriorMean = f.resolution, f.posteriorMean
	r.Model, r.EndRGB, r.EmbedInterpolation, r.StartEmbedStrength = f.model, f.endRGB, f.embedInterp, f.startEmbed
	return r
}

// modelResolution is the resolution the model in dir was made for, the
// default of --resolution: the built-in tiny model's ("" dir: at
// FramePack's 640 its CPU run takes minutes, at 128 seconds), else the
// transformer config's (framepack.TransformerResolution). A transformer
// folder that cannot be read gives FramePack's 640: Load says what is
// wrong with it.
func (f *generateFlags) modelResolution(dir string) int {
	if dir == "" {
		return tinymodel.Resolution
	}
	tr := *f.parts[framepack.PartTransformer]
	if tr == "" {
		tr = filepath.Join(dir, framepack.PartTransformer)
	}
	res, err := framepack.TransformerResolution(tr)
	if err != nil {
		return framepack.DefaultResolution
	}
	return res
}

func runGenerate(ctx context.Context, cmd *cobra.Command, f *generateFlags, ev *events) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.jobs != "" {
		return runJobs(ctx, cmd, f, ev)
	}
	began := time.Now()
	log := slog.Default()
	dir := modelFolder(f)
	tiny := dir == ""
	if !tiny && framepack.IsHubCache(dir) {
		if err := f.useHubCache(log, dir); err != nil {
			return err
		}
	}
	at := ""
	if !cmd.Flags().Changed("resolution") {
		f.resolution = f.modelResolution(dir)
		if tiny {
			at = fmt.Sprintf(" at resolution %d", f.resolution)
		} else if f.resolution != framepack.DefaultResolution && !isFollower() {
			notice(log, fmt.Sprintf("resolution %d: what the model was made for (its transformer config's %s)", f.resolution, framepack.ResolutionKey))
		}
	}
	// Checked with the resolution the run will use (the tiny model's
	// default included), so that a bucket error names this run's bucket.
	img, err := f.check()
	if err != nil {
		return err
	}
	if f.seedRandom && !isFollower() {
		notice(log, fmt.Sprintf("seed %d (random)", f.seedValue))
	}
	if supervised, err := superviseGPUs(ctx, cmd, f.gpus, rankSeed(f)...); supervised {
		return err
	}
	if tiny {
		if err := f.checkTinyPrompts(); err != nil {
			return err
		}
		tdir, cleanup, err := tinyModel(log, at)
		if err != nil {
			return err
		}
		defer cleanup()
		dir = tdir
	}
	set, err := f.settings(dir, tiny)
	if err != nil {
		return err
	}
	ev.emit("start", map[string]any{"settings": set})

	t := time.Now()
	opts := f.loadOptions(log)
	if err := rankOptions(&opts); err != nil {
		return err
	}
	p, err := framepack.Load(dir, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	if !isFollower() {
		notice(log, "device: "+p.Device())
	}
	_, err = generateOne(ctx, cmd, p, f, img, set, began, time.Since(t), ev, nil)
	return err
}

// modelFolder is --models, else $FRAMEPACK_MODELS; "" for the tiny model.
func modelFolder(f *generateFlags) string {
	if f.models != "" {
		return f.models
	}
	return os.Getenv("FRAMEPACK_MODELS")
}

// useHubCache sets the part folders not given by flags from the hub cache
// dir (framepack.IsHubCache), for f.model's transformer, and logs where
// they are.
func (f *generateFlags) useHubCache(log *slog.Logger, dir string) error {
	parts, err := framepack.HubCacheParts(dir, f.model)
	if err != nil {
		return usage(fmt.Errorf("--models: %w", err))
	}
	repos := framepack.HubRepos(f.model)
	var from []string
	for _, part := range []string{framepack.PartTransformer, framepack.PartVAE, framepack.PartImageEncoder} {
		if *f.parts[part] == "" {
			from = append(from, fmt.Sprintf("%s@%.8s", repos[part].Repo, filepath.Base(strings.TrimSuffix(parts[part], repos[part].Subfolder))))
		}
	}
	for part, p := range f.parts {
		if *p == "" {
			*p = parts[part]
		}
	}
	notice(log, "models from the hub cache "+dir+": "+strings.Join(from, ", "))
	return nil
}

// checkTinyPrompts refuses prompts the tiny model's tokenizer cannot read.
func (f *generateFlags) checkTinyPrompts() error {
	for _, p := range []string{f.prompt, f.negative} {
		if i := strings.IndexFunc(p, func(r rune) bool { return r > unicode.MaxASCII }); i >= 0 {
			return usagef("the built-in tiny model reads ASCII prompts only (its CLIP vocabulary has 200 ids); %q is not ASCII — use --models for real weights", []rune(p[i:])[0])
		}
	}
	return nil
}

// tinyModel extracts the built-in tiny model; cleanup removes a temporary
// copy.
func tinyModel(log *slog.Logger, at string) (dir string, cleanup func(), err error) {
	tdir, temporary, err := tinymodel.Dir()
	if err != nil {
		return "", nil, err
	}
	notice(log, "no --models: the built-in tiny model runs"+at+" (random weights: the video is noise)")
	if temporary {
		untrack := atomicfile.Track(tdir)
		return tdir, func() {
			os.RemoveAll(tdir)
			untrack()
		}, nil
	}
	return tdir, func() {}, nil
}

// loadOptions are framepack.Load's options from the flags.
func (f *generateFlags) loadOptions(log *slog.Logger) framepack.Options {
	opts := framepack.Options{Device: f.device, VRAMLimit: f.vramLimit, Preserve: f.preserve, RAMLimit: f.ramLimit, LoRA: f.loraFiles, Logger: log}
	for part, p := range f.parts {
		if dst := opts.PartPath(part); dst != nil {
			*dst = *p
		}
	}
	if f.dtype != "" {
		opts.DType, _ = tensor.ParseDType(f.dtype)
	}
	opts.FP8Weights = f.weightsMode == "fp8"
	opts.FP8Compute, _ = framepack.ParseFP8Compute(f.fp8Compute)
	opts.FP8Attention = f.fp8Attention
	if f.vaeTile > 0 {
		til := vae.SpatialTiling(f.vaeTile, f.vaeTile*3/4)
		opts.VAETiling = &til
	}
	return opts
}

// generateOne runs one job on the loaded pipeline p and writes its video
// and settings file; extra goes into the result record (--jobs: the line).
func generateOne(ctx context.Context, cmd *cobra.Command, p *framepack.Pipeline, f *generateFlags, img *section.RGB,
	set *settings, began time.Time, load time.Duration, ev *events, extra map[string]any) (*framepack.Result, error) {
	log := slog.Default()
	quiet, _ := cmd.Flags().GetBool("quiet")
	quiet = quiet || isFollower()
	req, prog, sw := f.jobRequest(ctx, cmd, img, quiet, ev, log)
	res, err := p.Generate(ctx, req)
	prog.done()
	if sw != nil {
		// The last section's write is the full video's, below; one still
		// running is waited for first.
		if werr := sw.wait(); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			sw.discard()
		}
	}
	if err != nil {
		return nil, err
	}
	if isFollower() { // rank 0 writes the video
		return res, nil
	}
	set.Frames, set.FPS, set.Width, set.Height = res.T, res.FPS, res.W, res.H
	set.InputFrames = res.InputFrames
	set.Timings = newTimings(time.Since(began), load, res)
	t := time.Now()
	settingsFile, err := f.writeOutputs(ctx, res, set, sw, log)
	if err != nil {
		return nil, err
	}
	write := time.Since(t)
	fields := map[string]any{"output": f.output.path, "settings_file": settingsFile, "seed": set.Seed,
		"frames": res.T, "fps": res.FPS, "width": res.W, "height": res.H, "timings": set.Timings, "write": secs(write),
		"peak_bytes": res.PeakBytes, "loads": len(res.Loads), "input_frames": res.InputFrames}
	for k, v := range extra {
		fields[k] = v
	}
	ev.emit("result", fields)
	if !f.json && !quiet && extra == nil {
		summary(cmd.OutOrStdout(), res, f.output.path)
		if f.seedRandom {
			fmt.Fprintf(cmd.OutOrStdout(), "seed %d (random)\n", set.Seed)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "settings in %s\n", settingsFile)
	}
	return res, nil
}

// videoCRF is --crf as the video writer takes it (0: lossless).
func (f *generateFlags) videoCRF() int {
	if f.crf == 0 {
		return video.CRFZero
	}
	return f.crf
}

// jobRequest is the job's request with its progress reported (and, with
// --write-sections and --preview, the sections' video and the preview
// written as it goes: sw, nil without).
func (f *generateFlags) jobRequest(ctx context.Context, cmd *cobra.Command, img *section.RGB, quiet bool, ev *events,
	log *slog.Logger) (req framepack.Request, prog *progress, sw *sectionWriter) {
	req = f.request(img)
	prog = newProgress(cmd.ErrOrStderr(), log, quiet, ev)
	prog.forRequest(req)
	req.Progress = prog.report
	if !quiet {
		notice(log, videoLength(f.seconds, f.window))
		if s := promptSections(f.prompt, f.seconds, f.window, f.promptBlend); s != "" {
			notice(log, s)
		}
	}
	also := func(report func(framepack.Progress)) {
		before := req.Progress
		req.Progress = func(pr framepack.Progress) {
			before(pr)
			report(pr)
		}
	}
	if f.writeSections && !isFollower() {
		sw = newSectionWriter(ctx, f.output, video.Options{FPS: framepack.FPS, CRF: f.videoCRF(), Log: log}, log)
		also(sw.report)
	}
	if f.preview != "" && !isFollower() {
		also(newPreviewWriter(f.preview, log).report)
	}
	return req, prog, sw
}

// writeOutputs writes the video with the settings in its comment tag (without
// the timings: the tag is written before they are complete), the settings
// file beside it and, with --write-latents, the latents; it returns the
// settings file's path.
func (f *generateFlags) writeOutputs(ctx context.Context, res *framepack.Result, set *settings, sw *sectionWriter, log *slog.Logger) (string, error) {
	tag, err := set.CommentTag()
	if err != nil {
		return "", err
	}
	sf, err := createSettings(settingsPath(f.output.path), set)
	if err != nil {
		return "", err
	}
	if err := f.output.write(ctx, res.Frames, video.Options{FPS: res.FPS, CRF: f.videoCRF(), Log: log, Comment: tag}, log); err != nil {
		sf.discard()
		if sw != nil {
			sw.discard()
		}
		return "", err
	}
	if err := sf.commit(); err != nil {
		return "", err
	}
	if f.writeLatents != "" {
		if err := writeLatents(f.writeLatents, res, f.model); err != nil {
			return "", err
		}
	}
	return sf.path, nil
}

// videoLength says how long the video will be: --seconds rounded to whole
// sections of the window, FramePack's rule (section.NewPlan).
func videoLength(seconds float64, window int) string {
	plan, err := section.NewPlan(seconds, window)
	if err != nil {
		return ""
	}
	n := plan.VideoFrames()
	sections := "sections"
	if plan.Sections == 1 {
		sections = "section"
	}
	msg := fmt.Sprintf("video: %.2f s (%d frames, %d %s)", float64(n)/framepack.FPS, n, plan.Sections, sections)
	if math.Abs(float64(n)/framepack.FPS-seconds) >= 0.005 {
		msg += fmt.Sprintf("; --seconds %g rounds to whole sections", seconds)
	}
	return msg
}

// promptSections is a timed prompt's schedule, as Generate runs it: the
// prompt of each section in generation order (the video's end first), with
// the weights of a blend; "" for a plain prompt.
func promptSections(prompt string, seconds float64, window, blend int) string {
	spans, err := section.ParseTimedPrompt(prompt)
	if err != nil || spans == nil {
		return ""
	}
	plan, err := section.NewPlan(seconds, window)
	if err != nil {
		return ""
	}
	sched, err := section.PromptSchedule(spans, seconds, window, plan.Sections, blend)
	if err != nil {
		return ""
	}
	parts := make([]string, len(sched))
	for i, s := range sched {
		parts[i] = fmt.Sprintf("%d: %v", i+1, s)
	}
	return "prompts by section, the video's end first: " + strings.Join(parts, "; ")
}

// settings are the run's settings as the settings file records them.
func (f *generateFlags) settings(dir string, tiny bool) (*settings, error) {
	models, err := modelRefs(dir, f.parts)
	if err != nil {
		return nil, err
	}
	img := fileRef{Path: f.image}
	var vid *fileRef
	if f.video != "" {
		vid = &fileRef{Path: f.video}
		if st, err := os.Stat(f.video); err == nil && !st.IsDir() {
			if vid.SHA256, err = fileSHA256(f.video); err != nil {
				return nil, err
			}
		}
	} else if img.SHA256, err = fileSHA256(f.image); err != nil {
		return nil, err
	}
	var end *fileRef
	if f.endImage != "" {
		end = &fileRef{Path: f.endImage}
		if end.SHA256, err = fileSHA256(f.endImage); err != nil {
			return nil, err
		}
	}
	set := &settings{Framepack: readBuildVersion(), Image: img, EndImage: end, Prompt: f.prompt, Negative: f.negative,
		Seed: f.seedValue, SeedRandom: f.seedRandom, Seconds: f.seconds, Steps: f.steps, Window: f.window,
		Model: f.model, EmbedInterpolation: f.embedInterp, StartEmbedStrength: f.startEmbed,
		CFG: f.cfg, GS: f.gs, RS: f.rs, TeaCache: f.cacheChoice() == framepack.CacheTeaCache, Cache: f.cacheChoice(),
		CacheThreshold: f.cacheThreshold, Resolution: f.resolution, PosteriorMean: f.posteriorMean,
		CRF: f.crf, Device: f.device, DType: f.dtype, Weights: f.weightsMode, FP8Compute: fp8ComputeSetting(f), FP8Attention: f.fp8Attention, VRAMLimit: f.vramLimit.String(), Preserve: f.preserve.String(), VAETile: f.vaeTile, LoRA: f.loraFiles, PromptBlend: f.promptBlend,
		TinyModel: tiny, Models: models, Output: f.output.path}
	f.magCacheSettings(set)
	if vid != nil {
		set.Video, set.VideoContextFrames, set.NewOnly = vid, f.videoContextFrames, f.newOnly
	}
	return set, nil
}

// cacheChoice is the step cache the run uses (--cache, else --teacache).
func (f *generateFlags) cacheChoice() string {
	r := f.request(nil)
	return r.CacheChoice()
}

// magCacheSettings are the MagCache knobs for the settings file: set only
// with --cache magcache.
func (f *generateFlags) magCacheSettings(set *settings) {
	if f.cacheChoice() == framepack.CacheMagCache {
		k, ret := f.magCacheK, f.magCacheRetention
		set.MagCacheK, set.MagCacheRetention = &k, &ret
	}
}

// summary prints the result in a few short lines (each stage's time was
// printed as it finished).
func summary(w io.Writer, res *framepack.Result, wrote string) {
	var sample, decode time.Duration
	for _, s := range res.Sections {
		sample += s.Sample
		decode += s.Decode
	}
	fmt.Fprintf(w, "wrote %s: %d frames (%.2f s at %d fps), %d×%d\n", wrote, res.T, float64(res.T)/float64(res.FPS), res.FPS, res.W, res.H)
	if res.InputFrames > 0 {
		fmt.Fprintf(w, "the input video's %d frames, then %d new ones\n", res.InputFrames, res.T-res.InputFrames)
	}
	fmt.Fprintf(w, "generated in %s: sampling %s, decoding %s\n", dur(res.Total), dur(sample), dur(decode))
	mem := "peak memory " + memory.FormatBytes(res.PeakBytes) + " on the device"
	if rss := peakRSS(); rss > 0 {
		mem += ", peak RSS " + memory.FormatBytes(rss)
	}
	fmt.Fprintln(w, mem)
}

// peakRSS is the process's peak resident set (VmHWM; 0 where unknown).
func peakRSS() int64 {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// fp8ComputeSetting is --fp8-compute as the settings file records it: only
// with --weights fp8, where it means something.
func fp8ComputeSetting(f *generateFlags) string {
	if f.weightsMode != "fp8" {
		return ""
	}
	return f.fp8Compute
}
