package framepack

import (
	"fmt"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/model/hunyuan"
	"github.com/framepack-go/framepack/section"
)

// FitError is a job too big for a pipeline's memory budgets: CheckFit's
// answer.
type FitError struct {
	// Flag is the budget it exceeds: "--vram-limit" (the device's cap) or
	// "--ram-limit" (the host budget).
	Flag string
	// Need is the least the job needs there; Have the budget.
	Need, Have int64
	// Job describes the job (its bucket, window and length), Why what the
	// need is made of.
	Job, Why string
}

func (e *FitError) Error() string {
	return fmt.Sprintf("%s needs %s, more than its %s budget of %s (%s)", e.Job, memory.FormatBytes(e.Need),
		map[string]string{"--vram-limit": "device", "--ram-limit": "host"}[e.Flag], memory.FormatBytes(e.Have), e.Why)
}

// CheckFit tells whether req, on a start image of w×h pixels, fits the
// pipeline's memory budgets under the smallest plan the engine has for
// it (the one Load checks the models against: on a GPU the transformer's
// blocks streamed, every decode in its smallest tiles): the transformer's
// activations for the request's bucket and latent window, and the video
// so far, which the host holds whole (its pixels in the VAE's dtype, their
// copy in a checkpoint, the frames). It returns a *FitError when it does
// not, and loads nothing: a worker asks it before taking a job.
func (p *Pipeline) CheckFit(req Request, w, h int) error {
	if !p.open() {
		return fmt.Errorf("framepack: the pipeline is closed")
	}
	if err := req.ValidateSize(w, h, false); err != nil {
		return err
	}
	bh, bw, err := section.NearestBucket(h, w, req.Resolution)
	if err != nil {
		return err
	}
	plan, err := section.NewPlan(req.Seconds, req.LatentWindowSize)
	if err != nil {
		return err
	}
	job := fmt.Sprintf("a %d×%d video of %d frames at latent window %d", bw, bh, plan.VideoFrames(), req.LatentWindowSize)
	f := memory.FormatBytes

	img, txt := p.trCfg.Tokens(hunyuan.Section{Batch: 1, LatentH: bh / 8, LatentW: bw / 8, WindowSize: req.LatentWindowSize,
		ImageTokens: p.sigTokens, TextTokens: section.TextLength, ValidText: section.TextLength})
	act := hunyuan.ActivationBytes(p.trCfg, img+txt, p.dt.transformer)
	least, err := p.leastDevice()
	if err != nil {
		return err
	}
	dev := least
	var sampling need
	if p.gpu {
		global, block, err := hunyuan.StreamBytes(p.trCfg, hunyuan.Options{DType: p.dt.transformer, FP8: p.opts.FP8Weights})
		if err != nil {
			return err
		}
		sampling = need{global + 2*block + act + 256*memory.MiB, fmt.Sprintf("sampling holds the transformer's %s of global weights, two of its %s blocks streamed, and %s of activations for %d tokens",
			f(global), f(block), f(act+256*memory.MiB), img+txt)}
	} else {
		tw := p.bytes[PartTransformer]
		sampling = need{tw + act, fmt.Sprintf("sampling holds the transformer's %s of weights and %s of activations for %d tokens", f(tw), f(act), img+txt)}
	}
	if sampling.bytes > dev.bytes {
		dev = sampling
	}
	frames := int64(3 * plan.VideoFrames() * bh * bw)
	video := frames * int64(2*p.dt.vae.Size()+1)
	videoWhy := fmt.Sprintf("the video so far takes %s on the host", f(video))

	b := p.be.Budget()
	if !p.gpu || p.ram.Unified() {
		// One pool: the stage and the video share it.
		flag := "--vram-limit"
		if lim := p.ram.Limit(); lim > 0 && lim <= b.Cap {
			flag = "--ram-limit"
		}
		if dev.bytes+video > b.Cap {
			return &FitError{Flag: flag, Need: dev.bytes + video, Have: b.Cap, Job: job, Why: dev.what + "; " + videoWhy}
		}
		return nil
	}
	if dev.bytes > b.Cap {
		return &FitError{Flag: "--vram-limit", Need: dev.bytes, Have: b.Cap, Job: job, Why: dev.what}
	}
	if lim := p.ram.Limit(); lim > 0 {
		host := p.leastHost(b.Cap)
		if host.bytes+video > lim {
			return &FitError{Flag: "--ram-limit", Need: host.bytes + video, Have: lim, Job: job, Why: host.what + "; " + videoWhy}
		}
	}
	return nil
}
