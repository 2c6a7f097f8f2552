// Package framepack turns one image and a prompt into a video the way
// FramePack (lllyasviel/FramePack, demo_gradio.py) does: HunyuanVideo
// image-to-video generated section by section, last section first, each one
// conditioned on the start image and the sections already made.
//
//	p, err := framepack.Load("/models/framepack", framepack.Options{})
//	req := framepack.DefaultRequest()
//	req.Image, req.Prompt = img, "The girl dances gracefully."
//	res, err := p.Generate(ctx, req)
//	// res.Frames: T frames of H×W RGB at res.FPS
//
// The tinymodel package holds a tiny model with random weights in the real
// layout, for trying the API without the real weights (run it at
// tinymodel.Resolution); the examples use it.
//
// Load reads the model folder's configs and tokenizers and checks every
// weight's name, shape and dtype; Generate loads each
// model when its stage first needs it. When the device budget holds every
// model at once with the preserved amount free, each stays loaded after its
// stage and across Generate calls (FramePack's high-VRAM mode): a second
// Generate loads nothing. Otherwise each is freed when its stage is done
// (the text encoders after encoding, the VAE encoder and SigLIP after the
// start image), the transformer and the VAE decoder stay across sections
// when the budget holds both, and otherwise the transformer is freed
// before each decode as FramePack's low-VRAM mode does. Models move through
// a memory.Manager: each one's device bytes are charged to its part name,
// and freeing one is checked to leave 0 bytes charged to it, then trims the
// device's pools.
package framepack

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/device"
	"github.com/framepack-go/framepack/lora"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/tokenizer"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/weights"
)

// Options configure Load.
type Options struct {
	// Folders of the parts, overriding <dir>/<part>: transformer
	// (lllyasviel/FramePackI2V_HY), vae, text_encoder, text_encoder_2,
	// tokenizer, tokenizer_2 (hunyuanvideo-community/HunyuanVideo) and
	// image_encoder (lllyasviel/flux_redux_bfl).
	Transformer, VAE, TextEncoder, TextEncoder2, Tokenizer, Tokenizer2, ImageEncoder string
	// FeatureExtractor is the folder of SigLIP's preprocessor_config.json
	// (flux_redux_bfl's feature_extractor), overriding
	// <dir>/feature_extractor. It is optional: without it the image is
	// resized to the image encoder's image_size, as the released one does.
	FeatureExtractor string

	// Device is DeviceAuto (""), DeviceCPU or DeviceGPU: for auto, the GPU
	// when one opens, else the CPU with a log line saying why.
	Device string
	// DType is the compute dtype of every model (F32, BF16 or F16).
	// Invalid means F32 on the CPU and FramePack's choice on a GPU: bf16
	// for the transformer, f16 for the text encoders, SigLIP and the VAE.
	DType tensor.DType
	// FP8Weights holds the transformer's block linears as FP8 E4M3 with
	// per-channel scales (--weights fp8): an fp8 checkpoint's as stored,
	// others quantized at load.
	FP8Weights bool
	// FP8Compute (--fp8-compute), with FP8Weights, chooses whether those
	// linears quantize their inputs per token and multiply in FP8, or widen
	// the weights on the fly (weight-only).
	FP8Compute FP8Compute
	// FP8Attention (--fp8-attention) lets the transformer's attention run
	// in FP8 where the device has an engine for it (cuDNN on Hopper):
	// faster, with about 7% relative error on each attention's output
	// (tensor.AttnParams.FP8). Off by default.
	FP8Attention bool
	// VRAMLimit and Preserve are the --vram-limit and --preserve flags
	// (memory.ParseSize("20G"), memory.Bytes(20*memory.GiB),
	// memory.Fraction(0.9); unset: the device's default).
	VRAMLimit, Preserve memory.Size
	// RAMLimit is the --ram-limit flag: the host-memory budget (a size,
	// or a fraction of system memory; unset: memory.DefaultRAMLimit from
	// /proc/meminfo). It decides whether the
	// transformer's streamed blocks get a pinned copy or are read from the
	// mapped checkpoint, and it becomes the Go runtime's memory limit
	// unless GOMEMLIMIT sets one. On an integrated GPU (and the CPU) device
	// and host memory are one pool under both limits.
	RAMLimit memory.Size
	// VAETiling fixes the VAE's tiling; nil encodes untiled and plans each
	// decode's tiling from the budget (diffusers' default, FramePack's
	// high-VRAM mode, whenever it fits). vae.SpatialTiling(256, 192) is
	// FramePack's low-VRAM mode.
	VAETiling *vae.Tiling
	// TeaCacheThreshold is TeaCache's relative-L1 threshold; 0 means
	// FramePack's 0.15. Load refuses a negative or non-finite one.
	TeaCacheThreshold float32
	// LoRA lists HunyuanVideo LoRAs (diffusers/PEFT, kohya or musubi-tuner
	// safetensors) merged into the transformer's weights as it loads; Load
	// reads them and fails on one whose modules do not all match the
	// transformer.
	LoRA []lora.File
	// SequentialDecode decodes each section before the next one samples,
	// as FramePack's loop does. By default a section's decode runs beside
	// the next section's sampling when both models stay loaded and memory
	// allows (on a GPU only its host side, the soft append); the frames
	// are the same either way.
	SequentialDecode bool
	// SequentialLoads loads the transformer when the first section needs
	// it, after the encoders. By default it loads in the background beside
	// the text encoders, the VAE encode and SigLIP when every model fits
	// the device budget at once (see docs/architecture.md); the weights
	// and the video are the same either way.
	SequentialLoads bool
	// GPU is the ordinal of the GPU to open (0: the first).
	GPU int
	// Ranks joins this pipeline to the other processes of a multi-GPU
	// run, one per GPU (parallel.go); Comm does the same with a
	// communicator the caller made (localcomm.New's in-process ranks, say)
	// and keeps. Every rank loads the same model and calls Generate with
	// the same requests; rank 0 returns the frames.
	Ranks *Ranks
	Comm  tensor.Comm
	// Logger receives progress and memory lines; nil means slog.Default().
	Logger *slog.Logger
}

