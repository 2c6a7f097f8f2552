package framepack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/clip"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/model/llama"
	"github.com/framepack-go/framepack/model/siglip"
	"github.com/framepack-go/framepack/pipeline"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
)

// Generate makes a video from req, following FramePack's worker() stage by
// stage: text encoding, bucket crop, VAE encode of the start image, SigLIP,
// then the sections (last in time first), each sampled, prepended to the
// history latents and decoded, its pixels soft-appended before the video
// so far. Cancelling ctx stops before the next sampler step or stage and
// returns an error wrapping ctx.Err(); nothing is kept loaded. A NaN or
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
	j := p.newJob(ctx, req)
	defer func() {
		if uerr := j.unloadAll(); uerr != nil && err == nil {
			res, err = nil, uerr
		}
	}()
	t0 := time.Now()
	p.be.ResetPeak()
	if err := j.run(img); err != nil {
		return nil, err
	}
	j.res.Total = time.Since(t0)
	j.res.PeakBytes = p.be.Stats().Peak
	return j.res, nil
}

// job is one Generate call's state.
type job struct {
	p   *Pipeline
	req Request
	ctx context.Context
	res *Result

	mm    *memory.Manager  // places the models on p.be
	parts map[string]*part // the models, by part name
	cur   string           // the stage being timed, for ModelLoad.Stage
}

