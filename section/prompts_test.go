package section

import (
	"math"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/internal/testutil/golden"
	"github.com/framepack-go/framepack/tensor"
)

func TestParseTimedPrompt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []PromptSpan
	}{
		{"a cat sits", nil},
		{"[0s] a cat sits [2s] the cat jumps", []PromptSpan{{Prompt: "a cat sits"}, {Prompt: "the cat jumps", Start: 2}}},
		{"[0s: a cat sits] [2.5s-4s: the cat jumps]", []PromptSpan{{Prompt: "a cat sits"}, {Prompt: "the cat jumps", Start: 2.5, End: 4, HasEnd: true}}},
		{"a dog runs [3s: the dog stops] fast", []PromptSpan{{Prompt: "the dog stops", Start: 3}, {Prompt: "a dog runs  fast"}}},
		// The short form's text runs to the next tag; text before the first
		// tag and after a [..: ..] tag is Studio's text outside tags.
		{"intro [1s] then [2s-3s: flash] after", []PromptSpan{{Prompt: "then", Start: 1}, {Prompt: "flash", Start: 2, End: 3, HasEnd: true}, {Prompt: "intro  after"}}},
	} {
		got, err := ParseTimedPrompt(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%q: %+v, want %+v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q: part %d %+v, want %+v", c.in, i, got[i], c.want[i])
			}
		}
	}
	for _, c := range []struct{ in, want string }{
		{"[0s a cat", "is not a tag"},
		{"[x] a cat", "is not a tag"},
		{"[-1s] a cat", "is not a tag"},
		{"[2] a cat", "is not a tag"},
		{"a cat] sits", "unmatched ]"},
		{"[0s] [2s] jumps", "has no text"},
		{"[0s: ] a cat", "has no text"},
		{"[3s-2s: back] a", "not after its start"},
		{"[2s-2s] still", "not after its start"},
	} {
		_, err := ParseTimedPrompt(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.in, err, c.want)
		}
	}
}

// TestGoldenPromptSchedule checks each section's prompt and blend against
// FramePack Studio's (bench/reference/make_golden_prompt_schedule.py).
func TestGoldenPromptSchedule(t *testing.T) {
	for _, c := range golden.Cases(t, "prompt_schedule") {
		var scheds []struct {
			Prompt   string  `json:"prompt"`
			Seconds  float64 `json:"seconds"`
			Window   int     `json:"window"`
			Blend    int     `json:"blend"`
			Sections []struct {
				Prompt, From, To string
				Alpha            float64
			} `json:"sections"`
		}
		c.Param("schedules", &scheds)
		if len(scheds) == 0 {
			t.Fatal("no schedules")
		}
		for _, s := range scheds {
			spans, err := ParseTimedPrompt(s.Prompt)
			if err != nil {
				t.Errorf("%q: %v", s.Prompt, err)
				continue
			}
			plan, err := NewPlan(s.Seconds, s.Window)
			if err != nil {
				t.Fatal(err)
			}
			if plan.Sections != len(s.Sections) {
				t.Errorf("%q %gs window %d: %d sections, Studio has %d", s.Prompt, s.Seconds, s.Window, plan.Sections, len(s.Sections))
				continue
			}
			got, err := PromptSchedule(spans, s.Seconds, s.Window, plan.Sections, s.Blend)
			if err != nil {
				t.Errorf("%q: %v", s.Prompt, err)
				continue
			}
			for k, w := range s.Sections {
				g := got[k]
				if g.Prompt != w.Prompt || g.From != w.From || g.To != w.To || math.Abs(g.Alpha-w.Alpha) > 1e-12 {
					t.Errorf("%q %gs window %d blend %d, section %d: %+v, Studio %+v", s.Prompt, s.Seconds, s.Window, s.Blend, k, g, w)
				}
			}
		}
	}
}

func TestBlend(t *testing.T) {
	a := Text{Embeds: tensor.FromFloat32([]float32{1, 2, 0, 0}, 1, 2, 2), Mask: tensor.FromFloat32([]float32{1, 0}, 1, 2), Pooled: tensor.FromFloat32([]float32{4}, 1, 1)}
	b := Text{Embeds: tensor.FromFloat32([]float32{3, 6, 8, 8}, 1, 2, 2), Mask: tensor.FromFloat32([]float32{1, 1}, 1, 2), Pooled: tensor.FromFloat32([]float32{0}, 1, 1)}
	m := Blend(a, b, 0.25)
	for i, w := range []float32{1.5, 3, 2, 2} {
		if got := m.Embeds.Float32s()[i]; got != w {
			t.Errorf("embeds[%d] = %v, want %v", i, got, w)
		}
	}
	if m.Pooled.Float32s()[0] != 3 || m.Mask.Float32s()[1] != 0 {
		t.Errorf("pooled %v mask %v, want 3 and a's mask", m.Pooled.Float32s(), m.Mask.Float32s())
	}
}

func TestPastTheEnd(t *testing.T) {
	spans, err := ParseTimedPrompt("[0s: a cat] [0.5s: a dog] [1s: a bird] [30s: a fish] outside")
	if err != nil {
		t.Fatal(err)
	}
	within, past := PastTheEnd(spans, 1)
	var in, out []string
	for _, s := range within {
		in = append(in, s.Prompt)
	}
	for _, s := range past {
		out = append(out, s.Prompt)
	}
	if strings.Join(in, "|") != "a cat|a dog|outside" || strings.Join(out, "|") != "a bird|a fish" {
		t.Errorf("within %q, past %q", in, out)
	}
}