// PartPath is the field of o that overrides the folder of part (one of the
// Part names), nil for any other name.
func (o *Options) PartPath(part string) *string {
	return map[string]*string{
		PartTransformer: &o.Transformer, PartVAE: &o.VAE, PartTextEncoder: &o.TextEncoder,
		PartTextEncoder2: &o.TextEncoder2, PartTokenizer: &o.Tokenizer, PartTokenizer2: &o.Tokenizer2,
		PartImageEncoder: &o.ImageEncoder, PartFeatureExtractor: &o.FeatureExtractor,
	}[part]
}

// FP8Compute is Options.FP8Compute.
type FP8Compute int

const (
	// FP8ComputeAuto multiplies in FP8 where the device has FP8 tensor
	// cores (tensor.NativeFP8: NVIDIA sm_89 and later with cuBLASLt 12.9+),
	// else weight-only.
	FP8ComputeAuto FP8Compute = iota
	// FP8ComputeOn quantizes the inputs everywhere: a device without FP8
	// tensor cores (the CPU) computes the same function on widened codes.
	FP8ComputeOn
	// FP8ComputeOff is weight-only everywhere.
	FP8ComputeOff
)

// ParseFP8Compute reads "auto" (or ""), "on" or "off".
func ParseFP8Compute(s string) (FP8Compute, error) {
	switch s {
	case "", "auto":
		return FP8ComputeAuto, nil
	case "on":
		return FP8ComputeOn, nil
	case "off":
		return FP8ComputeOff, nil
	}
	return 0, fmt.Errorf("fp8 compute %q: want auto, on or off", s)
}

// Enabled tells whether FP8 compute runs on be.
func (c FP8Compute) Enabled(be tensor.Backend) bool {
	return c == FP8ComputeOn || (c == FP8ComputeAuto && tensor.NativeFP8(be))
}

// FP8Compute tells whether the transformer's block linears multiply in FP8
// on this pipeline's device (Options.FP8Weights and Options.FP8Compute).
func (p *Pipeline) FP8Compute() bool {
	if p == nil || p.be == nil {
		return false
	}
	return p.opts.FP8Weights && p.opts.FP8Compute.Enabled(p.be)
}

// Device choices for Options.Device.
const (
	DeviceAuto = device.Auto
	DeviceCPU  = device.CPU
	DeviceGPU  = device.GPU
)