func (p *Pipeline) newJob(ctx context.Context, req Request) *job {
	j := &job{p: p, req: req, ctx: ctx, res: &Result{FPS: FPS}}
	j.newManager()
	return j
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

func (j *job) run(img *pipeline.RGB) error {
	p, req := j.p, j.req

	// Text: LLaMA (templated, hidden_states[-3]) and CLIP (pooled), the
	// negative prompt only for real CFG.
	if err := j.stage(StageTextEncode); err != nil {
		return err
	}
	t := time.Now()
	pos, neg, err := j.encodeText()
	if err != nil {
		return err
	}
	j.res.TextEncode = time.Since(t)
	p.log.Info(fmt.Sprintf("text: %d prompt tokens encoded in %s", pos.tokens, j.res.TextEncode.Round(time.Millisecond)))

	// The start image, cropped to its bucket.
	bh, bw, err := pipeline.NearestBucket(img.H, img.W, req.Resolution)
	if err != nil {
		return err
	}
	crop, err := pipeline.ResizeAndCenterCrop(img, bw, bh)
	if err != nil {
		return fmt.Errorf("framepack: cropping the image: %w", err)
	}
	j.res.Width, j.res.Height = bw, bh
	p.log.Info(fmt.Sprintf("image: %d×%d → bucket %d×%d (resolution %d)", img.W, img.H, bw, bh, req.Resolution))

	if err := j.stage(StageVAEEncode); err != nil {
		return err
	}
	t = time.Now()
	start, err := j.encodeImage(crop)
	if err != nil {
		return err
	}
	j.res.VAEEncode = time.Since(t)

	if err := j.stage(StageImageEncode); err != nil {
		return err
	}
	t = time.Now()
	imageEmb, err := j.encodeSigLIP(crop)
	if err != nil {
		return err
	}
	j.res.ImageEncode = time.Since(t)

	return j.sections(start, pos, neg, imageEmb, bh/8, bw/8)
}

// encodeText runs the two text encoders, each loaded for this stage only.
func (j *job) encodeText() (pos, neg textCond, err error) {
	p, req := j.p, j.req
	realCFG := req.CFG != 1

	be := j.placeFor(PartTextEncoder)
	lm, err := load(j, PartTextEncoder, be, func(be tensor.Backend, _ bool) (*llama.Model, error) {
		return llama.Load(p.paths[PartTextEncoder], be, p.dt.text)
	})
	if err != nil {
		return pos, neg, fmt.Errorf("framepack: loading the text encoder: %w", err)
	}
	j.memory("text encoder loaded (" + memory.FormatBytes(lm.Bytes()) + ")")
	s := tensor.NewScope(be)
	pos, err = p.encodeLlama(lm, s, req.Prompt)
	if err == nil && realCFG {
		neg, err = p.encodeLlama(lm, s, req.NegativePrompt)
	}
	s.Close()
	if uerr := j.unload(PartTextEncoder); err == nil {
		err = uerr
	}
	if err != nil {
		return pos, neg, fmt.Errorf("framepack: %w", err)
	}

	be = j.placeFor(PartTextEncoder2)
	cm, err := load(j, PartTextEncoder2, be, func(be tensor.Backend, _ bool) (*clip.Model, error) {
		return clip.Load(p.paths[PartTextEncoder2], be, p.dt.text)
	})
	if err != nil {
		return pos, neg, fmt.Errorf("framepack: loading text_encoder_2: %w", err)
	}
	j.memory("text_encoder_2 loaded (" + memory.FormatBytes(cm.Bytes()) + ")")
	s = tensor.NewScope(be)
	err = p.encodeCLIP(cm, s, req.Prompt, &pos)
	if err == nil && realCFG {
		err = p.encodeCLIP(cm, s, req.NegativePrompt, &neg)
	}
	s.Close()
	if uerr := j.unload(PartTextEncoder2); err == nil {
		err = uerr
	}
	if err != nil {
		return pos, neg, fmt.Errorf("framepack: %w", err)
	}
	if !realCFG {
		neg = pos.zerosLike()
	}
	j.memory("text encoders unloaded")
	for _, c := range []struct {
		what string
		v    []float32
	}{{"the text encoder's prompt embeddings", pos.embeds}, {"text_encoder_2's pooled prompt", pos.pooled},
		{"the text encoder's negative prompt embeddings", neg.embeds}, {"text_encoder_2's pooled negative prompt", neg.pooled}} {
		if len(c.v) > 0 {
			if err := tensor.NonFiniteError("framepack: text encode produced non-finite values in "+c.what, tensor.FromFloat32(c.v, len(c.v))); err != nil {
				return pos, neg, err
			}
		}
	}
	return pos, neg, nil
}

// encodeImage is FramePack's vae_encode: the posterior of the cropped
// image, sampled (or its mean), times the scaling factor: (1, 16, 1, h, w)
// f32 on the host.
func (j *job) encodeImage(crop *pipeline.RGB) (*tensor.Tensor, error) {
	p := j.p
	be := j.placeFor(PartVAE)
	v, err := load(j, PartVAE, be, func(be tensor.Backend, _ bool) (*vae.VAE, error) {
		return vae.Load(p.paths[PartVAE], be, vae.Options{DType: p.dt.vae, NoDecoder: true})
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the VAE encoder: %w", err)
	}
	j.memory("vae encoder loaded (" + memory.FormatBytes(v.WeightBytes()) + ")")
	s := tensor.NewScope(be)
	defer s.Close()
	var z *tensor.Tensor
	err = tensor.Catch(func() {
		// A fixed tiling applies to the encode too, as FramePack's
		// low-VRAM mode (enable_tiling) tiles both.
		til := vae.DefaultTiling()
		if p.opts.VAETiling != nil {
			til = *p.opts.VAETiling
		}
		mean, logvar := v.EncodeWith(s, pipeline.VAEPixels(crop), til)
		if j.req.PosteriorMean {
			z = tensor.ToHost(vae.Mode(mean, logvar))
		} else {
			z = vae.Sample(mean, logvar, sampler.NewTorchGenerator(j.req.Seed))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: VAE encode: %w", err)
	}
	start := hostCopy(z)
	sf := v.ScalingFactor()
	s.Close()
	if err := j.unload(PartVAE); err != nil {
		return nil, err
	}
	// vae_encode returns the sample times the scaling factor in the VAE's
	// dtype: round both steps there.
	round := roundTo(p.dt.vae)
	data := start.Float32s()
	for i, x := range data {
		data[i] = round(round(x) * sf)
	}
	if err := tensor.NonFiniteError("framepack: vae encode produced non-finite start latents", start); err != nil {
		return nil, err
	}
	return start, nil
}

// encodeSigLIP is hf_clip_vision_encode: SigLIP's last hidden state of the
// cropped image, (1, patches, hidden) on the host.
func (j *job) encodeSigLIP(crop *pipeline.RGB) (*tensor.Tensor, error) {
	p := j.p
	be := j.placeFor(PartImageEncoder)
	m, err := load(j, PartImageEncoder, be, func(be tensor.Backend, _ bool) (*siglip.Model, error) {
		return siglip.Load(p.paths[PartImageEncoder], be, p.dt.image)
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the image encoder: %w", err)
	}
	j.memory("image encoder loaded (" + memory.FormatBytes(m.Bytes()) + ")")
	px, err := pipeline.SigLIPPixels(crop, p.sigSize)
	if err != nil {
		return nil, fmt.Errorf("framepack: image encoder preprocessing: %w", err)
	}
	s := tensor.NewScope(be)
	defer s.Close()
	var out *tensor.Tensor
	if err := tensor.Catch(func() { out = hostCopy(m.Forward(s, px)) }); err != nil {
		return nil, fmt.Errorf("framepack: image encoder: %w", err)
	}
	s.Close()
	if err := tensor.NonFiniteError("framepack: image encode produced non-finite embeddings", out); err != nil {
		j.unload(PartImageEncoder)
		return nil, err
	}
	return out, j.unload(PartImageEncoder)
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

// roundTo rounds an f32 value to dt's precision (identity for f32).
func roundTo(dt tensor.DType) func(float32) float32 {
	switch dt {
	case tensor.F16:
		return tensor.RoundF16
	case tensor.BF16:
		return tensor.RoundBF16
	}
	return func(x float32) float32 { return x }
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
	if m := loaded[*hunyuan.Model](j, PartTransformer); m != nil {
		return m, nil
	}
	p := j.p
	t := time.Now()
	pt := j.parts[PartTransformer]
	pt.be = p.be
	pt.build = func(be tensor.Backend, streamed bool) (closer, error) {
		opts := hunyuan.Options{DType: p.dt.transformer, HostBlocks: streamed}
		if streamed {
			opts.StreamFromFile = j.streamFromFile()
		}
		return hunyuan.Load(p.paths[PartTransformer], be, opts)
	}
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

// sections is FramePack's section loop (demo_gradio.py worker()).
func (j *job) sections(start *tensor.Tensor, pos, neg textCond, imageEmb *tensor.Tensor, h, w int) error {
	p, req := j.p, j.req
	lws := req.LatentWindowSize
	plan, err := pipeline.NewPlan(req.Seconds, lws)
	if err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	n := plan.Sections
	p.log.Info(fmt.Sprintf("sections: %d of %d latent frames for %.2f s → %d frames at %d fps; paddings %v",
		n, lws, req.Seconds, plan.VideoFrames(), FPS, plan.Paddings))

	d := p.trCfg.TextEmbedDim
	posE, posM := pos.padded(d)
	negE, negM := neg.padded(d)
	tr := &pipeline.Transformer{
		Cond: hunyuan.Inputs{
			EncoderHiddenStates:  posE,
			EncoderAttentionMask: posM,
			PooledProjections:    tensor.FromFloat32(pos.pooled, 1, len(pos.pooled)),
			ImageEmbeddings:      imageEmb,
		},
		Negative: pipeline.Text{Embeds: negE, Mask: negM, Pooled: tensor.FromFloat32(neg.pooled, 1, len(neg.pooled))},
	}
	opts := pipeline.SampleOptions{
		Config: sampler.Config{Steps: req.Steps, Guidance: sampler.Guidance{
			CFG: req.CFG, Rescale: req.RS, Distilled: req.GS, BF16: p.dt.transformer == tensor.BF16}},
		TeaCache:       req.TeaCache,
		TeaCacheThresh: p.opts.TeaCacheThreshold,
	}
	keep := true

	rnd := sampler.NewTorchGenerator(req.Seed)
	history := pipeline.NewHistory(h, w)
	hs := tensor.NewScope(p.host) // the video so far, on the host
	defer hs.Close()
	var pixels *tensor.Tensor

	for i := range n {
		sec := plan.Section(i)
		section := i + 1
		st := SectionStats{Index: section, Padding: sec.Padding}
		if err := j.ctx.Err(); err != nil {
			return fmt.Errorf("framepack: cancelled before section %d: %w", section, err)
		}

		in := &tr.Cond
		var err error
		if in.CleanLatents, in.CleanLatents2x, in.CleanLatents4x, err = history.Context(start); err != nil {
			return fmt.Errorf("framepack: section %d: %w", section, err)
		}
		in.LatentIndices, in.CleanLatentIndices = sec.LatentIndices, sec.CleanIndices
		in.CleanLatent2xIndices, in.CleanLatent4xIndices = sec.Clean2xIndices, sec.Clean4xIndices

		j.cur = ""
		model, err := j.loadTransformer()
		if err != nil {
			return err
		}
		if i == 0 {
			if keep = j.keepLoaded(model); !keep {
				p.log.Info("memory: the transformer and the VAE decoder do not both fit the budget; each is loaded for its stage only")
			}
		}
		tr.Model = model
		shape := []int{1, 16, lws, h, w}
		noise := tensor.FromFloat32(rnd.Randn(shape...), shape...)

		t := time.Now()
		frames := max(0, history.Generated*4-3)
		cb := func(s sampler.Step) error {
			j.progress(Progress{Stage: StageSample, Section: section, Sections: n, Step: s.Index + 1, Steps: s.Steps,
				Frames: frames, Denoised: s.Denoised})
			return nil
		}
		// Out of memory while sampling: the Manager evicts every other
		// model, trims the pools and samples the section again
		// (SampleSection starts afresh, TeaCache included).
		var gen *tensor.Tensor
		err = j.mm.Run(memory.Attempt{Op: fmt.Sprintf("sampling section %d", section), Keep: []string{PartTransformer}, Run: func() error {
			ss := tensor.NewScope(p.be)
			defer ss.Close()
			out, err := pipeline.SampleSection(j.ctx, ss, tr, ss.To(noise), opts, cb)
			if err == nil {
				gen = hostCopy(out)
				// Checked on the host copy made anyway: a NaN here would
				// otherwise decode into a black video.
				err = tensor.NonFiniteError("sampling produced non-finite latents", gen)
			}
			return err
		}})
		if err == nil {
			before := history.Generated
			err = history.Add(gen, start, sec.Last)
			st.LatentFrames = history.Generated - before
		}
		if err != nil {
			return fmt.Errorf("framepack: section %d of %d: %w", section, n, err)
		}
		st.Sample = time.Since(t)
		if req.TeaCache {
			st.TeaCacheComputed, st.TeaCacheSkipped = model.TeaCacheStats()
		}

		if !keep {
			if err := j.unload(PartTransformer); err != nil {
				return err
			}
		}
		if err := j.ctx.Err(); err != nil {
			return fmt.Errorf("framepack: cancelled before decoding section %d: %w", section, err)
		}
		j.cur = StageDecode
		j.progress(Progress{Stage: StageDecode, Section: section, Sections: n, Frames: frames})
		t = time.Now()
		nz, overlap := plan.DecodeLatents(i)
		pixels, st.DecodeTiling, err = j.decode(hs, history.Newest(nz), pixels, overlap)
		if err != nil {
			return fmt.Errorf("framepack: section %d of %d: %w", section, n, err)
		}
		if !keep {
			if err := j.unload(PartVAE); err != nil {
				return err
			}
		}
		st.Decode = time.Since(t)
		st.Frames = pixels.Dim(2)
		j.res.Sections = append(j.res.Sections, st)
		if j.req.Progress != nil {
			j.progress(Progress{Stage: StageSectionDone, Section: section, Sections: n, Frames: st.Frames,
				Latents: history.Newest(0), Pixels: pixels})
		}
		tc := ""
		if req.TeaCache {
			tc = fmt.Sprintf(" (TeaCache: %d computed, %d skipped)", st.TeaCacheComputed, st.TeaCacheSkipped)
		}
		p.log.Info(fmt.Sprintf("section %d/%d (padding %d): sampled in %s%s, decoded in %s (%s); %d latent frames, %d video frames",
			section, n, sec.Padding, st.Sample.Round(time.Millisecond), tc, st.Decode.Round(time.Millisecond), st.DecodeTiling, history.Generated, st.Frames))
	}

	f, err := video.FromPixels(pixels)
	if err != nil {
		return fmt.Errorf("framepack: %w", err)
	}
	j.res.Frames = f
	j.res.Latents = history.Newest(0)
	return nil
}

// decode is FramePack's per-section decode of z, the newest history
// latents (all of them after the first section, then the newest 2·lws, +1
// on the last: pipeline.Plan.DecodeLatents), whose pixels are soft-appended
// before the video so far with overlap frames. Pixels stay unclamped, in
// the VAE's dtype, on the host.
func (j *job) decode(hs *tensor.Scope, z, prev *tensor.Tensor, overlap int) (*tensor.Tensor, string, error) {
	p := j.p
	dec, err := j.loadDecoder()
	if err != nil {
		return nil, "", err
	}
	// vae_decode: latents / scaling factor (f32), then the VAE's dtype.
	// (z is the history's copy.)
	sf := dec.ScalingFactor()
	zs := z.Float32s()
	for i := range zs {
		zs[i] /= sf
	}
	// Out of memory even at the smallest tiling: the Manager evicts every
	// other model (the transformer, kept in high-VRAM mode), trims the
	// pools and decodes again, planning the tiling afresh.
	var out *tensor.Tensor
	var stats vae.DecodeStats
	err = j.mm.Run(memory.Attempt{Op: "VAE decode", Keep: []string{PartVAE}, Run: func() error {
		var opts vae.DecodeOptions
		if p.opts.VAETiling != nil {
			opts.Tiling = *p.opts.VAETiling
		} else {
			var peak int64
			opts, peak = vae.PlanDecode(p.vaeCfg, z.Shape(), p.be.Available(), p.dt.vae)
			if peak > p.be.Available() {
				p.log.Warn(fmt.Sprintf("memory: the smallest decode tiling needs %s, more than the %s free; trying it anyway",
					memory.FormatBytes(peak), memory.FormatBytes(p.be.Available())))
			}
		}
		opts.Stats = &stats
		opts.Log = func(format string, args ...any) { p.log.Warn(fmt.Sprintf(format, args...)) }

		ds := tensor.NewScope(p.be)
		defer ds.Close()
		cur := dec.Decode(ds, z, opts) // f32, host, owned by no scope
		cs := hs.Child()
		defer cs.Close()
		cur = cs.Cast(cs.To(cur), p.dt.vae)
		if prev == nil {
			out = cur
		} else {
			out = pipeline.SoftAppend(cs, cur, prev, overlap)
		}
		cs.Keep(out)
		return nil
	}})
	if err != nil {
		return nil, "", fmt.Errorf("VAE decode: %w", err)
	}
	if prev != nil && prev != out {
		hs.Free(prev)
	}
	return out, stats.Tiling.String(), nil
}
