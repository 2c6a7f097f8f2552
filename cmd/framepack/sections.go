package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/video"
)

// sectionWriter is --write-sections: after every section but the last it
// writes the video so far to the output, as FramePack's worker does, on its
// own goroutine so that the next section samples meanwhile. Writes are
// whole-file replacements (a temporary renamed over the path), one at a
// time and in order; the last section's write is the job's own.
type sectionWriter struct {
	ctx  context.Context
	out  videoOutput
	opts video.Options
	log  *slog.Logger

	done  chan struct{} // closed when the running write ends; nil when none runs
	err   error         // the first failed write
	wrote bool          // a write replaced the output
}

func newSectionWriter(ctx context.Context, out videoOutput, opts video.Options, log *slog.Logger) *sectionWriter {
	return &sectionWriter{ctx: ctx, out: out, opts: opts, log: log}
}

// report starts the write of the video so far at each StageSectionDone
// before the last.
func (w *sectionWriter) report(pr framepack.Progress) {
	if pr.Stage != framepack.StageSectionDone || pr.Section >= pr.Sections || pr.Pixels == nil {
		return
	}
	// Converted now: Pixels is valid only during the call.
	frames, err := video.FromPixels(pr.Pixels)
	if err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("the video after section %d: %w", pr.Section, err)
		}
		return
	}
	if w.wait() != nil {
		return
	}
	done := make(chan struct{})
	w.done = done
	go func() {
		defer close(done)
		if err := w.out.write(w.ctx, frames, w.opts, w.log); err != nil {
			w.err = fmt.Errorf("writing the video after section %d of %d: %w", pr.Section, pr.Sections, err)
			return
		}
		w.wrote = true
		notice(w.log, fmt.Sprintf("wrote %s: %d frames after section %d of %d", w.out.path, frames.T, pr.Section, pr.Sections))
	}()
}

// wait waits for the running write and returns the first failure.
func (w *sectionWriter) wait() error {
	if w.done != nil {
		<-w.done
		w.done = nil
	}
	return w.err
}

// discard removes what the section writes left when the job fails, so
// that a failed job leaves no video that looks finished.
func (w *sectionWriter) discard() {
	w.wait()
	if w.wrote {
		if err := os.RemoveAll(w.out.path); err != nil {
			w.log.Warn("removing the partial video: " + err.Error())
		}
	}
}
