package framepack

import (
	"context"
	"testing"

	"github.com/framepack-go/framepack/section"
)

// TestGenerateTimedPrompt runs a two-section job whose timed prompt gives
// the first-generated section (the video's end) "A blue boat." and the
// other the kite's prompt: that section's latents must be those of a job
// prompted "A blue boat." throughout, the video as a whole not; a timed
// prompt naming one prompt twice is that prompt. The kite's job is the
// shared one.
func TestGenerateTimedPrompt(t *testing.T) {
	t.Parallel() // its own pipelines; the tests that measure the process run first, alone
	p := loadTiny(t)
	req := smallRequest(testImage(t))
	req.Seconds, req.Steps, req.PromptBlend = 0.8, 2, 0
	plan, err := section.NewPlan(req.Seconds, req.LatentWindowSize)
	if err != nil || plan.Sections != 2 {
		t.Fatalf("plan: %d sections, %v; want 2", plan.Sections, err)
	}
	run := func(prompt string) []float32 {
		t.Helper()
		r := req
		r.Prompt = prompt
		res, err := p.Generate(context.Background(), r)
		if err != nil {
			t.Fatalf("%q: %v", prompt, err)
		}
		return res.Latents.ToFloat32()
	}
	kitePrompt := req.Prompt
	timed := "[0s] " + kitePrompt + " [0.6s] A blue boat."
	spans, _ := section.ParseTimedPrompt(timed)
	sched, err := section.PromptSchedule(spans, req.Seconds, req.LatentWindowSize, 2, 0)
	if err != nil || sched[0].Prompt != "A blue boat." || sched[1].Prompt != kitePrompt {
		t.Fatalf("schedule %+v, %v", sched, err)
	}
	plain := req
	plain.PromptBlend = DefaultRequest().PromptBlend // no timed parts: the same job
	got, boat, kite := run(timed), run("A blue boat."), runShared(t, plain).Latents.ToFloat32()
	same := run("[0s: " + kitePrompt + "] [0.4s: " + kitePrompt + "]")
	// (1, 16, 1 + 2·window, h, w): the last window frames are section 0's.
	per := len(got) / 16 / (1 + 2*req.LatentWindowSize)
	eq := func(a, b []float32, lo, hi int) bool {
		for c := 0; c < 16; c++ {
			off := c * (1 + 2*req.LatentWindowSize) * per
			for i := off + lo*per; i < off+hi*per; i++ {
				if a[i] != b[i] {
					return false
				}
			}
		}
		return true
	}
	n := 1 + 2*req.LatentWindowSize
	if !eq(got, boat, 1+req.LatentWindowSize, n) {
		t.Error("the first-generated section differs from the boat prompt's")
	}
	if eq(got, boat, 1, 1+req.LatentWindowSize) || eq(got, kite, 1+req.LatentWindowSize, n) {
		t.Error("the timed prompt's other section is not its own")
	}
	if !eq(same, kite, 0, n) {
		t.Error("a timed prompt of one text differs from that text")
	}
}
