package framepack

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/framepack-go/framepack/tensor"
)

// Checkpoint is what a job needs to go on after a finished section, as
// FramePack's loop carries it from one section to the next: the history
// latents, the state of the noise generator and the video so far, with the
// request settings that fix the sections and their noise. Generate hands
// one out at every StageSectionDone (Progress.Checkpoint); a Request with
// it as Resume runs the sections after it only, and on the CPU makes the
// same video, bit for bit, as the run that never stopped.
//
// The stages before the section loop (text, the VAE encode with its own
// seeded generator, SigLIP) are deterministic and run again on resume; so
// the request must be the same as the checkpointed one (its images
// included), which Generate checks for the settings it can see.
type Checkpoint struct {
	// Section is the count of sections finished, of Sections (the plan's).
	Section, Sections int
	// The request's settings that fix the plan and the noise stream.
	Model            string
	Seed             uint64
	LatentWindowSize int
	Steps            int
	// History is the history latents (section.History.Latents: the
	// generated frames and the zero context frames, or a video
	// extension's input latents, host f32) of which Generated are
	// generated.
	History   *tensor.Tensor
	Generated int
	// VideoLatents is, for a video extension (Request.Video), the input
	// video's latent frames the history holds; 0 for an image's.
	VideoLatents int
	// Noise is the sections' noise generator after this section's draw
	// (sampler.TorchGenerator.MarshalBinary).
	Noise []byte
	// Pixels is the video so far (Progress.Pixels): (1, 3, T, H, W),
	// unclamped, in the VAE's dtype.
	Pixels *tensor.Tensor
}

// checkpointMagic starts a marshalled Checkpoint.
const checkpointMagic = "framepack checkpoint 1\n"

// checkpointHeader is the JSON header of a marshalled Checkpoint; the
// tensors' bytes follow it.
type checkpointHeader struct {
	Section          int       `json:"section"`
	Sections         int       `json:"sections"`
	Model            string    `json:"model"`
	Seed             uint64    `json:"seed"`
	LatentWindowSize int       `json:"window"`
	Steps            int       `json:"steps"`
	Generated        int       `json:"generated"`
	VideoLatents     int       `json:"video_latents,omitempty"`
	Noise            []byte    `json:"noise"`
	History          tensorRef `json:"history"`
	Pixels           tensorRef `json:"pixels"`
}

type tensorRef struct {
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
}

func refOf(t *tensor.Tensor) tensorRef { return tensorRef{DType: t.DType().String(), Shape: t.Shape()} }

// MarshalBinary writes the checkpoint as one self-describing blob (a
// header, then the tensors' little-endian bytes), copying what it needs:
// the checkpoint from a Progress may be marshalled during the call only.
func (c *Checkpoint) MarshalBinary() ([]byte, error) {
	if c == nil || c.History == nil || c.Pixels == nil {
		return nil, errors.New("framepack: an incomplete checkpoint")
	}
	hist, px := tensor.ToHost(c.History), tensor.ToHost(c.Pixels)
	h, err := json.Marshal(checkpointHeader{Section: c.Section, Sections: c.Sections, Model: c.Model, Seed: c.Seed,
		LatentWindowSize: c.LatentWindowSize, Steps: c.Steps, Generated: c.Generated, VideoLatents: c.VideoLatents, Noise: c.Noise,
		History: refOf(hist), Pixels: refOf(px)})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(len(checkpointMagic) + 4 + len(h) + int(hist.Bytes()+px.Bytes()))
	b.WriteString(checkpointMagic)
	binary.Write(&b, binary.LittleEndian, uint32(len(h)))
	b.Write(h)
	b.Write(hist.HostBytes())
	b.Write(px.HostBytes())
	return b.Bytes(), nil
}

