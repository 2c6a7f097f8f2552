package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"sync"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/video"
)

// reporter turns a job's Progress into live events, and each finished
// section into a stored checkpoint, a state update and the video so far.
// The section work runs on its own goroutine, in order, so the next
// section samples meanwhile.
type reporter struct {
	w   *Worker
	l   *farm.Lease
	log *slog.Logger

	// The sampler's pace, for s/step and the time left.
	stepAt     time.Time
	perStep    float64 // seconds, smoothed
	decodeAt   time.Time
	perDecode  float64 // seconds per section's decode, smoothed
	section    int
	sections   int
	steps      int
	resumeFrom int

	sections_ chan sectionDone
	done      chan struct{}
	mu        sync.Mutex
	savedAt   int // the last section whose checkpoint is stored
	// started: the other ranks were told to run the job.
	started bool
}

type sectionDone struct {
	section, sections int
	checkpoint        []byte
	frames            video.Frames
	fps               int
}

func newReporter(w *Worker, l *farm.Lease, log *slog.Logger) *reporter {
	r := &reporter{w: w, l: l, log: log, sections_: make(chan sectionDone, 64), done: make(chan struct{}), savedAt: l.Job.Section}
	go r.saveLoop()
	return r
}

// resumed notes the checkpoint the job goes on from.
func (r *reporter) resumed(c *framepack.Checkpoint) {
	r.resumeFrom = c.Section
	r.savedAt = c.Section
}

// wait waits for the sections' work to be done.
func (r *reporter) wait() {
	if r.sections_ != nil {
		close(r.sections_)
		r.sections_ = nil
		<-r.done
	}
}

// saved is the last section whose checkpoint is stored.
func (r *reporter) saved() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.savedAt
}

func (r *reporter) publish(e *farm.Event) {
	e.Job, e.Worker = r.l.Job.ID, r.w.cfg.Name
	if err := r.w.f.Publish(e); err != nil {
		r.log.Debug("publishing an event: " + err.Error())
	}
}

// progress is the job's Request.Progress.
func (r *reporter) progress(pr framepack.Progress) {
	now := time.Now()
	ev := &farm.Event{Type: farm.EventProgress, Stage: pr.Stage, Section: pr.Section, Sections: pr.Sections,
		Step: pr.Step, Steps: pr.Steps, Frames: pr.Frames}
	switch pr.Stage {
	case framepack.StageSample:
		if pr.Step > 1 && !r.stepAt.IsZero() {
			d := now.Sub(r.stepAt).Seconds()
			if r.perStep == 0 {
				r.perStep = d
			} else {
				r.perStep = 0.7*r.perStep + 0.3*d
			}
		}
		r.stepAt = now
		r.section, r.sections, r.steps = pr.Section, pr.Sections, pr.Steps
		if pr.Step == 1 && !r.decodeAt.IsZero() {
			r.decodeAt = time.Time{}
		}
	case framepack.StageDecode:
		if pr.Tile == 0 {
			r.decodeAt = now
		}
	case framepack.StageSectionDone:
		if !r.decodeAt.IsZero() {
			d := now.Sub(r.decodeAt).Seconds()
			if r.perDecode == 0 {
				r.perDecode = d
			} else {
				r.perDecode = 0.5*r.perDecode + 0.5*d
			}
			r.decodeAt = time.Time{}
		}
		r.sectionDone(pr)
	}
	ev.SecondsPerStep = r.perStep
	ev.ETA = r.eta(pr)
	r.publish(ev)
	if pr.Stage == framepack.StageSample && pr.Denoised != nil {
		r.preview(pr)
	}
}

// eta is the time left: the steps left at the sampler's pace and a
// decode for each section left.
func (r *reporter) eta(pr framepack.Progress) float64 {
	if r.perStep == 0 || r.sections == 0 {
		return 0
	}
	left := r.steps - pr.Step
	if pr.Stage != framepack.StageSample {
		left = 0
	}
	sectionsLeft := r.sections - r.section
	left += sectionsLeft * r.steps
	return float64(left)*r.perStep + float64(sectionsLeft+1)*r.perDecode
}

