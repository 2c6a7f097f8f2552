package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/framepack-go/framepack"
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	fh, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(fh.Fd()), unix.TCGETS)
	return err == nil
}

// events writes --json's records: one JSON object a line on stdout.
type events struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *events) emit(kind string, fields map[string]any) {
	if e == nil {
		return
	}
	rec := map[string]any{"event": kind, "time": time.Now().UTC().Format(time.RFC3339Nano)}
	for k, v := range fields {
		rec[k] = v
	}
	b, err := json.Marshal(rec)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "error", "error": err.Error()})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(b, '\n'))
}

// progress reports Generate's progress on stderr: on a terminal a bar
// redrawn in place with the time per step and what is left of the
// section and of the video; otherwise a plain log line per step. --quiet
// silences it; --json adds a "progress" record per report.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	log   *slog.Logger
	tty   bool
	quiet bool
	ev    *events

	start, last time.Time
	stage       string
	pr          framepack.Progress
	// Sampler steps after the first of each section (the first also pays
	// for loading the transformer) give the time per step.
	stepTime  time.Duration
	stepCount int
	// Decodes so far give the time a section's decode takes.
	decodeStart time.Time
	decodeTime  time.Duration
	decodes     int

	drawn bool
	tick  *time.Ticker
	stop  chan struct{}
}

func newProgress(w io.Writer, log *slog.Logger, quiet bool, ev *events) *progress {
	now := time.Now()
	p := &progress{w: w, log: log, tty: isTerminal(w), quiet: quiet, ev: ev, start: now, last: now}
	if p.tty && !quiet {
		termBar.Store(p)
	}
	return p
}

// termBar is the progress line on the terminal, if any: log lines clear
// it before they are written and redraw it after (logWriter).
var termBar atomic.Pointer[progress]

// logWriter is the log's output: stderr, sharing the terminal with the
// progress line.
type logWriter struct{ w io.Writer }