// UnmarshalCheckpoint reads what MarshalBinary wrote. The tensors share
// b's memory.
func UnmarshalCheckpoint(b []byte) (*Checkpoint, error) {
	bad := func(format string, args ...any) (*Checkpoint, error) {
		return nil, fmt.Errorf("framepack: not a usable checkpoint: "+format, args...)
	}
	n := len(checkpointMagic)
	if len(b) < n+4 || string(b[:n]) != checkpointMagic {
		return bad("no checkpoint header")
	}
	hl := int(binary.LittleEndian.Uint32(b[n:]))
	b = b[n+4:]
	if hl > len(b) {
		return bad("the header runs past the end")
	}
	var h checkpointHeader
	if err := json.Unmarshal(b[:hl], &h); err != nil {
		return bad("%v", err)
	}
	b = b[hl:]
	take := func(r tensorRef, what string) (*tensor.Tensor, error) {
		dt, err := tensor.ParseDType(r.DType)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		size := int64(dt.Size())
		for _, d := range r.Shape {
			if d < 0 || size*int64(max(d, 1)) > int64(len(b)) {
				return nil, fmt.Errorf("%s %v: more bytes than the checkpoint has", what, r.Shape)
			}
			size *= int64(d)
		}
		t, err := tensor.FromBytes(dt, b[:size], r.Shape...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		b = b[size:]
		return t, nil
	}
	c := &Checkpoint{Section: h.Section, Sections: h.Sections, Model: h.Model, Seed: h.Seed, LatentWindowSize: h.LatentWindowSize,
		Steps: h.Steps, Generated: h.Generated, VideoLatents: h.VideoLatents, Noise: h.Noise}
	var err error
	if c.History, err = take(h.History, "history latents"); err != nil {
		return bad("%v", err)
	}
	if c.Pixels, err = take(h.Pixels, "video so far"); err != nil {
		return bad("%v", err)
	}
	if len(b) != 0 {
		return bad("%d bytes after the tensors", len(b))
	}
	return c, nil
}

// checkpoint is the state after section index (1-based) of l, before the
// next section's noise is drawn; its Pixels are set when the section's
// decode is done.
func (j *job) checkpoint(l *sectionLoop, index int) *Checkpoint {
	noise, _ := l.rnd.MarshalBinary()
	return &Checkpoint{Section: index, Sections: l.plan.Sections, Model: j.req.model(), Seed: j.req.Seed,
		LatentWindowSize: j.req.LatentWindowSize, Steps: j.req.Steps, History: l.history.Latents, Generated: l.history.Generated,
		VideoLatents: l.history.VideoLatents(), Noise: noise}
}

// videoOrImage names what a history of videoLatents input latents extends.
func videoOrImage(videoLatents int) string {
	if videoLatents == 0 {
		return "an image"
	}
	return fmt.Sprintf("a video of %d latent frames", videoLatents)
}

// model is Request.Model with "" read as ModelFramePack.
func (r *Request) model() string {
	if r.Model == "" {
		return ModelFramePack
	}
	return r.Model
}

// resume restores l from Request.Resume, if set, and sets l.from to the
// first section still to run.
func (j *job) resume(l *sectionLoop, h, w int) error {
	c := j.req.Resume
	if c == nil {
		return nil
	}
	req := j.req
	switch {
	case c.History == nil || c.Pixels == nil:
		return errors.New("framepack: resume: an incomplete checkpoint")
	case c.Model != req.model() || c.Seed != req.Seed || c.LatentWindowSize != req.LatentWindowSize || c.Steps != req.Steps:
		return fmt.Errorf("framepack: resume: the checkpoint is of another request (model %s, seed %d, window %d, steps %d; this one: %s, %d, %d, %d)",
			c.Model, c.Seed, c.LatentWindowSize, c.Steps, req.model(), req.Seed, req.LatentWindowSize, req.Steps)
	case c.Sections != l.plan.Sections:
		return fmt.Errorf("framepack: resume: the checkpoint has %d sections, this request %d", c.Sections, l.plan.Sections)
	case c.Section < 1 || c.Section > c.Sections:
		return fmt.Errorf("framepack: resume: the checkpoint is after section %d of %d", c.Section, c.Sections)
	case c.VideoLatents != l.history.VideoLatents():
		return fmt.Errorf("framepack: resume: the checkpoint extends %s, this request %s",
			videoOrImage(c.VideoLatents), videoOrImage(l.history.VideoLatents()))
	}
	// The history's frames that are not generated: the zero context
	// frames, or a video extension's input latents.
	fixed := l.history.Latents.Dim(2) - l.history.Generated
	hs := c.History.Shape()
	if len(hs) != 5 || hs[0] != 1 || hs[1] != 16 || hs[2] != c.Generated+fixed || hs[3] != h || hs[4] != w ||
		c.History.DType() != tensor.F32 {
		return fmt.Errorf("framepack: resume: history latents %v %s with %d generated do not fit this request's %d×%d latents",
			hs, c.History.DType(), c.Generated, w, h)
	}
	ps := c.Pixels.Shape()
	if len(ps) != 5 || ps[0] != 1 || ps[1] != 3 || ps[3] != 8*h || ps[4] != 8*w || c.Pixels.DType() != j.p.dt.vae {
		return fmt.Errorf("framepack: resume: the video so far %v %s does not fit this request's %d×%d %s frames",
			ps, c.Pixels.DType(), 8*w, 8*h, j.p.dt.vae)
	}
	if err := l.rnd.UnmarshalBinary(c.Noise); err != nil {
		return fmt.Errorf("framepack: resume: %w", err)
	}
	// Copies: the history grows by new tensors, but the video so far is
	// freed by the soft append once replaced. The history keeps what the
	// request made of it (its variant, a video extension's input).
	lat := tensor.New(tensor.F32, hs...)
	copy(lat.HostBytes(), tensor.ToHost(c.History).HostBytes())
	l.history.Latents, l.history.Generated = lat, c.Generated
	px := tensor.New(c.Pixels.DType(), ps...)
	copy(px.HostBytes(), tensor.ToHost(c.Pixels).HostBytes())
	l.pixels = l.video.To(px)
	l.from = c.Section
	j.p.log.Info(fmt.Sprintf("sections: resuming after section %d of %d (%d latent frames, %d video frames)", c.Section, c.Sections, c.Generated, ps[2]))
	return nil
}
