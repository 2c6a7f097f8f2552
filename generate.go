package framepack

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
)

// Generate makes a video from req, following FramePack's worker() stage by
// stage: text encoding, bucket crop, VAE encode of the start image, SigLIP,
// then the sections (last in time first), each sampled, prepended to the
// history latents and decoded, its pixels soft-appended before the video
// so far. With Request.Model ModelF1 the sections run forward, as
// FramePack-F1's worker() does: appended to the history, soft-appended
// after the video. An end image conditions the first section generated.
// Cancelling ctx stops before the next sampler step, decode tile or stage,
// and kills a conv3d algorithm search at once, and returns an error
// wrapping ctx.Err(); after a failure nothing is kept loaded. A NaN or
// Inf in what a stage hands on (embeddings, latents, pixels) fails the job
// with an error naming that stage, rather than making a black video.
//
// Every model goes on and off the device through a memory.Manager: its
// device bytes are charged to its part name (text_encoder, text_encoder_2,
// image_encoder, vae, transformer; the memory log lines show each one's
// holding), and taking it off is a complete unload — its owner checked to
// hold 0 bytes, an error otherwise — followed by a trim of the device's
// pools.
func (p *Pipeline) Generate(ctx context.Context, req Request) (res *Result, err error) {
	if p == nil {
		return nil, errors.New("framepack: Generate on a nil Pipeline (make one with Load)")
	}
	if ctx == nil {
		return nil, errors.New("framepack: Generate needs a context (nil given; use context.Background())")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.open() {
		return nil, errors.New("framepack: the pipeline is closed or was not made by Load")
	}
	img, err := req.validate()
	if err != nil {
		return nil, err
	}
	p.checkResolution(req)
	j := p.newJob(ctx, req)
	p.job = j
	// Cancelling ctx kills a conv3d algorithm search at once.
	defer convchain.Bind(p.be, ctx)()
	defer func() {
		// A background load ends before anything is unloaded.
		if jerr := j.joinEarly(); jerr != nil && err == nil {
			res, err = nil, jerr
		}
		p.job = nil
		// The models stay loaded for the next call when they all fit;
		// after a failure nothing stays.
		if j.keepAll && err == nil {
			return
		}
		if uerr := p.unloadAll(); uerr != nil && err == nil {
			res, err = nil, uerr
		}
	}()
	t0 := time.Now()
	p.be.ResetPeak()
	if err := j.run(img); err != nil {
		return nil, err
	}
	j.res.Total = time.Since(t0)
	j.res.PeakBytes = max(j.peak, p.be.Stats().Peak)
	return j.res, nil
}

// job is one Generate call's state.
type job struct {
	p   *Pipeline
	req Request
	ctx context.Context
	res *Result

	mm      *memory.Manager  // p.mm: places the models on p.be
	parts   map[string]*part // p.parts: the models, by part name
	cur     string           // the stage being timed, for ModelLoad.Stage
	peak    int64            // the device's peak before the last ResetPeak
	keepAll bool             // p.keepAll(): every model stays loaded

	sched   []section.SectionPrompt   // a timed prompt's schedule, by section; nil: one prompt
	prompts map[string]section.Prompt // every prompt encoded, by text

	loadsMu sync.Mutex // res.Loads: a background load reports from its goroutine
	early   *earlyLoad // the transformer loading beside the encoders, until joined
}

// loaded records a model load in the result.
func (j *job) loaded(l ModelLoad) {
	j.loadsMu.Lock()
	j.res.Loads = append(j.res.Loads, l)
	j.loadsMu.Unlock()
}

func (p *Pipeline) newJob(ctx context.Context, req Request) *job {
	p.manager()
	return &job{p: p, req: req, ctx: ctx, res: &Result{FPS: FPS}, mm: p.mm, parts: p.parts, keepAll: p.keepAll()}
}

func (j *job) progress(pr Progress) {
	if j.req.Progress != nil {
		j.req.Progress(pr)
	}
}

// stage checks for cancellation and reports the stage.
func (j *job) stage(name string) error {
	if err := j.ctx.Err(); err != nil {
		return fmt.Errorf("framepack: cancelled before %s: %w", name, err)
	}
	j.cur = name
	j.progress(Progress{Stage: name})
	return nil
}

func (j *job) memory(stage string) {
	j.p.log.Debug("memory: " + stage + ": " + j.p.be.Stats().String() + "; " + j.p.ram.Stats().String())
}

// placeFor is the backend a part runs on: the device, or the host CPU when
// its weights (with room for activations) exceed what the device budget
// has free.
func (j *job) placeFor(part string) tensor.Backend {
	p := j.p
	if pt := j.parts[part]; pt.m != nil {
		return pt.be // kept loaded
	}
	need := p.bytes[part] + p.bytes[part]/8 + 256*memory.MiB
	if p.gpu && need > p.be.Available() {
		p.log.Warn(fmt.Sprintf("memory: %s needs about %s (%s of weights and room to compute), more than the %s free on the device; running it on the CPU",
			part, memory.FormatBytes(need), memory.FormatBytes(p.bytes[part]), memory.FormatBytes(p.be.Available())), "part", part)
		if p.bytes[part] > p.ram.Available() {
			p.log.Warn(fmt.Sprintf("memory: %s's %s of weights are more than the %s left in the host budget; loading it anyway (raise --ram-limit if the system starts swapping)",
				part, memory.FormatBytes(p.bytes[part]), memory.FormatBytes(p.ram.Available())), "part", part)
		}
		return p.host
	}
	return p.be
}

func (j *job) run(img *section.RGB) error {
	p, req := j.p, j.req
	j.loadEarly()

	// Text: LLaMA (templated, hidden_states[-3]) and CLIP (pooled), the
	// negative prompt only for real CFG.
	if err := j.stage(StageTextEncode); err != nil {
		return err
	}
	t := time.Now()
	prompts, err := j.promptSchedule()
	if err != nil {
		return err
	}
	enc, neg, err := j.encodeText(prompts)
	if err != nil {
		return err
	}
	pos := enc[0]
	j.prompts = map[string]section.Prompt{}
	for i, pr := range prompts {
		j.prompts[pr] = enc[i]
	}
	j.res.TextEncode = time.Since(t)
	p.log.Info(fmt.Sprintf("text: %d prompt tokens encoded in %s", pos.Tokens, j.res.TextEncode.Round(time.Millisecond)))

	// The start image, cropped to its bucket.
	crop, err := section.CropToBucket(img, req.Resolution)
	if err != nil {
		return fmt.Errorf("framepack: cropping the image: %w", err)
	}
	bw, bh := crop.W, crop.H
	j.res.Width, j.res.Height = bw, bh
	if len(req.Video) > 0 {
		return j.runVideo(pos, neg, bh, bw)
	}
	p.log.Info(fmt.Sprintf("image: %d×%d → bucket %d×%d (resolution %d)", img.W, img.H, bw, bh, req.Resolution))
	crops := []*section.RGB{crop}
	if end, _ := req.endFrame(); end != nil {
		// The end frame goes to the start image's bucket.
		ecrop, err := section.ResizeAndCenterCrop(end, bw, bh)
		if err != nil {
			return fmt.Errorf("framepack: cropping the end image: %w", err)
		}
		crops = append(crops, ecrop)
	}

	lat, err := j.encodeStage(StageVAEEncode, &j.res.VAEEncode, j.encodeImage, crops)
	if err != nil {
		return err
	}
	emb, err := j.encodeStage(StageImageEncode, &j.res.ImageEncode, j.encodeSigLIP, crops)
	if err != nil {
		return err
	}

	return j.sections(images{start: lat[0], image: emb[0], end: at(lat, 1), endImage: at(emb, 1)}, pos, neg, bh/8, bw/8)
}

// encodeStage enters stage, encodes the crops and keeps the time it took
// in d.
func (j *job) encodeStage(stage string, d *time.Duration, encode func(...*section.RGB) ([]*tensor.Tensor, error), crops []*section.RGB) ([]*tensor.Tensor, error) {
	if err := j.stage(stage); err != nil {
		return nil, err
	}
	t := time.Now()
	out, err := encode(crops...)
	if err != nil {
		return nil, err
	}
	*d = time.Since(t)
	return out, nil
}

// images are the encoded start image and, when given, end image.
type images struct {
	start, image  *tensor.Tensor // VAE latent, SigLIP embedding
	end, endImage *tensor.Tensor // nil without an end image
	// video is the latents of a video to extend (start is its last);
	// nil for an image.
	video *tensor.Tensor
}

func at(ts []*tensor.Tensor, i int) *tensor.Tensor {
	if i < len(ts) {
		return ts[i]
	}
	return nil
}

// encodeText runs the two text encoders, each loaded for this stage only.
func (j *job) encodeText(prompts []string) (enc []section.Prompt, neg section.Prompt, err error) {
	p, req := j.p, j.req
	realCFG := req.CFG != 1
	enc = make([]section.Prompt, len(prompts))
	pos := &enc[0]

	be := j.placeFor(PartTextEncoder)
	lm, err := load(j, PartTextEncoder, be, func(be tensor.Backend, _ bool) (*llama.Model, error) {
		return llama.Load(p.paths[PartTextEncoder], be, p.dt.text)
	})
	if err != nil {
		return enc, neg, fmt.Errorf("framepack: loading the text encoder: %w", err)
	}
	j.memory("text encoder loaded (" + memory.FormatBytes(lm.Bytes()) + ")")
	s := tensor.NewScope(be)
	for i := 0; i < len(prompts) && err == nil; i++ {
		err = section.EncodeLlama(s, lm, p.llamaTok, p.cropStart, prompts[i], &enc[i])
	}
	if err == nil && realCFG {
		err = section.EncodeLlama(s, lm, p.llamaTok, p.cropStart, req.NegativePrompt, &neg)
	}
	s.Close()
	if uerr := j.release(PartTextEncoder); err == nil {
		err = uerr
	}
	if err != nil {
		return enc, neg, fmt.Errorf("framepack: %w", err)
	}

	be = j.placeFor(PartTextEncoder2)
	cm, err := load(j, PartTextEncoder2, be, func(be tensor.Backend, _ bool) (*clip.Model, error) {
		return clip.Load(p.paths[PartTextEncoder2], be, p.dt.text)
	})
	if err != nil {
		return enc, neg, fmt.Errorf("framepack: loading text_encoder_2: %w", err)
	}
	j.memory("text_encoder_2 loaded (" + memory.FormatBytes(cm.Bytes()) + ")")
	s = tensor.NewScope(be)
	for i := 0; i < len(prompts) && err == nil; i++ {
		err = section.EncodeCLIP(s, cm, p.clipTok, prompts[i], &enc[i])
	}
	if err == nil && realCFG {
		err = section.EncodeCLIP(s, cm, p.clipTok, req.NegativePrompt, &neg)
	}
	s.Close()
	if uerr := j.release(PartTextEncoder2); err == nil {
		err = uerr
	}
	if err != nil {
		return enc, neg, fmt.Errorf("framepack: %w", err)
	}
	if !realCFG {
		neg = pos.ZerosLike()
	}
	for i := range enc[1:] {
		for _, v := range [][]float32{enc[i+1].Embeds, enc[i+1].Pooled} {
			if err := tensor.NonFiniteError(fmt.Sprintf("framepack: text encode produced non-finite values for prompt %q", prompts[i+1]), tensor.FromFloat32(v, len(v))); err != nil {
				return enc, neg, err
			}
		}
	}
	j.memory("text encoders unloaded")
	for _, c := range []struct {
		what string
		v    []float32
	}{{"the text encoder's prompt embeddings", pos.Embeds}, {"text_encoder_2's pooled prompt", pos.Pooled},
		{"the text encoder's negative prompt embeddings", neg.Embeds}, {"text_encoder_2's pooled negative prompt", neg.Pooled}} {
		if len(c.v) > 0 {
			if err := tensor.NonFiniteError("framepack: text encode produced non-finite values in "+c.what, tensor.FromFloat32(c.v, len(c.v))); err != nil {
				return enc, neg, err
			}
		}
	}
	return enc, neg, nil
}

// encodeImage is FramePack's vae_encode of each cropped image in turn (the
// posterior sampled from one generator seeded with the seed, or its mean):
// (1, 16, 1, h, w) f32 on the host.
func (j *job) encodeImage(crops ...*section.RGB) ([]*tensor.Tensor, error) {
	p := j.p
	be := j.placeFor(PartVAE)
	v, err := load(j, PartVAE, be, func(be tensor.Backend, _ bool) (*vae.VAE, error) {
		return vae.Load(p.paths[PartVAE], be, vae.Options{DType: p.dt.vae, NoDecoder: !j.keepAll})
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the VAE encoder: %w", err)
	}
	j.memory("vae encoder loaded (" + memory.FormatBytes(v.WeightBytes()) + ")")
	// A fixed tiling applies to the encode too, as FramePack's low-VRAM
	// mode (enable_tiling) tiles both.
	til := vae.DefaultTiling()
	if p.opts.VAETiling != nil {
		til = *p.opts.VAETiling
	}
	var rng vae.Randn
	if !j.req.PosteriorMean {
		rng = sampler.NewTorchGenerator(j.req.Seed)
	}
	s := tensor.NewScope(be)
	out := make([]*tensor.Tensor, len(crops))
	err = tensor.Catch(func() {
		for i, c := range crops {
			out[i] = section.VAEEncode(s, v, c, til, rng)
		}
	})
	s.Close()
	if err != nil {
		return nil, fmt.Errorf("framepack: VAE encode: %w", err)
	}
	if err := j.release(PartVAE); err != nil {
		return nil, err
	}
	for i, t := range out {
		if err := tensor.NonFiniteError("framepack: vae encode produced non-finite "+[]string{"start", "end"}[i]+" latents", t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encodeSigLIP is hf_clip_vision_encode: SigLIP's last hidden state of each
// cropped image, (1, patches, hidden) on the host.
func (j *job) encodeSigLIP(crops ...*section.RGB) ([]*tensor.Tensor, error) {
	p := j.p
	be := j.placeFor(PartImageEncoder)
	m, err := load(j, PartImageEncoder, be, func(be tensor.Backend, _ bool) (*siglip.Model, error) {
		return siglip.Load(p.paths[PartImageEncoder], be, p.dt.image)
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the image encoder: %w", err)
	}
	j.memory("image encoder loaded (" + memory.FormatBytes(m.Bytes()) + ")")
	out := make([]*tensor.Tensor, len(crops))
	for i, crop := range crops {
		px, err := section.SigLIPPixels(crop, p.sigSize)
		if err != nil {
			return nil, fmt.Errorf("framepack: image encoder preprocessing: %w", err)
		}
		s := tensor.NewScope(be)
		err = tensor.Catch(func() { out[i] = hostCopy(m.Forward(s, px)) })
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("framepack: image encoder: %w", err)
		}
		if err := tensor.NonFiniteError("framepack: image encode produced non-finite embeddings", out[i]); err != nil {
			return nil, err
		}
	}
	return out, j.release(PartImageEncoder)
}

// hostCopy is t as a host f32 tensor that owns its memory (so it outlives
// the scope t was made in).
func hostCopy(t *tensor.Tensor) *tensor.Tensor {
	v := tensor.Float32s(t)
	if t.OnHost() && t.DType() == tensor.F32 {
		v = append([]float32(nil), v...)
	}
	return tensor.FromFloat32(v, t.Shape()...)
}

// keepLoaded is whether the transformer (as loaded) and the VAE decoder
// stay on the device across sections with the preserved amount still free
// (FramePack's high-VRAM mode, where every model stays on the GPU).
// Otherwise the transformer is unloaded before each decode and loaded
// again for the next section (its low-VRAM mode, unload_complete_models
// before vae_decode), so that nothing of it stays beside the decode.
func (j *job) keepLoaded(tr *hunyuan.Model) bool {
	p := j.p
	dev, _ := tr.WeightBytes()
	return dev+p.bytes[PartVAE]+p.be.Budget().Preserve <= p.be.Budget().Cap
}

// loadTransformer loads the transformer unless it is loaded. On a GPU the
// Manager places it as FramePack does: resident when it fits with the
// preserved amount free, else with its blocks in host memory, streamed to
// the device block by block (DynamicSwap). On the CPU, host memory is the
// device and streaming saves nothing: it is loaded whole.
func (j *job) loadTransformer() (*hunyuan.Model, error) {
	if err := j.joinEarly(); err != nil {
		return nil, err
	}
	if m := loaded[*hunyuan.Model](j, PartTransformer); m != nil {
		return m, nil
	}
	p := j.p
	t := time.Now()
	j.setTransformerBuild()
	var err error
	if p.gpu {
		err = j.mm.LoadPreserving(PartTransformer)
	} else {
		err = j.mm.Load(PartTransformer)
	}
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the transformer: %w", err)
	}
	m := loaded[*hunyuan.Model](j, PartTransformer)
	dev, host := m.WeightBytes()
	how := "resident"
	if j.mm.State(PartTransformer) == memory.Streamed {
		how = "blocks streamed from host memory"
		if m.StreamsFromFile() {
			how = "blocks streamed from the mapped checkpoint"
		}
	}
	j.memory(fmt.Sprintf("transformer loaded in %s (%s on the device, %s on the host; %s)",
		time.Since(t).Round(time.Millisecond), memory.FormatBytes(dev), memory.FormatBytes(host), how))
	return m, nil
}

// setTransformerBuild makes the transformer's part build it on the device
// (its time counted in no stage).
func (j *job) setTransformerBuild() {
	p := j.p
	pt := j.parts[PartTransformer]
	pt.be, pt.stage = p.be, ""
	pt.build = func(be tensor.Backend, streamed bool) (closer, error) {
		opts := hunyuan.Options{DType: p.dt.transformer, HostBlocks: streamed, LoRA: p.lora, FP8: p.opts.FP8Weights,
			FP8Compute: p.FP8Compute(), FP8Attention: p.opts.FP8Attention}
		if streamed {
			opts.StreamFromFile = j.streamFromFile()
		}
		return hunyuan.Load(p.paths[PartTransformer], be, opts)
	}
}

// earlyLoad is the transformer loading beside the encoders.
type earlyLoad struct {
	wait func() error
}

// loadEarly starts loading the transformer in the background, beside the
// text encoders, the VAE encode and SigLIP, when the planner allows it: a
// discrete device (on the CPU the load would take the encoders' cores),
// every model fitting the budget at once with the preserved amount free
// (so it is placed resident, as it would be after them, and nothing is
// evicted), and room now for it beside the models still to load and the
// preserved amount (memory.Manager.LoadAsync). Otherwise it loads when the
// first section needs it, as before.
func (j *job) loadEarly() {
	p := j.p
	if p.opts.SequentialLoads || !j.keepAll || tensor.IsHostBacked(p.be) || j.parts[PartTransformer].m != nil {
		return
	}
	reserve := max(p.be.Budget().Preserve, 256*memory.MiB)
	for _, name := range []string{PartTextEncoder, PartTextEncoder2, PartImageEncoder, PartVAE} {
		if j.parts[name].m == nil {
			reserve += p.bytes[name]
		}
	}
	j.setTransformerBuild()
	wait, ok := j.mm.LoadAsync(PartTransformer, reserve)
	if !ok {
		p.log.Debug("memory: the transformer does not fit beside the other models now; it loads before the first section")
		return
	}
	j.early = &earlyLoad{wait: wait}
}

// joinEarly waits for the transformer's background load, if one runs,
// and records how long the job waited for it. A load that ran out of
// memory is not an error: the transformer loads again, as the Manager
// places it.
func (j *job) joinEarly() error {
	e := j.early
	if e == nil {
		return nil
	}
	j.early = nil
	t := time.Now()
	err := e.wait()
	waited := time.Since(t)
	j.loadsMu.Lock()
	for i := range j.res.Loads {
		if l := &j.res.Loads[i]; l.Part == PartTransformer && !l.Overlapped {
			l.Overlapped, l.Wait = true, waited
		}
	}
	j.loadsMu.Unlock()
	if err != nil && errors.Is(err, tensor.ErrOutOfMemory) {
		j.p.log.Warn("memory: loading the transformer beside the encoders ran out of memory; loading it again now", "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("framepack: loading the transformer: %w", err)
	}
	return nil
}

// streamFromFile plans where the streamed blocks are read from: a pinned
// copy when what does not stay on the device fits the host budget, else
// the mapped checkpoint (memory.Host.PlanStream).
func (j *job) streamFromFile() bool {
	p := j.p
	streamed := p.bytes[PartTransformer] - max(0, p.be.Available()-p.be.Budget().Preserve)
	src, why := p.ram.PlanStream(PartTransformer, streamed)
	p.log.Info("memory: transformer blocks stream from " + src.String() + ": " + why)
	return src == memory.StreamMapped
}

func (j *job) loadDecoder() (*vae.VAE, error) {
	p := j.p
	fresh := loaded[*vae.VAE](j, PartVAE) == nil
	v, err := load(j, PartVAE, p.be, func(be tensor.Backend, _ bool) (*vae.VAE, error) {
		return vae.Load(p.paths[PartVAE], be, vae.Options{DType: p.dt.vae, NoEncoder: true})
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the VAE decoder: %w", err)
	}
	if fresh {
		j.memory("vae decoder loaded (" + memory.FormatBytes(v.WeightBytes()) + ")")
	}
	return v, nil
}

// sectionLoop is the state FramePack's section loop (demo_gradio.py worker())
// carries from one section to the next.
type sectionLoop struct {
	seq     tensor.Comm // the sequence-parallel group, or nil
	plan    section.Plan
	start   *tensor.Tensor       // the start image's latent
	image   *tensor.Tensor       // SigLIP's image embedding
	end     *tensor.Tensor       // the end image's latent, or nil
	endImg  *tensor.Tensor       // the end image's SigLIP embedding, or nil
	pos     section.Text         // the prompt's conditioning (the negative is in tr)
	tr      *section.Transformer // the velocity model, its inputs set per section
	opts    section.SampleOptions
	rnd     *sampler.TorchGenerator // the sections' noise, one stream
	history *section.History
	keep    bool          // the transformer and the VAE decoder stay loaded
	video   *tensor.Scope // the video so far, on the host
	pixels  *tensor.Tensor
	// sampleAct is the most a section's sampling took above what was in
	// use when it began (measured while no decode ran beside it).
	sampleAct int64
	pending   *decodeJob // the decode running beside the sampling, if any
	from      int        // the first section to run: 0, or after Request.Resume's
}

// sections is FramePack's section loop: each section sampled, prepended to
// the history latents, decoded and soft-appended before the video so far.
func (j *job) sections(im images, pos, neg section.Prompt, h, w int) error {
	p, req := j.p, j.req
	newPlan, history := section.NewPlan, section.NewHistory(h, w)
	if req.forward() {
		newPlan = section.NewForwardPlan
		var err error
		if im.video == nil {
			if history, err = section.NewForwardHistory(im.start); err != nil {
				return fmt.Errorf("framepack: %w", err)
			}
		}
	}
	if im.video != nil {
		var err error
		if history, err = section.NewVideoHistory(im.video, req.forward(), req.VideoContextFrames); err != nil {
			return fmt.Errorf("framepack: %w", err)
		}
	}
	plan, err := newPlan(req.Seconds, req.LatentWindowSize)
	if err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	plan.Video = im.video != nil
	order := fmt.Sprintf("paddings %v", plan.Paddings)
	if plan.Forward {
		order = "forward (F1)"
	}
	if im.end != nil {
		order += ", end image"
	}
	frames := plan.VideoFrames()
	if plan.Video {
		frames = section.PixelFrames(plan.WindowSize * plan.Sections)
		order += fmt.Sprintf(", after %d latent frames of video", im.video.Dim(2))
	}
	p.log.Info(fmt.Sprintf("sections: %d of %d latent frames for %.2f s → %d frames at %d fps; %s",
		plan.Sections, plan.WindowSize, req.Seconds, frames, FPS, order))

	cache := req.CacheChoice()
	seq, pair, err := p.groups(req.CFG != 1, cache != CacheNone)
	if err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	d := p.trCfg.TextEmbedDim
	l := &sectionLoop{
		seq:    seq,
		plan:   plan,
		start:  im.start,
		image:  im.image,
		end:    im.end,
		endImg: im.endImage,
		pos:    pos.Padded(d),
		tr:     &section.Transformer{Negative: neg.Padded(d), CFG: pair},
		opts: section.SampleOptions{
			Config: sampler.Config{Steps: req.Steps, Guidance: sampler.Guidance{
				CFG: req.CFG, Rescale: req.RS, Distilled: req.GS, BF16: p.dt.transformer == tensor.BF16}},
			TeaCache:       cache == CacheTeaCache,
			TeaCacheThresh: req.teaCacheThreshold(p.opts.TeaCacheThreshold),
			MagCache:       req.magCache(),
		},
		rnd:     sampler.NewTorchGenerator(req.Seed),
		history: history,
		keep:    true,
		video:   tensor.NewScope(p.host),
	}
	defer l.video.Close()
	if err := j.resume(l, h, w); err != nil {
		return err
	}
	// A decode still running when the loop fails is waited for before the
	// scopes and models it uses go.
	defer func() {
		if l.pending != nil {
			<-l.pending.done
		}
	}()

	for i := l.from; i < plan.Sections; i++ {
		if j.sched != nil {
			l.pos = j.sectionText(i, d)
		}
		sec := plan.Section(i)
		st := &SectionStats{Index: i + 1, Padding: sec.Padding}
		if err := j.sample(l, sec, st); err != nil {
			return err
		}
		if p.follower() {
			continue // rank 0 decodes
		}
		// The previous section's decode, which ran beside this sampling.
		if d := l.pending; d != nil {
			l.pending = nil
			if err := j.finishDecode(l, d); err != nil {
				return err
			}
		}
		d, err := j.startDecode(l, sec, st, i+1 < plan.Sections)
		if err != nil {
			return err
		}
		if d.done != nil {
			l.pending = d
			continue
		}
		if err := j.finishDecode(l, d); err != nil {
			return err
		}
	}
	if d := l.pending; d != nil {
		l.pending = nil
		if err := j.finishDecode(l, d); err != nil {
			return err
		}
	}

	j.res.Latents = l.history.Newest(0)
	if p.follower() {
		return nil
	}
	f, err := video.FromPixels(l.pixels)
	if err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	j.res.Frames = f
	return nil
}

// sample samples one section (sample_hunyuan) conditioned on the start
// image and the history, and prepends its latents to the history.
func (j *job) sample(l *sectionLoop, sec section.Section, st *SectionStats) error {
	p, n := j.p, l.plan.Sections
	if err := j.ctx.Err(); err != nil {
		return fmt.Errorf("framepack: cancelled before section %d: %w", st.Index, err)
	}
	var clean, clean2x, clean4x *tensor.Tensor
	var err error
	if l.plan.Video {
		// The layout depends on what the video and the sections so far hold.
		sec, clean, clean2x, clean4x, err = l.history.VideoContext(l.plan, sec.Index, l.end)
	} else {
		clean, clean2x, clean4x, err = l.history.Context(l.start)
	}
	if err != nil {
		return fmt.Errorf("framepack: section %d: %w", st.Index, err)
	}
	if l.end != nil && sec.Index == 0 && !l.plan.Video {
		// The end latent stands for the 1x history frame (clean_latents_post).
		clean = section.Concat(tensor.ToHost(l.start), l.end)
	}
	l.tr.Cond = sec.Inputs(l.pos, j.imageEmbedding(l, sec.Index), clean, clean2x, clean4x)

	j.cur = ""
	model, err := j.loadTransformer()
	if err != nil {
		return err
	}
	if sec.Index == l.from {
		if l.keep = j.keepLoaded(model); !l.keep {
			p.log.Info("memory: the transformer and the VAE decoder do not both fit the budget; each is loaded for its stage only")
		}
	}
	if err := model.SetSequenceParallel(l.seq); err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	l.tr.Model = model
	noise := section.SectionNoise(l.rnd, l.plan.WindowSize, l.history.Latents.Dim(3), l.history.Latents.Dim(4))

	idle0, _ := tensor.QueueIdle(p.be)
	t := time.Now()
	frames := max(0, l.history.Generated*4-3)
	cb := func(s sampler.Step) error {
		j.progress(Progress{Stage: StageSample, Section: st.Index, Sections: n, Step: s.Index + 1, Steps: s.Steps,
			Frames: frames, Denoised: s.Denoised})
		return nil
	}
	// Out of memory while sampling: the Manager evicts every other model,
	// trims the pools and samples the section again (SampleSection starts
	// afresh, TeaCache included).
	var gen *tensor.Tensor
	keep := []string{PartTransformer}
	if l.pending != nil {
		keep = append(keep, PartVAE) // decoding beside this sampling
	}
	stats := p.be.Stats()
	j.peak = max(j.peak, stats.Peak)
	p.be.ResetPeak()
	run := j.mm.Run
	if p.world != nil {
		// Ranks sample in lockstep: one that retried alone would leave the
		// others waiting in an exchange. An out-of-memory error is final.
		run = func(a memory.Attempt) error { return a.Run() }
	}
	err = run(memory.Attempt{Op: fmt.Sprintf("sampling section %d", st.Index), Keep: keep, Run: func() error {
		ss := tensor.NewScope(p.be)
		defer ss.Close()
		out, err := section.SampleSection(j.ctx, ss, l.tr, ss.To(noise), l.opts, cb)
		if err == nil {
			gen = hostCopy(out)
			// Checked on the host copy made anyway: a NaN here would
			// otherwise decode into a black video.
			err = tensor.NonFiniteError("sampling produced non-finite latents", gen)
		}
		return err
	}})
	if l.pending == nil {
		l.sampleAct = max(l.sampleAct, p.be.Stats().Peak-stats.InUse)
	}
	if err == nil {
		before := l.history.Generated
		err = l.history.Add(gen, l.start, sec.Last)
		st.LatentFrames = l.history.Generated - before
	}
	if err != nil {
		return fmt.Errorf("framepack: section %d of %d: %w", st.Index, n, err)
	}
	st.Sample = time.Since(t)
	if idle, ok := tensor.QueueIdle(p.be); ok {
		st.SampleIdle = idle - idle0
	}
	if j.req.CacheChoice() == CacheTeaCache {
		st.TeaCacheComputed, st.TeaCacheSkipped = model.TeaCacheStats()
	}
	st.TransformerCalls, st.CacheSkipped = model.CacheCalls()
	if !l.keep {
		return j.unload(PartTransformer)
	}
	return nil
}

// decodeJob is one section's decode: the latents FramePack's loop decodes
// after sampling it (the newest history latents: all of them after the
// first section, then the newest 2·lws, +1 on the last:
// section.Plan.DecodeLatents), and their pixels soft-appended before the
// video so far. Pixels stay unclamped, in the VAE's dtype, on the host.
type decodeJob struct {
	sec     section.Section
	st      *SectionStats
	dec     *vae.VAE
	z       *tensor.Tensor // the latents to decode
	overlap int            // frames blended by the soft append
	latents *tensor.Tensor // the history after this section, for Progress
	ckpt    *Checkpoint    // the state after this section, for Progress
	opts    vae.DecodeOptions
	stats   vae.DecodeStats
	keep    []string // models the decode's out-of-memory retry keeps
	px      *tensor.Tensor
	took    time.Duration
	inline  time.Duration // of took, what ran before the next sampling (overlapped only)

	done chan struct{} // closed when the decode running beside the next sampling ends; nil when run in line
	err  error
}

// startDecode starts section st's decode. The next section's sampling
// needs only the history latents, so when there is one (more), both
// models stay loaded and the memory allows, the decode runs on its own
// goroutine beside it: on the CPU the whole decode, whose planned peak
// plus the measured sampling activations must fit the room the sequential
// decode would have (so the tiling, and the result, are the sequential
// path's); on a GPU, whose work goes through one stream, the soft append
// on the host. Otherwise it runs here and now, as FramePack's loop does.
func (j *job) startDecode(l *sectionLoop, sec section.Section, st *SectionStats, more bool) (*decodeJob, error) {
	p, n := j.p, l.plan.Sections
	if err := j.ctx.Err(); err != nil {
		return nil, fmt.Errorf("framepack: cancelled before decoding section %d: %w", st.Index, err)
	}
	j.cur = StageDecode
	t := time.Now()
	dec, err := j.loadDecoder()
	if err != nil {
		return nil, fmt.Errorf("framepack: section %d of %d: %w", st.Index, n, err)
	}
	nz, overlap := l.plan.DecodeLatents(sec.Index)
	d := &decodeJob{sec: sec, st: st, dec: dec, z: l.history.Newest(nz), overlap: overlap, latents: l.history.Newest(0),
		keep: []string{PartVAE}}
	if j.req.Progress != nil {
		d.ckpt = j.checkpoint(l, st.Index)
	}
	room, err := p.dev.DecodeRoom()
	var peak int64
	if p.opts.VAETiling != nil {
		// A fixed tiling decodes whatever the room; without any, in line.
		d.opts.Tiling = *p.opts.VAETiling
		peak = dec.DecodePeak(d.z.Shape(), d.opts.Tiling)
		if err != nil {
			room, err = 0, nil
			more = false
		}
	} else if err == nil {
		if d.opts, peak = dec.Plan(d.z.Shape(), room); peak > room {
			p.log.Warn(fmt.Sprintf("memory: the smallest decode tiling needs %s, more than the %s free; trying it anyway",
				memory.FormatBytes(peak), memory.FormatBytes(room)))
		}
	}
	// Reported once the tiling is planned, so the report counts the tiles.
	j.progress(Progress{Stage: StageDecode, Section: st.Index, Sections: n, Frames: max(0, (l.history.Generated-st.LatentFrames)*4-3),
		Tiles: vae.DecodeTiles(p.vaeCfg, d.z.Shape(), d.opts.Tiling)})
	async := more && l.keep && !p.opts.SequentialDecode && err == nil
	if async && !p.gpu {
		// The sampling's activations with an eighth to spare.
		if need := peak + l.sampleAct + l.sampleAct/8; need > room {
			async = false
			p.log.Debug(fmt.Sprintf("memory: section %d's decode (%s) and the next sampling (%s) do not fit the %s free together; decoding first",
				st.Index, memory.FormatBytes(peak), memory.FormatBytes(l.sampleAct), memory.FormatBytes(room)))
		}
	}
	st.DecodeOverlapped = async
	if !async || p.gpu {
		if async {
			d.keep = append(d.keep, PartTransformer)
		}
		err := j.decodeLatents(l, d, err)
		d.took = time.Since(t)
		if async {
			d.inline = d.took
		}
		if err != nil || !async {
			d.err = err
			return d, nil
		}
	}
	if d.px == nil {
		d.took = time.Since(t) // the decoder's load, if any
	}
	d.done = make(chan struct{})
	d.keep = []string{PartVAE, PartTransformer} // the next sampling runs beside it
	go func() {
		defer close(d.done)
		t := time.Now()
		if d.px == nil {
			d.err = j.decodeLatents(l, d, nil)
		}
		if d.err == nil {
			d.err = tensor.Catch(func() { j.appendPixels(l, d) })
		}
		d.took += time.Since(t)
	}()
	return d, nil
}

// decodeLatents decodes d's latents into d.px (on the host, in l.video)
// with the planned tiling. Out of memory even at the smallest tiling: the
// Manager evicts every model not in d.keep (the transformer, kept in
// high-VRAM mode, when nothing samples beside), trims the pools and decodes
// again, planning the tiling afresh.
func (j *job) decodeLatents(l *sectionLoop, d *decodeJob, roomErr error) error {
	if roomErr != nil {
		return roomErr
	}
	p, first := j.p, true
	return j.mm.Run(memory.Attempt{Op: "VAE decode", Keep: d.keep, Run: func() error {
		opts := d.opts
		if !first && p.opts.VAETiling == nil {
			room, err := p.dev.DecodeRoom()
			if err != nil {
				return err
			}
			opts, _ = d.dec.Plan(d.z.Shape(), room)
		}
		first = false
		opts.Stats = &d.stats
		opts.Log = func(format string, args ...any) { p.log.Warn(fmt.Sprintf(format, args...)) }
		// Cancelling stops the decode between tiles, not at its end. Tiles
		// are reported by a decode in line only: one beside the next
		// sampling would interleave with its steps.
		opts.Context = j.ctx
		if d.done == nil {
			st, n := d.st, l.plan.Sections
			opts.Progress = func(done, total int) {
				j.progress(Progress{Stage: StageDecode, Section: st.Index, Sections: n, Tile: done, Tiles: total})
			}
		}
		cs := l.video.Child()
		defer cs.Close()
		d.px = section.VAEDecode(cs, d.dec, d.z, opts)
		cs.Keep(d.px)
		return nil
	}})
}

// appendPixels soft-appends d's pixels before the video so far
// (soft_append_bcthw) and makes the result l.pixels.
func (j *job) appendPixels(l *sectionLoop, d *decodeJob) {
	prev := l.pixels
	if prev == nil {
		l.pixels = d.px
		return
	}
	cs := l.video.Child()
	defer cs.Close()
	// Backward sections go before the video so far; F1's forward ones after.
	var cur *tensor.Tensor
	if l.plan.Forward {
		cur = section.SoftAppend(cs, prev, d.px, d.overlap)
	} else {
		cur = section.SoftAppend(cs, d.px, prev, d.overlap)
	}
	cs.Keep(cur)
	l.pixels = cur
	if cur != d.px {
		l.video.Free(d.px)
	}
	if prev != cur {
		l.video.Free(prev)
	}
}

// finishDecode waits for d, completes the section (the soft append when
// it ran in line, the VAE's unload in low-VRAM mode, its stats) and
// reports it.
func (j *job) finishDecode(l *sectionLoop, d *decodeJob) error {
	p, n, st := j.p, l.plan.Sections, d.st
	if d.done != nil {
		t := time.Now()
		<-d.done
		st.DecodeWait = time.Since(t)
	} else if d.err == nil {
		d.err = tensor.Catch(func() { j.appendPixels(l, d) })
	}
	if d.err != nil {
		return fmt.Errorf("framepack: section %d of %d: VAE decode: %w", st.Index, n, d.err)
	}
	if !l.keep {
		if err := j.unload(PartVAE); err != nil {
			return err
		}
	}
	st.Decode, st.DecodeInline = d.took, d.inline
	st.DecodeTiling = d.stats.Tiling.String()
	st.Frames = l.pixels.Dim(2)
	j.res.Sections = append(j.res.Sections, *st)
	if j.req.Progress != nil {
		d.ckpt.Pixels = l.pixels
		j.progress(Progress{Stage: StageSectionDone, Section: st.Index, Sections: n, Frames: st.Frames,
			Latents: d.latents, Pixels: l.pixels, Checkpoint: d.ckpt, Stats: st})
	}
	tc := ""
	switch j.req.CacheChoice() {
	case CacheTeaCache:
		tc = fmt.Sprintf(" (TeaCache: %d computed, %d skipped)", st.TeaCacheComputed, st.TeaCacheSkipped)
	case CacheMagCache:
		tc = fmt.Sprintf(" (MagCache: %d computed, %d skipped)", st.TransformerCalls-len(st.CacheSkipped), len(st.CacheSkipped))
	}
	how := ""
	if st.DecodeOverlapped {
		how = ", beside the next sampling"
	}
	p.log.Info(fmt.Sprintf("section %d/%d (padding %d): sampled in %s%s, decoded in %s (%s%s); %d latent frames, %d video frames",
		st.Index, n, d.sec.Padding, st.Sample.Round(time.Millisecond), tc, st.Decode.Round(time.Millisecond),
		st.DecodeTiling, how, d.latents.Dim(2), st.Frames))
	return nil
}

// imageEmbedding is section i's SigLIP conditioning: the start image's, or
// with an end image ComfyUI-FramePackWrapper's embed_interpolation of the
// two (frac·start + (1−frac)·end, in float32).
func (j *job) imageEmbedding(l *sectionLoop, i int) *tensor.Tensor {
	if l.endImg == nil {
		return l.image
	}
	s := j.req.StartEmbedStrength
	frac := 1.0
	switch j.req.EmbedInterpolation {
	case EmbedLinear:
		if n := l.plan.Sections; n > 1 {
			frac = 1 - float64(i)/float64(n-1)
		}
	case EmbedWeighted:
		frac = s
	default: // disabled: the start embedding scaled, the end one unused
		return section.Mix(l.image, float32(s), nil, 0)
	}
	return section.Mix(l.image, float32(frac), l.endImg, float32(1-frac))
}