// Part names, the sub-folders of a FramePack model folder.
const (
	PartTransformer  = "transformer"
	PartVAE          = "vae"
	PartTextEncoder  = "text_encoder"
	PartTextEncoder2 = "text_encoder_2"
	PartTokenizer    = "tokenizer"
	PartTokenizer2   = "tokenizer_2"
	PartImageEncoder = "image_encoder"
	// PartFeatureExtractor is optional (see Options.FeatureExtractor).
	PartFeatureExtractor = "feature_extractor"
)

// Pipeline is a loaded FramePack model. Generate runs one job at a time.
type Pipeline struct {
	log   *slog.Logger
	opts  Options
	paths map[string]string

	dev  *device.Device
	be   *memory.Backend // the budgeted compute backend every model loads on
	host tensor.Backend  // host-side work: history pixels, soft append
	gpu  bool            // be computes on a GPU: GPU dtypes and placement
	ram  *memory.Host    // the host-memory budget

	llamaTok  *tokenizer.Llama
	clipTok   *tokenizer.CLIP
	cropStart int

	dt struct{ transformer, text, image, vae tensor.DType }

	trCfg   hunyuan.Config
	lora    *lora.Set // Options.LoRA, resolved against the transformer
	vaeCfg  vae.Config
	sigSize int // the side SigLIP's processor resizes the image to
	// sigTokens is the image encoder's output tokens (CheckFit).
	sigTokens int
	// resolution is the bucket resolution the model was made for.
	resolution int
	// Weight bytes of each part in its compute dtype.
	bytes map[string]int64

	// The models, kept between Generate calls as the budget allows.
	mm    *memory.Manager
	parts map[string]*part
	job   *job // the Generate call running, told of each model load

	// The ranks of a multi-GPU run (parallel.go): every rank, and the
	// groups real CFG splits it into.
	world, cfgSeq, cfgPair tensor.Comm
	ownWorld               bool

	mu     sync.Mutex  // one Generate at a time; Close waits for it
	closed atomic.Bool // set by Close once the device is released
}

