package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/section"
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

// levelNotice is the log level of the command's own short lines for the
// user (the tiny model in use, a random seed, the video's length): shown
// plainly by default, hidden by --quiet, in the structured log with -v.
const levelNotice = slog.LevelInfo + 2

// notice logs msg at levelNotice.
func notice(log *slog.Logger, msg string) { log.Log(context.Background(), levelNotice, msg) }

// plainHandler is the log by default: notices as they are, warnings and
// errors with their level, and nothing else (the structured log, with
// times and fields, is -v's).
type plainHandler struct {
	w   io.Writer
	min slog.Level
}

func (h plainHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

func (h plainHandler) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	switch {
	case r.Level >= slog.LevelError:
		line = "error: " + line
	case r.Level >= slog.LevelWarn:
		line = "warning: " + line
	}
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	_, err := io.WriteString(h.w, line+"\n")
	return err
}

func (h plainHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h plainHandler) WithGroup(string) slog.Handler      { return h }

// levelName names levelNotice in the structured log.
func levelName(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l == levelNotice {
			a.Value = slog.StringValue("NOTE")
		}
	}
	return a
}

// progress reports Generate's progress on stderr. On a terminal: a bar
// redrawn in place (the section, the step, the time per step and what is
// left of the video), and above it one short line per finished stage.
// Elsewhere: those lines and a plain line per sampler step. With -v the
// step lines go to the structured log; --quiet silences it all; --json adds
// a "progress" record per report.
type progress struct {
	mu      sync.Mutex
	w       io.Writer
	log     *slog.Logger
	tty     bool
	quiet   bool
	verbose bool
	ev      *events
	now     func() time.Time // the clock (tests set it)

	start      time.Time
	stage      string
	stageStart time.Time
	pr         framepack.Progress
	eta        etaModel

	drawn bool
	tick  *time.Ticker
	stop  chan struct{}
}

func newProgress(w io.Writer, log *slog.Logger, quiet bool, ev *events) *progress {
	now := time.Now()
	p := &progress{w: w, log: log, tty: isTerminal(w), quiet: quiet, verbose: log.Enabled(context.Background(), slog.LevelDebug),
		ev: ev, now: time.Now, start: now, stageStart: now}
	if p.tty && !quiet {
		termBar.Store(p)
	}
	return p
}

