package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/testmode"
	"github.com/framepack-go/framepack/section"
)

// decodeMode is how a simulated job runs each section's decode but the
// last (which always runs in line).
type decodeMode int

const (
	decodeInline    decodeMode = iota // FramePack's loop: decode, then the next section
	decodeBesideCPU                   // the whole decode on its own goroutine beside the next sampling
	decodeBesideGPU                   // the decode in line, then the next sampling (only the soft append beside it)
)

func (m decodeMode) String() string { return [...]string{"in line", "beside (CPU)", "beside (GPU)"}[m] }

// timedReport is a progress report at a time from the job's start.
type timedReport struct {
	at time.Duration
	pr framepack.Progress
}

// simulateJob lists the reports Generate makes, with their times, for a
// job of plan's sections of steps steps at step per step whose decodes
// take fixed plus perFrame a video frame, in tiles tiles, run as mode
// says; and the job's end.
func simulateJob(plan section.Plan, steps int, step, fixed, perFrame time.Duration, tiles int, mode decodeMode) ([]timedReport, time.Duration) {
	frames := sectionDecodeFrames(plan)
	n := plan.Sections
	var reps []timedReport
	var t time.Duration
	emit := func(pr framepack.Progress) {
		pr.Sections = n
		reps = append(reps, timedReport{t, pr})
	}
	type pending struct {
		section int
		end     time.Duration
		st      framepack.SectionStats
	}
	var prev *pending
	video := 0 // frames so far
	emit(framepack.Progress{Stage: framepack.StageTextEncode})
	t += 2 * time.Second
	emit(framepack.Progress{Stage: framepack.StageVAEEncode})
	t += time.Second
	emit(framepack.Progress{Stage: framepack.StageImageEncode})
	t += time.Second
	for s := 1; s <= n; s++ {
		sampleStart := t
		for k := 1; k <= steps; k++ {
			t += step
			emit(framepack.Progress{Stage: framepack.StageSample, Section: s, Step: k, Steps: steps})
		}
		sampled := t - sampleStart
		if prev != nil {
			wait := max(0, prev.end-t)
			t += wait
			prev.st.DecodeWait = wait
			emit(framepack.Progress{Stage: framepack.StageSectionDone, Section: prev.section, Frames: prev.st.Frames, Stats: &prev.st})
			prev = nil
		}
		d := fixed + perFrame*time.Duration(frames(s))
		video += frames(s)
		if s > 1 {
			video -= plan.WindowSize*4 - 3 // the soft append's overlap
		}
		st := framepack.SectionStats{Index: s, Sample: sampled, Decode: d, Frames: video}
		emit(framepack.Progress{Stage: framepack.StageDecode, Section: s, Tiles: tiles})
		if s < n && mode == decodeBesideCPU {
			st.DecodeOverlapped = true
			prev = &pending{section: s, end: t + d, st: st}
			continue
		}
		start := t
		for k := 1; k <= tiles; k++ {
			t = start + d*time.Duration(k)/time.Duration(tiles)
			emit(framepack.Progress{Stage: framepack.StageDecode, Section: s, Tile: k, Tiles: tiles})
		}
		if s < n && mode == decodeBesideGPU {
			st.DecodeOverlapped, st.DecodeInline = true, d
			prev = &pending{section: s, end: t, st: st}
			continue
		}
		emit(framepack.Progress{Stage: framepack.StageSectionDone, Section: s, Frames: video, Stats: &st})
	}
	return reps, t
}