func (l logWriter) Write(b []byte) (int, error) {
	p := termBar.Load()
	if p == nil {
		return l.w.Write(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	n, err := l.w.Write(b)
	if p.drawn {
		p.draw(time.Now())
	}
	return n, err
}

// report is Request.Progress.
func (p *progress) report(pr framepack.Progress) {
	if line, args := p.update(pr); line != "" {
		// Logged without p.mu, which logWriter takes.
		p.log.Info(line, args...)
	}
}

// update takes pr in and draws the terminal line; it returns the log line
// to write when stderr is not a terminal.
func (p *progress) update(pr framepack.Progress) (string, []any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.stage == framepack.StageDecode && pr.Stage != framepack.StageDecode {
		p.decodeTime += now.Sub(p.decodeStart)
		p.decodes++
		p.stopTicker()
	}
	if pr.Stage == framepack.StageSample && pr.Step > 1 {
		p.stepTime += now.Sub(p.last)
		p.stepCount++
	}
	if pr.Stage == framepack.StageDecode && (p.stage != framepack.StageDecode || pr.Tile == 0) {
		p.decodeStart = now
	}
	p.stage, p.pr, p.last = pr.Stage, pr, now

	sps, etaSection, eta := p.estimates(now)
	fields := map[string]any{"stage": pr.Stage, "elapsed": secs(now.Sub(p.start))}
	if pr.Sections > 0 {
		fields["section"], fields["sections"], fields["frames"] = pr.Section, pr.Sections, pr.Frames
	}
	if pr.Stage == framepack.StageDecode && pr.Tiles > 0 {
		fields["tile"], fields["tiles"] = pr.Tile, pr.Tiles
	}
	if pr.Stage == framepack.StageSample {
		fields["step"], fields["steps"] = pr.Step, pr.Steps
		if sps > 0 {
			fields["seconds_per_step"], fields["eta_section"] = secs(sps), secs(etaSection)
		}
	}
	if eta > 0 {
		fields["eta"] = secs(eta)
	}
	p.ev.emit("progress", fields)

	if p.quiet {
		return "", nil
	}
	switch {
	case p.tty:
		p.draw(now)
		if pr.Stage == framepack.StageDecode {
			p.startTicker()
		}
	case pr.Stage == framepack.StageSample:
		msg := fmt.Sprintf("sampling section %d/%d, step %d/%d", pr.Section, pr.Sections, pr.Step, pr.Steps)
		if sps > 0 {
			msg += fmt.Sprintf(", %.2f s/step, section left %s, video left %s", sps.Seconds(), clock(etaSection), clock(eta))
		}
		return msg, []any{"section", pr.Section, "sections", pr.Sections, "step", pr.Step, "steps", pr.Steps, "frames", pr.Frames}
	case pr.Stage == framepack.StageDecode && pr.Tiles > 0:
		return fmt.Sprintf("decoding section %d/%d, tile %d/%d", pr.Section, pr.Sections, pr.Tile, pr.Tiles),
			[]any{"section", pr.Section, "sections", pr.Sections, "tile", pr.Tile, "tiles", pr.Tiles}
	case pr.Stage == framepack.StageDecode:
		return fmt.Sprintf("decoding section %d/%d", pr.Section, pr.Sections), []any{"section", pr.Section, "sections", pr.Sections}
	}
	return "", nil
}

// estimates are the time per sampler step and what is left of the
// section's sampling and of the whole video (0: not known yet).
func (p *progress) estimates(now time.Time) (sps, section, video time.Duration) {
	pr := p.pr
	if p.stepCount > 0 {
		sps = p.stepTime / time.Duration(p.stepCount)
	}
	if pr.Sections == 0 || sps == 0 {
		return sps, 0, 0
	}
	left := pr.Sections - pr.Section // sections after this one
	decodes := left
	if pr.Stage == framepack.StageSample {
		section = time.Duration(pr.Steps-pr.Step) * sps
		decodes++
	}
	video = section + time.Duration(left*pr.Steps)*sps
	if p.decodes > 0 {
		video += time.Duration(decodes) * (p.decodeTime / time.Duration(p.decodes))
		if pr.Stage == framepack.StageDecode {
			video += max(0, p.decodeTime/time.Duration(p.decodes)-now.Sub(p.decodeStart))
		}
	}
	return sps, section, video
}

// draw redraws the terminal line.
func (p *progress) draw(now time.Time) {
	pr := p.pr
	var line string
	sps, etaSection, eta := p.estimates(now)
	elapsed := clock(now.Sub(p.start))
	switch pr.Stage {
	case framepack.StageSample:
		const width = 24
		done := width * pr.Step / max(pr.Steps, 1)
		line = fmt.Sprintf("section %d/%d [%s%s] step %d/%d", pr.Section, pr.Sections,
			strings.Repeat("=", done), strings.Repeat(" ", width-done), pr.Step, pr.Steps)
		if sps > 0 {
			line += fmt.Sprintf(" %.2f s/step, section %s left, video %s left", sps.Seconds(), clock(etaSection), clock(eta))
		}
		line += ", " + elapsed
	case framepack.StageDecode:
		line = fmt.Sprintf("section %d/%d decoding %s", pr.Section, pr.Sections, clock(now.Sub(p.decodeStart)))
		if pr.Tiles > 0 {
			line += fmt.Sprintf(", tile %d/%d", pr.Tile, pr.Tiles)
		}
		if eta > 0 {
			line += fmt.Sprintf(", video %s left", clock(eta))
		}
		line += ", " + elapsed
	default:
		line = pr.Stage + ", " + elapsed
	}
	// \r and clearing to the end of the line: the new line may be shorter.
	fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	p.drawn = true
}

// startTicker redraws the line every second during a decode, which
// reports nothing until it is done.
func (p *progress) startTicker() {
	if p.tick != nil {
		return
	}
	p.tick, p.stop = time.NewTicker(time.Second), make(chan struct{})
	tick, stop := p.tick, p.stop
	go func() {
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				p.mu.Lock()
				if p.tick == tick {
					p.draw(now)
				}
				p.mu.Unlock()
			}
		}
	}()
}

func (p *progress) stopTicker() {
	if p.tick != nil {
		p.tick.Stop()
		close(p.stop)
		p.tick = nil
	}
}

// done ends the progress display.
func (p *progress) done() {
	termBar.CompareAndSwap(p, nil)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stage == framepack.StageDecode {
		p.decodeTime += time.Since(p.decodeStart)
		p.decodes++
		p.stage = ""
	}
	p.stopTicker()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// clock is d as 1:05 or 1:02:05.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