// Load opens the FramePack model in dir (the parts' folders, each
// overridable in opts), reads the tokenizers and configs, checks that the
// parts fit together and picks the device. Weights are read when Generate
// needs them.
//
// dir may also be a Hugging Face hub cache holding FramePack's downloads
// (FramePack's hf_download, ~/.cache/huggingface/hub): the parts not set in
// opts come from its snapshots (HubCacheParts), the transformer from
// lllyasviel/FramePackI2V_HY; for FramePack-F1 set opts.Transformer to
// HubCacheParts(dir, ModelF1)'s.
func Load(dir string, opts Options) (*Pipeline, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if th := float64(opts.TeaCacheThreshold); th < 0 || math.IsNaN(th) || math.IsInf(th, 0) {
		return nil, fmt.Errorf("options: TeaCacheThreshold must be a finite value ≥ 0 (0: FramePack's 0.15), have %v", th)
	}
	p := &Pipeline{log: log, opts: opts, paths: map[string]string{}, bytes: map[string]int64{}}
	if dir != "" && IsHubCache(dir) {
		// The parts not given in opts, from the hub cache's snapshots.
		set := map[string]bool{}
		for _, part := range []string{PartTransformer, PartVAE, PartTextEncoder, PartTextEncoder2, PartTokenizer, PartTokenizer2, PartImageEncoder, PartFeatureExtractor} {
			set[part] = *opts.PartPath(part) != ""
		}
		hub, err := hubCacheParts(dir, ModelFramePack, set)
		if err != nil {
			return nil, err
		}
		for part, path := range hub {
			*opts.PartPath(part) = path
		}
		p.opts = opts
		dir = ""
	}
	for _, part := range []string{PartTransformer, PartVAE, PartTextEncoder, PartTextEncoder2, PartTokenizer, PartTokenizer2, PartImageEncoder} {
		path := *opts.PartPath(part)
		if path == "" {
			if dir == "" {
				return nil, fmt.Errorf("no model folder and no path for the %s", part)
			}
			path = filepath.Join(dir, part)
		}
		st, err := os.Stat(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("model part %s: %s does not exist", part, path)
			}
			return nil, fmt.Errorf("model part %s: %w", part, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("model part %s: %s is not a folder", part, path)
		}
		p.paths[part] = path
	}
	// The feature extractor is optional.
	if path := opts.FeatureExtractor; path != "" {
		if st, err := os.Stat(path); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("model part %s: %s is not a folder", PartFeatureExtractor, path)
		}
		p.paths[PartFeatureExtractor] = path
	} else if dir != "" {
		if st, err := os.Stat(filepath.Join(dir, PartFeatureExtractor)); err == nil && st.IsDir() {
			p.paths[PartFeatureExtractor] = filepath.Join(dir, PartFeatureExtractor)
		}
	}

	var err error
	if p.llamaTok, err = tokenizer.LoadLlama(p.paths[PartTokenizer]); err != nil {
		return nil, err
	}
	if p.clipTok, err = tokenizer.LoadCLIP(p.paths[PartTokenizer2]); err != nil {
		return nil, err
	}
	if p.cropStart, err = section.CropStart(p.llamaTok); err != nil {
		return nil, err
	}
	if err := p.readConfigs(); err != nil {
		return nil, err
	}
	if len(opts.LoRA) > 0 {
		// Merged into the weights as they are built; with FP8 weights the
		// FP8 linears' LoRAs are added at run time instead (hunyuan).
		plan, err := hunyuan.Plan(p.trCfg)
		if err != nil {
			return nil, err
		}
		if p.lora, err = lora.Resolve(opts.LoRA, plan); err != nil {
			return nil, err
		}
		log.Info(fmt.Sprintf("LoRA: %d files change %d transformer weights", len(opts.LoRA), p.lora.Len()))
	}

	if p.ram, err = memory.HostFor("/", opts.RAMLimit); err != nil {
		return nil, err
	}
	if p.dev, err = device.Open(device.Options{Choice: opts.Device, Ordinal: opts.GPU, VRAMLimit: opts.VRAMLimit, Preserve: opts.Preserve, Log: log}); err != nil {
		return nil, err
	}
	p.be, p.host, p.gpu = p.dev.Backend, p.dev.CPU, p.dev.IsGPU()
	if err := p.joinRanks(); err != nil {
		p.dev.Close()
		return nil, err
	}
	p.useHostBudget()
	if err := p.chooseDTypes(); err != nil {
		p.closeRanks()
		p.dev.Close()
		return nil, err
	}
	if opts.FP8Attention && !tensor.NativeFP8(p.be) {
		log.Warn("FP8 attention: this device has no FP8 attention engine (cuDNN's, on Hopper and newer); the attention runs in " + p.dt.transformer.String())
	}
	if err := p.measure(); err != nil {
		p.closeRanks()
		p.dev.Close()
		return nil, err
	}
	log.Info(fmt.Sprintf("model: transformer %s (%s), text encoders %s + %s (%s), image encoder %s (%s), vae %s (%s); prompt template %d tokens",
		memory.FormatBytes(p.bytes[PartTransformer]), p.dt.transformer,
		memory.FormatBytes(p.bytes[PartTextEncoder]), memory.FormatBytes(p.bytes[PartTextEncoder2]), p.dt.text,
		memory.FormatBytes(p.bytes[PartImageEncoder]), p.dt.image,
		memory.FormatBytes(p.bytes[PartVAE]), p.dt.vae, p.cropStart))
	// A budget that the smallest plan does not fit is refused now, not
	// after the encoders ran.
	if err := p.checkBudgets(); err != nil {
		p.closeRanks()
		p.dev.Close()
		return nil, err
	}
	return p, nil
}

// useHostBudget joins the device budget to the host budget where they are
// the same memory (an integrated GPU, the CPU), logs it, and hands the
// limit to the Go runtime, whose heap would otherwise grow to twice what
// is live before collecting: a model's worth of garbage on the CPU.
func (p *Pipeline) useHostBudget() {
	if !p.gpu || p.be.Budget().Integrated {
		p.ram.Unify(p.be)
	}
	if lim := p.ram.Limit(); lim > 0 {
		if cur := debug.SetMemoryLimit(-1); cur == math.MaxInt64 || cur == goMemLimit.Load() {
			debug.SetMemoryLimit(lim)
			goMemLimit.Store(lim)
		}
	}
	p.log.Info("memory: " + p.ram.Stats().String())
}

// goMemLimit is the Go memory limit a Pipeline set, so that a later
// Pipeline may replace it but never one set by GOMEMLIMIT or the program.
var goMemLimit atomic.Int64

// HostStats is the host-memory budget's accounting now, with the process's
// resident set.
func (p *Pipeline) HostStats() memory.HostStats {
	if p == nil || p.ram == nil {
		return memory.HostStats{}
	}
	return p.ram.Stats()
}