// TestETACoversDecoding replays simulated jobs whose decodes take far
// longer than their sampling (a fixed part and a part per frame), in line
// and beside the next section's sampling (as on a CPU and on a GPU), and
// compares at every report the time left that the progress shows with the
// time the job really had left. Once the decodes left are of sizes timed
// before (or two sizes were), the estimate must be within 2% (and one
// step); once any decode or tile was timed, within 50%; before, it must
// say that it leaves the decodes out.
func TestETACoversDecoding(t *testing.T) {
	const steps, step = 10, 100 * time.Millisecond
	for _, c := range []struct {
		seconds float64
		window  int
		mode    decodeMode
		tiles   int
	}{
		{3, 3, decodeInline, 1},
		{3, 3, decodeBesideCPU, 1},
		{3, 3, decodeBesideGPU, 4},
		{5, 9, decodeBesideCPU, 1},
		{1, 9, decodeInline, 1}, // one section: its decode is most of the job
		{1, 9, decodeInline, 6},
	} {
		plan, err := section.NewPlan(c.seconds, c.window)
		if err != nil {
			t.Fatal(err)
		}
		// A decode costs 2 s and as much per frame as three steps: the
		// decodes are most of the job, as on a CPU.
		reps, end := simulateJob(plan, steps, step, 2*time.Second, 3*step, c.tiles, c.mode)
		var e etaModel
		e.frames = sectionDecodeFrames(plan)
		var worstExact, worstRough float64
		knownAt := time.Duration(-1)
		start := time.Now()
		for _, r := range reps {
			e.observe(r.pr, start.Add(r.at))
			left, known := e.left(start.Add(r.at))
			truth := end - r.at
			timed := len(e.decodes) > 0
			for _, d := range e.running {
				timed = timed || d.done > 0
			}
			sizes := map[int]bool{}
			for _, d := range e.decodes {
				sizes[d.frames] = true
			}
			exact := len(sizes) >= 2
			if len(sizes) == 1 {
				exact = true
				for i := e.decoded + 1; i <= plan.Sections; i++ {
					exact = exact && sizes[e.framesOf(i)]
				}
			}
			off := math.Abs(float64(left - truth))
			switch {
			case !e.stepped():
				if known || left != 0 {
					t.Errorf("%v s, %v: %v left, known %v before a step was timed", c.seconds, c.mode, left, known)
				}
			case known:
				if knownAt < 0 {
					knownAt = r.at
				}
				bound, worst := 0.5*float64(truth)+float64(step), &worstRough
				if exact {
					bound, worst = 0.02*float64(truth)+float64(step), &worstExact
				}
				if off > bound {
					t.Errorf("%v s, %v, at %v (%s %d/%d step %d tile %d): %v left, really %v", c.seconds, c.mode, r.at, r.pr.Stage,
						r.pr.Section, r.pr.Sections, r.pr.Step, r.pr.Tile, left, truth)
				}
				*worst = max(*worst, off/float64(truth+1))
			case timed && e.sections > 1 && c.mode == decodeBesideCPU && len(e.decodes) == 0:
				// Beside the sampling, the first decode reports no tiles.
			case timed:
				t.Errorf("%v s, %v, at %v: a decode was timed, yet the estimate leaves the decodes out", c.seconds, c.mode, r.at)
			}
			if !known && left > truth {
				t.Errorf("%v s, %v, at %v: the sampling alone leaves %v, more than the %v left", c.seconds, c.mode, r.at, left, truth)
			}
		}
		t.Logf("%v s (%d sections), decodes %v in %d tiles: job %v; estimate known from %v; worst error %.1f%% from one decode size, %.1f%% once the sizes left were timed",
			c.seconds, plan.Sections, c.mode, c.tiles, end, knownAt, 100*worstRough, 100*worstExact)
		if knownAt < 0 {
			t.Errorf("%v s, %v: the estimate never covered the decodes", c.seconds, c.mode)
		}
	}
}