// forRequest tells the estimate the request's sections and steps.
func (p *progress) forRequest(req framepack.Request) {
	newPlan := section.NewPlan
	if req.Model == framepack.ModelF1 {
		newPlan = section.NewForwardPlan
	}
	if plan, err := newPlan(req.Seconds, req.LatentWindowSize); err == nil {
		p.eta.frames = sectionDecodeFrames(plan)
	}
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
		p.draw(p.now())
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

// update takes pr in, prints the lines of finished stages and draws the
// terminal line; it returns the structured log line to write (-v).
func (p *progress) update(pr framepack.Progress) (string, []any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	p.eta.observe(pr, now)
	if !p.quiet {
		p.finishedStage(pr, now)
	}
	if pr.Stage != p.stage {
		p.stage, p.stageStart = pr.Stage, now
	}
	if pr.Stage == framepack.StageSectionDone {
		// Not a stage of its own on the bar: the next report follows at once.
		p.stopTicker()
		p.ev.emit("progress", p.fields(pr, now))
		return "", nil
	}
	p.pr = pr

	p.ev.emit("progress", p.fields(pr, now))
	if p.quiet {
		return "", nil
	}
	left, known := p.eta.left(now)
	var msg string
	var args []any
	switch {
	case pr.Stage == framepack.StageSample:
		msg = fmt.Sprintf("sampling section %d/%d, step %d/%d", pr.Section, pr.Sections, pr.Step, pr.Steps)
		if sps := p.eta.secondsPerStep(); sps > 0 {
			msg += fmt.Sprintf(", %.2f s/step, %s", sps.Seconds(), leftText(left, known))
		}
		args = []any{"section", pr.Section, "sections", pr.Sections, "step", pr.Step, "steps", pr.Steps, "frames", pr.Frames}
	case pr.Stage == framepack.StageDecode:
		msg = fmt.Sprintf("decoding section %d/%d", pr.Section, pr.Sections)
		args = []any{"section", pr.Section, "sections", pr.Sections}
		if pr.Tile > 0 {
			msg += fmt.Sprintf(", tile %d/%d", pr.Tile, pr.Tiles)
			args = append(args, "tile", pr.Tile, "tiles", pr.Tiles)
		}
		if known || left > 0 {
			msg += ", " + leftText(left, known)
		}
	default:
		return "", nil
	}
	switch {
	case p.tty:
		p.draw(now)
		if _, waiting := p.eta.awaited(pr); pr.Stage == framepack.StageDecode || waiting {
			p.startTicker()
		} else {
			p.stopTicker()
		}
	case p.verbose:
		return msg, args
	default:
		p.println(msg)
	}
	return "", nil
}

// fields are pr's --json progress record.
func (p *progress) fields(pr framepack.Progress, now time.Time) map[string]any {
	fields := map[string]any{"stage": pr.Stage, "elapsed": secs(now.Sub(p.start))}
	if pr.Sections > 0 {
		fields["section"], fields["sections"], fields["frames"] = pr.Section, pr.Sections, pr.Frames
	}
	if pr.Stage == framepack.StageDecode && pr.Tiles > 0 {
		fields["tile"], fields["tiles"] = pr.Tile, pr.Tiles
	}
	sps := p.eta.secondsPerStep()
	if pr.Stage == framepack.StageSample {
		fields["step"], fields["steps"] = pr.Step, pr.Steps
		if sps > 0 {
			fields["seconds_per_step"], fields["eta_section"] = secs(sps), secs(time.Duration(pr.Steps-pr.Step)*sps)
		}
	}
	// eta covers everything left, decodes included; until a decode's time
	// is known it is absent and eta_sampling says what the sampling alone
	// leaves.
	if left, known := p.eta.left(now); known {
		fields["eta"] = secs(left)
	} else if sps > 0 {
		fields["eta_sampling"] = secs(left)
	}
	return fields
}

// leftText is what is left of the video, for the progress lines.
func leftText(left time.Duration, known bool) string {
	if !known {
		// No decode has been timed yet: the sampling left, and the decodes.
		return "video " + clock(left) + " + decoding left"
	}
	return "video " + clock(left) + " left"
}

// finishedStage prints the line of the stage pr ends, if any: an encoder,
// or a section (at StageSectionDone, with its sampling and decode times).
func (p *progress) finishedStage(pr framepack.Progress, now time.Time) {
	switch {
	case pr.Stage == framepack.StageSectionDone:
		line := fmt.Sprintf("section %d/%d: %d frames", pr.Section, pr.Sections, pr.Frames)
		if st := pr.Stats; st != nil {
			line += fmt.Sprintf(", sampled in %s, decoded in %s", dur(st.Sample), dur(st.Decode))
			if st.DecodeOverlapped {
				line += " beside the next section"
			}
		}
		p.println(line)
	case pr.Stage == p.stage || p.stage == "" || p.stage == framepack.StageSample || p.stage == framepack.StageDecode ||
		p.stage == framepack.StageSectionDone:
	case pr.Stage == framepack.StageSample:
		// The time up to the first step: the image encode and, when it
		// was not loaded beside the encoders, the transformer's load.
		p.println(fmt.Sprintf("%s and transformer load: %s", p.stage, dur(now.Sub(p.stageStart))))
	default:
		p.println(fmt.Sprintf("%s: %s", p.stage, dur(now.Sub(p.stageStart))))
	}
}

// println writes a line above the terminal's bar (or as it is elsewhere).
func (p *progress) println(line string) {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintln(p.w, line)
	if p.drawn {
		p.draw(p.now())
	}
}

// draw redraws the terminal line.
func (p *progress) draw(now time.Time) {
	pr := p.pr
	var line string
	left, known := p.eta.left(now)
	switch pr.Stage {
	case framepack.StageSample:
		if r, ok := p.eta.awaited(pr); ok {
			// The section is sampled; the previous one's decode, beside
			// it, is not done yet.
			line = fmt.Sprintf("section %d/%d decoding %s (section %d sampled)", r.section, pr.Sections, clock(now.Sub(r.start)), pr.Section)
			if p.eta.stepped() {
				line += ", " + leftText(left, known)
			}
			break
		}
		const width = 20
		done := width * pr.Step / max(pr.Steps, 1)
		line = fmt.Sprintf("section %d/%d [%s%s] step %d/%d", pr.Section, pr.Sections,
			strings.Repeat("=", done), strings.Repeat(" ", width-done), pr.Step, pr.Steps)
		if sps := p.eta.secondsPerStep(); sps > 0 {
			line += fmt.Sprintf(", %.2f s/step, %s", sps.Seconds(), leftText(left, known))
		}
	case framepack.StageDecode:
		line = fmt.Sprintf("section %d/%d decoding %s", pr.Section, pr.Sections, clock(now.Sub(p.stageStart)))
		if pr.Tiles > 1 {
			line += fmt.Sprintf(", tile %d/%d", pr.Tile, pr.Tiles)
		}
		if known || left > 0 {
			line += ", " + leftText(left, known)
		}
	default:
		line = pr.Stage + " " + clock(now.Sub(p.stageStart))
	}
	// \r and clearing to the end of the line: the new line may be shorter.
	fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	p.drawn = true
}

// startTicker redraws the line every second during a decode, which
// reports nothing until a tile is done.
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
			case <-tick.C:
				p.mu.Lock()
				if p.tick == tick {
					p.draw(p.now())
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
	p.stopTicker()
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// etaModel estimates what is left of a job from its progress reports: the
// sampler steps left at the time a step takes, and the decodes left at the
// time a decoded frame takes. A decode beside the next section's sampling
// adds only what outlasts that sampling (and the part of it that runs in
// line, before the sampling starts, as a GPU's does).
type etaModel struct {
	// frames gives the video frames section i's decode makes (nil: all
	// decodes are taken to be alike).
	frames func(i int) int

	sections, steps int
	sampled         int       // the section sampling, or sampled last
	step            int       // its last step reported
	lastStep        time.Time // when
	stepTime        time.Duration
	stepCount       int // steps timed: not a section's first, which pays for loading

	decodes []timedDecode // finished decodes
	// Finished decodes that ran beside the next sampling: their time and
	// the part of it in line.
	besideTime, inlineTime time.Duration
	beside                 int
	decoded                int // the last section whose decode is done
	running                []runningDecode
}

// timedDecode is a finished decode: the frames it made and its time.
type timedDecode struct {
	frames int
	time   time.Duration
}

// decodeTime estimates a decode of frames from the finished ones (ok false
// when none is): the mean of those of its size; else a line through the
// sizes timed (a decode has a fixed part and a part per frame), once two
// are; else, from one size, the square root of the frames' ratio, between
// the fixed part alone and all of it per frame.
func (e *etaModel) decodeTime(frames int) (time.Duration, bool) {
	bySize := map[int][]time.Duration{}
	for _, d := range e.decodes {
		bySize[d.frames] = append(bySize[d.frames], d.time)
	}
	mean := func(ts []time.Duration) float64 {
		var sum time.Duration
		for _, t := range ts {
			sum += t
		}
		return float64(sum) / float64(len(ts))
	}
	if ts := bySize[frames]; len(ts) > 0 {
		return time.Duration(mean(ts)), true
	}
	switch len(bySize) {
	case 0:
		return 0, false
	case 1:
		for f, ts := range bySize {
			return time.Duration(mean(ts) * math.Sqrt(float64(frames)/float64(f))), true
		}
	}
	// Least squares over the sizes' means: t = a + b·frames, a, b ≥ 0.
	var n, sx, sy, sxx, sxy float64
	for f, ts := range bySize {
		x, y := float64(f), mean(ts)
		n, sx, sy, sxx, sxy = n+1, sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	b := max(0, (n*sxy-sx*sy)/(n*sxx-sx*sx))
	a := max(0, (sy-b*sx)/n)
	return time.Duration(a + b*float64(frames)), true
}

// runningDecode is a decode reported started and not yet done.
type runningDecode struct {
	section     int
	start, tile time.Time // started; its last tile done
	done, tiles int
	beside      bool // the next section's sampling has begun
}

func (e *etaModel) observe(pr framepack.Progress, now time.Time) {
	if pr.Sections > 0 {
		e.sections = pr.Sections
	}
	switch pr.Stage {
	case framepack.StageSample:
		if pr.Section == e.sampled && pr.Step > 1 && pr.Step == e.step+1 {
			e.stepTime += now.Sub(e.lastStep)
			e.stepCount++
		}
		e.sampled, e.step, e.steps, e.lastStep = pr.Section, pr.Step, pr.Steps, now
		for i := range e.running {
			if e.running[i].section < pr.Section {
				e.running[i].beside = true
			}
		}
	case framepack.StageDecode:
		if pr.Tile == 0 {
			e.running = append(e.running, runningDecode{section: pr.Section, start: now, tiles: pr.Tiles})
			return
		}
		for i := range e.running {
			if r := &e.running[i]; r.section == pr.Section {
				r.done, r.tiles, r.tile = pr.Tile, pr.Tiles, now
			}
		}
	case framepack.StageSectionDone:
		for i, r := range e.running {
			if r.section == pr.Section {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.decoded = max(e.decoded, pr.Section)
		if st := pr.Stats; st != nil {
			e.decodes = append(e.decodes, timedDecode{e.framesOf(pr.Section), st.Decode})
			if st.DecodeOverlapped {
				e.beside++
				e.besideTime += st.Decode
				e.inlineTime += st.DecodeInline
			}
		}
	}
}

func (e *etaModel) framesOf(i int) int {
	if e.frames == nil {
		return 1
	}
	return max(e.frames(i), 1)
}

// awaited is the decode beside pr's section, when pr is its last step:
// the job waits for that decode before going on.
func (e *etaModel) awaited(pr framepack.Progress) (runningDecode, bool) {
	if pr.Stage != framepack.StageSample || pr.Step < pr.Steps {
		return runningDecode{}, false
	}
	for _, r := range e.running {
		if r.section < pr.Section {
			return r, true
		}
	}
	return runningDecode{}, false
}

// stepped reports whether a step has been timed.
func (e *etaModel) stepped() bool { return e.stepCount > 0 }

// secondsPerStep is the mean time of the timed steps (0: none yet).
func (e *etaModel) secondsPerStep() time.Duration {
	if e.stepCount == 0 {
		return 0
	}
	return e.stepTime / time.Duration(e.stepCount)
}

// decodeEstimate is a decode's time for its frames: from the finished
// ones; before any, the running one's pace once a tile of it is done, per
// frame (ok false while there is none).
func (e *etaModel) decodeEstimate() func(frames int) (d time.Duration, ok bool) {
	if len(e.decodes) > 0 {
		return e.decodeTime
	}
	estimate := func(int) (time.Duration, bool) { return 0, false }
	for _, r := range e.running {
		if r.done > 0 && r.tiles > 0 {
			perFrame := float64(r.tile.Sub(r.start)) * float64(r.tiles) / float64(r.done) / float64(e.framesOf(r.section))
			estimate = func(frames int) (time.Duration, bool) { return time.Duration(perFrame * float64(frames)), true }
		}
	}
	return estimate
}

// left is the time left of the job at now; known is false while it
// leaves out a decode whose time cannot be estimated yet (none has
// finished, and the running one has no tile done), and 0, false before any
// step is timed.
func (e *etaModel) left(now time.Time) (left time.Duration, known bool) {
	sps := e.secondsPerStep()
	if sps == 0 || e.sections == 0 {
		return 0, false
	}
	known = true
	// The sampling: the steps left of the section being sampled (none once
	// its decode has begun), then every later section.
	stepsHere := 0
	if e.step < e.steps {
		stepsHere = e.steps - e.step
	}
	for _, r := range e.running {
		if r.section == e.sampled {
			stepsHere = 0 // the section's decode has begun
		}
	}
	left = time.Duration(stepsHere+(e.sections-e.sampled)*e.steps) * sps
	window := time.Duration(stepsHere) * sps // the sampling a running decode can hide behind

	// The part of a decode that runs in line, for those beside a sampling.
	inline := 1.0
	if e.beside > 0 && e.besideTime > 0 {
		inline = float64(e.inlineTime) / float64(e.besideTime)
	}
	overlaps := e.beside > 0
	estimate := e.decodeEstimate()
	// What a decode of d adds to the job's time, when it has a sampling of
	// window beside it (and runs in line when it is the last, or none has
	// been seen beside one).
	adds := func(d, window time.Duration, last bool) time.Duration {
		if last || !overlaps {
			return d
		}
		in := time.Duration(inline * float64(d))
		return in + max(0, d-in-window)
	}
	latest := e.decoded
	for _, r := range e.running {
		latest = max(latest, r.section)
		elapsed := now.Sub(r.start)
		// The finished decodes say more than this one's first tiles, which
		// differ in size; its tiles' pace serves until a decode is done,
		// or once it runs past what the others say.
		total, ok := estimate(e.framesOf(r.section))
		if r.done > 0 && r.tiles > 0 && (len(e.decodes) == 0 || elapsed > total) {
			total, ok = time.Duration(float64(r.tile.Sub(r.start))*float64(r.tiles)/float64(r.done)), true
		}
		if !ok {
			known = false
			continue
		}
		rest := max(0, total-elapsed)
		if r.beside || r.section < e.sections && overlaps {
			// Its in-line part is over once the sampling beside it began.
			if r.beside {
				left += max(0, rest-window)
			} else {
				left += adds(rest, time.Duration(e.steps)*sps, false)
			}
			continue
		}
		left += rest
	}
	for i := latest + 1; i <= e.sections; i++ {
		d, ok := estimate(e.framesOf(i))
		if !ok {
			known = false
			break
		}
		left += adds(d, time.Duration(e.steps)*sps, i == e.sections)
	}
	return left, known
}

// sectionDecodeFrames gives the video frames plan's section i (1-based, in
// generation order) decodes: the whole history after the first section
// (its window, with the start latent when it is also the last or the
// sections run forward), then section.Plan.DecodeLatents'.
func sectionDecodeFrames(plan section.Plan) func(i int) int {
	return func(i int) int {
		if i < 1 || i > plan.Sections {
			return 0
		}
		n, _ := plan.DecodeLatents(i - 1)
		if i == 1 {
			n = plan.WindowSize
			if plan.Forward || plan.Sections == 1 {
				n++
			}
		}
		return section.PixelFrames(n)
	}
}

// dur is d for the stage lines: 0.42 s, 12.3 s, 1:05.
func dur(d time.Duration) string {
	switch s := d.Seconds(); {
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 60:
		return fmt.Sprintf("%.1f s", s)
	}
	return clock(d)
}

// clock is d as 1:05 or 1:02:05.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