// Close unloads every model and releases the device, logging first the
// conv3d chain's one line per tier (how many convolutions each tier ran,
// and how long). Closing twice, or closing a nil or zero Pipeline, does
// nothing.
//
// After Close, Generate returns an error and the methods without one
// return zero values (Device "", a zero Budget and Stats, CropStart 0); so
// do a nil *Pipeline and a Pipeline not made by Load.
func (p *Pipeline) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dev != nil && !p.closed.Load() {
		if err := p.unloadAll(); err != nil {
			p.log.Warn("closing: " + err.Error())
		}
		// The GPU's chain, or the CPU's when conv3d faults are injected.
		convchain.LogSummary(p.be)
		p.closeRanks()
		p.dev.Close()
		p.closed.Store(true)
	}
}

// Device describes the compute device: "NVIDIA H100 80GB HBM3 (sm_90),
// GEMM through cuBLAS …" or "CPU (16 threads, GEMM through openblas …)";
// "" once closed.
func (p *Pipeline) Device() string {
	if !p.open() {
		return ""
	}
	return p.dev.Name
}

// Budget is the memory budget in force on the compute device; zero once
// closed.
func (p *Pipeline) Budget() memory.Budget {
	if !p.open() {
		return memory.Budget{}
	}
	return p.be.Budget()
}

// MemoryStats is the compute device's accounting now (peak since Load);
// zero once closed.
func (p *Pipeline) MemoryStats() memory.Stats {
	if !p.open() {
		return memory.Stats{}
	}
	return p.be.Stats()
}

// CropStart is the number of template tokens before the prompt (95 with
// the real LLaMA-3 tokenizer); 0 once closed.
func (p *Pipeline) CropStart() int {
	if !p.open() {
		return 0
	}
	return p.cropStart
}

// open reports whether p was made by Load and is not closed. It does not
// take the lock: Progress callbacks call these methods during Generate.
func (p *Pipeline) open() bool {
	return p != nil && p.dev != nil && p.be != nil && !p.closed.Load()
}

