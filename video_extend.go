package framepack

import (
	"fmt"

	"github.com/framepack-go/framepack/memory"
	"github.com/framepack-go/framepack/sampler"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
	"github.com/framepack-go/framepack/vae"
	"github.com/framepack-go/framepack/video"
)

// Extending a video (Request.Video), as FramePack Studio's worker() runs
// its "Video" and "Video F1" generators: the input's last frames are
// cropped to the bucket and VAE-encoded 16 at a time into the history; the
// first encoded frame's SigLIP embedding conditions every section; the
// sections continue from the video's end (section.History.VideoContext);
// the result is the input followed by the new frames, or the new frames
// alone.

// checkVideo checks a request's video and returns its first frame (its
// size gives the bucket).
func (r *Request) checkVideo() (*section.RGB, error) {
	for i, f := range r.Video {
		switch {
		case f == nil:
			return nil, fmt.Errorf("request: video frame %d is missing", i)
		case f.W <= 0 || f.H <= 0 || len(f.Pix) != 3*f.W*f.H:
			return nil, fmt.Errorf("request: video frame %d of %d×%d has %d bytes", i, f.W, f.H, len(f.Pix))
		case f.W != r.Video[0].W || f.H != r.Video[0].H:
			return nil, fmt.Errorf("request: video frame %d is %d×%d, frame 0 %d×%d: the frames must all be one size", i, f.W, f.H, r.Video[0].W, r.Video[0].H)
		}
	}
	switch {
	case r.VideoContextFrames < section.MinVideoContextFrames || r.VideoContextFrames > section.MaxVideoContextFrames:
		return nil, fmt.Errorf("request: video context frames must be in %d–%d, have %d", section.MinVideoContextFrames, section.MaxVideoContextFrames, r.VideoContextFrames)
	case r.EmbedInterpolation != "" && r.EmbedInterpolation != EmbedDisabled:
		return nil, fmt.Errorf("request: embed interpolation is for an image, not a video (FramePack Studio's Video generator uses the end image's latent only)")
	}
	if need := MinVideoFrames(r.VideoContextFrames, r.LatentWindowSize, r.forward()); len(r.Video) < need {
		return nil, fmt.Errorf("request: the video is too short: %d frames; with video context frames %d and latent window size %d it needs at least %d",
			len(r.Video), r.VideoContextFrames, r.LatentWindowSize, need)
	}
	return r.Video[0], nil
}

// MinVideoFrames is the fewest frames a video to extend needs: enough for
// section.MinVideoLatents latent frames once its last frames are encoded
// (at most section.VideoEncodeFrames; more frames than that are allowed
// and only the last are encoded).
func MinVideoFrames(contextFrames, lws int, forward bool) int {
	need := section.MinVideoLatents(contextFrames, lws, forward)
	for n := 4; n <= section.VideoEncodeFrames; n += 4 {
		if section.VideoLatentFrames(n) >= need {
			return n
		}
	}
	return section.VideoEncodeFrames + 1 // never enough
}

// runVideo is run for a video: the frames cropped to the bh×bw bucket,
// encoded, the sections sampled after them, the input put before the new
// frames unless VideoNewOnly.
func (j *job) runVideo(pos, neg section.Prompt, bh, bw int) error {
	p, req := j.p, j.req
	n := len(req.Video)
	first, count := section.VideoEncodeRange(n)
	keepFrom := first
	if !req.VideoNewOnly {
		keepFrom = 0 // the whole input goes before the new frames
	}
	crops := make([]*section.RGB, n)
	for i := keepFrom; i < n; i++ {
		c, err := section.ResizeAndCenterCrop(req.Video[i], bw, bh)
		if err != nil {
			return fmt.Errorf("framepack: cropping video frame %d: %w", i, err)
		}
		crops[i] = c
	}
	p.log.Info(fmt.Sprintf("video: %d frames of %d×%d → bucket %d×%d; its last %d frames encoded, %d context frames",
		n, req.Video[0].W, req.Video[0].H, bw, bh, count, req.VideoContextFrames))
	var endCrop *section.RGB
	if end, _ := req.endFrame(); end != nil {
		c, err := section.ResizeAndCenterCrop(end, bw, bh)
		if err != nil {
			return fmt.Errorf("framepack: cropping the end image: %w", err)
		}
		endCrop = c
	}
	encoded := crops[first:]
	lat, err := j.encodeStage(StageVAEEncode, &j.res.VAEEncode, func(...*section.RGB) ([]*tensor.Tensor, error) {
		return j.encodeVideo(encoded, endCrop)
	}, nil)
	if err != nil {
		return err
	}
	emb, err := j.encodeStage(StageImageEncode, &j.res.ImageEncode, j.encodeSigLIP, []*section.RGB{encoded[0]})
	if err != nil {
		return err
	}
	v := lat[0]
	t := v.Dim(2)
	im := images{start: section.Frames(v, t-1, t), image: emb[0], end: lat[1], video: v}
	if err := j.sections(im, pos, neg, bh/8, bw/8); err != nil {
		return err
	}
	if !req.VideoNewOnly && j.res.Frames.T > 0 {
		j.res.Frames = prependFrames(crops, j.res.Frames)
		j.res.InputFrames = n
	}
	return nil
}

// encodeVideo is Studio's video_encode of the cropped frames (the
// posterior sampled from one generator seeded with the seed, batch after
// batch, or its mean), then the end image's vae_encode when given: the
// video's latents and the end latent (nil without one), host f32.
func (j *job) encodeVideo(frames []*section.RGB, end *section.RGB) ([]*tensor.Tensor, error) {
	p := j.p
	be := j.placeFor(PartVAE)
	v, err := load(j, PartVAE, be, func(be tensor.Backend, _ bool) (*vae.VAE, error) {
		return vae.Load(p.paths[PartVAE], be, vae.Options{DType: p.dt.vae, NoDecoder: !j.keepAll})
	})
	if err != nil {
		return nil, fmt.Errorf("framepack: loading the VAE encoder: %w", err)
	}
	j.memory("vae encoder loaded (" + memory.FormatBytes(v.WeightBytes()) + ")")
	til := vae.DefaultTiling()
	if p.opts.VAETiling != nil {
		til = *p.opts.VAETiling
	}
	var rng vae.Randn
	if !j.req.PosteriorMean {
		rng = sampler.NewTorchGenerator(j.req.Seed)
	}
	out := make([]*tensor.Tensor, 2)
	s := tensor.NewScope(be)
	err = tensor.Catch(func() {
		out[0] = section.VAEEncodeVideo(s, v, frames, til, rng)
		if end != nil {
			out[1] = section.VAEEncode(s, v, end, til, rng)
		}
	})
	s.Close()
	if err != nil {
		return nil, fmt.Errorf("framepack: VAE encode of the video: %w", err)
	}
	if err := j.release(PartVAE); err != nil {
		return nil, err
	}
	for i, t := range out {
		if t == nil {
			continue
		}
		if err := tensor.NonFiniteError("framepack: vae encode produced non-finite "+[]string{"video", "end"}[i]+" latents", t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// prependFrames is the cropped input frames followed by the new ones.
func prependFrames(input []*section.RGB, f video.Frames) video.Frames {
	out := video.Frames{T: len(input) + f.T, H: f.H, W: f.W}
	out.Pix = make([]uint8, 0, out.T*f.H*f.W*3)
	for _, c := range input {
		out.Pix = append(out.Pix, c.Pix...)
	}
	out.Pix = append(out.Pix, f.Pix...)
	return out
}