// TestProgressLines: on a pipe the default output is one line per
// finished stage and a plain line per step, the first decode's report
// names its tiles, and nothing says "tile 0/0".
func TestProgressLines(t *testing.T) {
	plan, _ := section.NewPlan(0.8, 3)
	reps, _ := simulateJob(plan, 3, 100*time.Millisecond, 0, 300*time.Millisecond, 1, decodeBesideCPU)
	var out bytes.Buffer
	start := time.Now()
	clockAt := start
	p := &progress{w: &out, log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return clockAt }, start: start, stageStart: start}
	p.forRequest(framepack.Request{Seconds: 0.8, LatentWindowSize: 3})
	for _, r := range reps {
		clockAt = start.Add(r.at)
		p.report(r.pr)
	}
	p.done()
	got := out.String()
	for _, want := range []string{
		"text encode: 2.00 s\n", "vae encode: 1.00 s\n", "image encode and transformer load: 1.10 s\n",
		"sampling section 1/2, step 1/3\n",
		"sampling section 2/2, step 2/3, 0.10 s/step, video 0:00 + decoding left\n",
		"section 1/2: 9 frames, sampled in 0.30 s, decoded in 2.70 s beside the next section\n",
		"decoding section 2/2, video 0:05 left\n",
		"section 2/2: 25 frames, sampled in 0.30 s, decoded in 7.50 s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "tile 0") {
		t.Errorf("a tile count of 0:\n%s", got)
	}
	for d, want := range map[time.Duration]string{0: "0:00", 65 * time.Second: "1:05", 3725 * time.Second: "1:02:05"} {
		if got := clock(d); got != want {
			t.Errorf("clock(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestPromptSections: a timed prompt's schedule is printed with the share
// of each prompt where two blend (Studio's blend_sections: the section
// where the prompt changes takes 1/blend of the new one).
func TestPromptSections(t *testing.T) {
	got := promptSections("[0s: a] [1s: b]", 5, 9, 4)
	// Studio's own schedule (the golden case prompt_schedule checks it):
	// snapped to 1.1 s sections and reversed, "a" holds no section alone.
	want := `prompts by section, the video's end first: 1: "b"; 2: 75% "b" + 25% "a"; 3: "b"; 4: "b"`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := promptSections("a kite", 5, 9, 4); got != "" {
		t.Errorf("a plain prompt: %q", got)
	}
}

// TestETARealRun runs a job on the tiny model whose decodes are most of it
// (five sections at 128, the decodes beside the sampling) and compares
// each --json eta with the time the job really had left, logging them.
// Once two decode sizes have been timed (after the second section), every
// eta must be within half the time left and 2 s. Real timings vary with
// the machine's load, so the bound is loose; the full suite runs it.
func TestETARealRun(t *testing.T) {
	if !testmode.Full() {
		t.Skipf("a 20-second job; %s=1 runs it (TestETACoversDecoding checks the estimate on simulated jobs)", testmode.Env)
	}
	tinyEnv(t)
	out := filepath.Join(t.TempDir(), "eta.mp4")
	stdout, err := runCLI(t, context.Background(), "generate", "--image", sceneImage, "--seconds", "2", "--window", "3", "--steps", "6",
		"--json", "-o", out)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Event, Stage  string
		Time          time.Time
		Section, Step int
		ETA           *float64
	}
	var recs []rec
	var end time.Time
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Event == "progress" {
			recs = append(recs, r)
			if r.Stage == framepack.StageSectionDone {
				end = r.Time
			}
		}
	}
	done := 0
	for _, r := range recs {
		truth := end.Sub(r.Time).Seconds()
		if r.Stage == framepack.StageSectionDone {
			done++
		}
		if r.ETA == nil {
			if done > 0 {
				t.Errorf("section %d %s: no eta after a decode was timed", r.Section, r.Stage)
			}
			continue
		}
		t.Logf("%s section %d step %d: eta %.1f s, really %.1f s left (%+.0f%%)", r.Stage, r.Section, r.Step, *r.ETA, truth,
			100*(*r.ETA-truth)/max(truth, 0.5))
		if done >= 2 && math.Abs(*r.ETA-truth) > 0.5*truth+2 {
			t.Errorf("%s section %d step %d: eta %.1f s, really %.1f s left", r.Stage, r.Section, r.Step, *r.ETA, truth)
		}
	}
}