// readConfigs reads and checks every part's config as the part's loader
// does, checks from the file headers that each checkpoint holds every
// weight its model reads (present, with its shape, in a float dtype), and
// checks that the parts fit together — all before any device work.
func (p *Pipeline) readConfigs() error {
	check := func(part string, readConfig func(dir string) error, plan func() ([]weights.Spec, error)) error {
		ck, err := weights.Open(p.paths[part])
		if err != nil {
			return fmt.Errorf("model part %s: %w", part, err)
		}
		defer ck.Close()
		if err := readConfig(ck.Dir()); err != nil {
			return fmt.Errorf("model part %s: %w", part, err)
		}
		specs, err := plan()
		if err != nil {
			return fmt.Errorf("model part %s: %w", part, err)
		}
		if err := ck.Check(specs); err != nil {
			return fmt.Errorf("model part %s: %w", part, err)
		}
		return nil
	}
	var lc llama.Config
	var cc clip.Config
	var sc siglip.Config
	for _, c := range []struct {
		part string
		read func(string) error
		plan func() ([]weights.Spec, error)
	}{
		{PartTransformer, func(d string) (err error) { p.trCfg, err = hunyuan.ReadConfig(d); return }, func() ([]weights.Spec, error) { return hunyuan.Plan(p.trCfg) }},
		{PartVAE, func(d string) (err error) { p.vaeCfg, err = vae.ReadConfig(d); return }, func() ([]weights.Spec, error) { return vae.Plan(p.vaeCfg) }},
		{PartTextEncoder, func(d string) (err error) { lc, err = llama.ReadConfig(d); return }, func() ([]weights.Spec, error) { return llama.Plan(lc) }},
		{PartTextEncoder2, func(d string) (err error) { cc, err = clip.ReadConfig(d); return }, func() ([]weights.Spec, error) { return clip.Plan(cc) }},
		{PartImageEncoder, func(d string) (err error) { sc, err = siglip.ReadConfig(d); return }, func() ([]weights.Spec, error) { return siglip.Plan(sc) }},
	} {
		if err := check(c.part, c.read, c.plan); err != nil {
			return err
		}
	}
	p.sigSize, p.sigTokens = sc.ImageSize, sc.Tokens()
	var err error
	if p.resolution, err = TransformerResolution(p.paths[PartTransformer]); err != nil {
		return fmt.Errorf("model part %s: %w", PartTransformer, err)
	}
	if fe := p.paths[PartFeatureExtractor]; fe != "" {
		size, err := section.ReadSigLIPProcessor(fe)
		if err != nil {
			return fmt.Errorf("model part %s: %w", PartFeatureExtractor, err)
		}
		if size/sc.PatchSize != sc.PatchesPerSide() {
			return fmt.Errorf("model part %s: images resized to %d give %d patches a side, but the image encoder (image_size %d, patch_size %d) has %d",
				PartFeatureExtractor, size, size/sc.PatchSize, sc.ImageSize, sc.PatchSize, sc.PatchesPerSide())
		}
		p.sigSize = size
	}
	tc := p.trCfg
	switch {
	case !tc.HasImageProj || !tc.HasCleanXEmbedder:
		return fmt.Errorf("model part transformer: not a FramePack transformer (has_image_proj %v, has_clean_x_embedder %v)", tc.HasImageProj, tc.HasCleanXEmbedder)
	case lc.HiddenSize != tc.TextEmbedDim:
		return fmt.Errorf("the text encoder's hidden size %d is not the transformer's text_embed_dim %d", lc.HiddenSize, tc.TextEmbedDim)
	case cc.HiddenSize != tc.PooledProjectionDim:
		return fmt.Errorf("text_encoder_2's hidden size %d is not the transformer's pooled_projection_dim %d", cc.HiddenSize, tc.PooledProjectionDim)
	case sc.HiddenSize != tc.ImageProjDim:
		return fmt.Errorf("the image encoder's hidden size %d is not the transformer's image_proj_dim %d", sc.HiddenSize, tc.ImageProjDim)
	case p.vaeCfg.LatentChannels != tc.InChannels || tc.InChannels != 16:
		return fmt.Errorf("the VAE's %d latent channels do not match the transformer's %d (FramePack needs 16)", p.vaeCfg.LatentChannels, tc.InChannels)
	case lc.NumHiddenLayers+1+section.LlamaHiddenState < 1:
		return fmt.Errorf("the text encoder has %d layers; FramePack takes hidden_states[-3]", lc.NumHiddenLayers)
	}
	return nil
}

// chooseDTypes applies Options.DType or the device's defaults.
func (p *Pipeline) chooseDTypes() error {
	dt := p.opts.DType
	switch dt {
	case tensor.Invalid:
		if p.gpu {
			p.dt.transformer, p.dt.text, p.dt.image, p.dt.vae = tensor.BF16, tensor.F16, tensor.F16, tensor.F16
		} else {
			p.dt.transformer, p.dt.text, p.dt.image, p.dt.vae = tensor.F32, tensor.F32, tensor.F32, tensor.F32
		}
	case tensor.F32, tensor.BF16, tensor.F16:
		p.dt.transformer, p.dt.text, p.dt.image, p.dt.vae = dt, dt, dt, dt
	default:
		return fmt.Errorf("compute dtype %s: want f32, bf16 or f16", dt)
	}
	return nil
}

// measure records each part's weight bytes in its compute dtype, from the
// checkpoints' headers.
func (p *Pipeline) measure() error {
	for part, dt := range map[string]tensor.DType{
		PartTransformer: p.dt.transformer, PartVAE: p.dt.vae, PartTextEncoder: p.dt.text,
		PartTextEncoder2: p.dt.text, PartImageEncoder: p.dt.image,
	} {
		ck, err := weights.Open(p.paths[part])
		if err != nil {
			return fmt.Errorf("model part %s: %w", part, err)
		}
		var n int64
		for _, name := range ck.Names() {
			_, shape, err := ck.Info(name)
			if err != nil {
				ck.Close()
				return fmt.Errorf("model part %s: %w", part, err)
			}
			n += int64(tensor.Numel(shape)) * int64(dt.Size())
		}
		ck.Close()
		if part == PartTransformer && p.opts.FP8Weights {
			// The block linears as codes and scales: about 5/8 of the bf16 size.
			if n, err = hunyuan.WeightBytes(p.trCfg, hunyuan.Options{DType: dt, FP8: true}); err != nil {
				return fmt.Errorf("model part %s: %w", part, err)
			}
		}
		p.bytes[part] = n
	}
	return nil
}