// preview publishes the latent preview of a sampler step.
func (r *reporter) preview(pr framepack.Progress) {
	im, err := pr.PreviewRGB()
	if err != nil {
		r.log.Debug("preview: " + err.Error())
		return
	}
	img := &image.NRGBA{Pix: make([]uint8, 4*im.W*im.H), Stride: 4 * im.W, Rect: image.Rect(0, 0, im.W, im.H)}
	for i := 0; i < im.W*im.H; i++ {
		copy(img.Pix[4*i:4*i+3], im.Pix[3*i:3*i+3])
		img.Pix[4*i+3] = 255
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&b, img); err != nil {
		return
	}
	r.publish(&farm.Event{Type: farm.EventPreview, Section: pr.Section, Sections: pr.Sections, Step: pr.Step, Steps: pr.Steps,
		PNG: b.Bytes(), Width: im.W, Height: im.H})
}

// sectionDone copies what the section's work needs (the Progress's
// tensors are valid only during the call) and hands it on.
func (r *reporter) sectionDone(pr framepack.Progress) {
	if pr.Checkpoint == nil || r.sections_ == nil {
		return
	}
	b, err := pr.Checkpoint.MarshalBinary()
	if err != nil {
		r.log.Warn("checkpoint: " + err.Error())
		return
	}
	sd := sectionDone{section: pr.Section, sections: pr.Sections, checkpoint: b, fps: framepack.FPS}
	if pr.Section < pr.Sections && pr.Pixels != nil {
		if sd.frames, err = video.FromPixels(pr.Pixels); err != nil {
			r.log.Warn("the video so far: " + err.Error())
		}
	}
	r.sections_ <- sd
}

// saveLoop stores each finished section: its checkpoint, then the job's
// state, then the video so far.
func (r *reporter) saveLoop() {
	defer close(r.done)
	ctx := context.Background()
	id := r.l.Job.ID
	for sd := range r.sections_ {
		cancel := false
		_, err := r.l.PutFile(ctx, farm.FileCheckpoint, sd.checkpoint, func(j *farm.Job) error {
			j.Section, j.Sections = sd.section, sd.sections
			for len(j.SectionWorkers) < sd.sections {
				j.SectionWorkers = append(j.SectionWorkers, "")
			}
			j.SectionWorkers = j.SectionWorkers[:sd.sections]
			j.SectionWorkers[sd.section-1] = r.w.cfg.Name
			cancel = j.CancelRequested
			return nil
		})
		if errors.Is(err, farm.ErrLost) {
			// Another worker runs the job now: this run stops.
			r.log.Warn(fmt.Sprintf("job %s: another worker took it over after section %d; stopping here", id, sd.section))
			r.w.mu.Lock()
			if r.w.current == id && r.w.cancel != nil {
				r.w.cancel(farm.ErrLost)
			}
			r.w.mu.Unlock()
			continue
		}
		if err != nil {
			r.log.Warn(fmt.Sprintf("job %s: storing the checkpoint after section %d: %v", id, sd.section, err))
			continue
		}
		r.mu.Lock()
		r.savedAt = sd.section
		r.mu.Unlock()
		if cancel {
			// The cancel message may have gone before this worker listened.
			r.w.mu.Lock()
			if r.w.current == id && r.w.cancel != nil {
				r.w.cancel(errCancelled)
			}
			r.w.mu.Unlock()
			continue
		}
		if sd.frames.T == 0 {
			continue
		}
		mp4, err := encodeMP4(ctx, r.w.cfg.TempDir, sd.frames, sd.fps, r.l.Job.Settings.CRF, "")
		if err == nil {
			_, err = r.l.PutFile(ctx, farm.FilePartial, mp4, nil)
		}
		if err != nil {
			r.log.Warn(fmt.Sprintf("job %s: the video after section %d: %v", id, sd.section, err))
			continue
		}
		r.publish(&farm.Event{Type: farm.EventSectionVideo, Section: sd.section, Sections: sd.sections, Frames: sd.frames.T,
			Seconds: float64(sd.frames.T) / float64(sd.fps)})
	}
}
