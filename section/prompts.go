package section

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/framepack-go/framepack/tensor"
)

// PromptSpan is one timed prompt: Prompt from Start seconds until End
// (HasEnd false: until the next prompt, or the video's end).
type PromptSpan struct {
	Prompt     string
	Start, End float64
	HasEnd     bool
}

var (
	// FramePack Studio's tag: [2s: text] or [2s-4s: text].
	studioTag = regexp.MustCompile(`^\[(\d+(?:\.\d+)?)s(?:-(\d+(?:\.\d+)?)s)?\s*:\s*(.*?)\]`)
	// The short form: [2s] or [2s-4s], the text following up to the next tag.
	shortTag = regexp.MustCompile(`^\[(\d+(?:\.\d+)?)s(?:-(\d+(?:\.\d+)?)s)?\]`)
)

// ParseTimedPrompt reads a prompt with timed parts, in FramePack Studio's
// syntax ("[0s: a cat sits] [2s-4s: the cat jumps]") or the short one
// ("[0s] a cat sits [2s] the cat jumps"). Text outside any tag is, as in
// Studio, a prompt for the whole video. A prompt without brackets is not
// timed (nil, nil). A bracket that opens no valid tag, an empty part or an
// end not after its start is an error.
func ParseTimedPrompt(text string) ([]PromptSpan, error) {
	if !strings.Contains(text, "[") && !strings.Contains(text, "]") {
		return nil, nil
	}
	var spans []PromptSpan
	var outside strings.Builder
	rest := text
	for rest != "" {
		i := strings.IndexByte(rest, '[')
		if j := strings.IndexByte(rest, ']'); j >= 0 && (i < 0 || j < i) {
			return nil, fmt.Errorf("timed prompt: unmatched ] in %q", shorten(rest[j:]))
		}
		if i < 0 {
			outside.WriteString(rest)
			break
		}
		outside.WriteString(rest[:i])
		rest = rest[i:]
		var sp PromptSpan
		var m []string
		if m = studioTag.FindStringSubmatch(rest); m != nil {
			sp.Prompt = strings.TrimSpace(m[3])
			rest = rest[len(m[0]):]
		} else if m = shortTag.FindStringSubmatch(rest); m != nil {
			rest = rest[len(m[0]):]
			k := nextTag(rest)
			sp.Prompt = strings.TrimSpace(rest[:k])
			rest = rest[k:]
		} else {
			return nil, fmt.Errorf("timed prompt: %q is not a tag: write [2s: text], [2s-4s: text] or [2s] text", shorten(rest))
		}
		sp.Start, _ = strconv.ParseFloat(m[1], 64)
		if m[2] != "" {
			sp.End, _ = strconv.ParseFloat(m[2], 64)
			sp.HasEnd = true
			if sp.End <= sp.Start {
				return nil, fmt.Errorf("timed prompt: %q ends at %gs, not after its start", shorten(m[0]), sp.End)
			}
		}
		if sp.Prompt == "" {
			return nil, fmt.Errorf("timed prompt: %q has no text", shorten(m[0]))
		}
		if strings.ContainsAny(sp.Prompt, "[]") {
			return nil, fmt.Errorf("timed prompt: %q: brackets inside a part", shorten(sp.Prompt))
		}
		spans = append(spans, sp)
	}
	if s := strings.TrimSpace(outside.String()); s != "" {
		spans = append(spans, PromptSpan{Prompt: s})
	}
	return spans, nil
}

// PastTheEnd splits spans into those that start before a video of the
// given length ends and those that start at or after its end, which no
// section shows. Studio keeps the latter in its list, where its blending
// by list index can still mix one into a section; framepack leaves them
// out (and says so).
func PastTheEnd(spans []PromptSpan, seconds float64) (within, past []PromptSpan) {
	for _, sp := range spans {
		if sp.Start >= seconds {
			past = append(past, sp)
		} else {
			within = append(within, sp)
		}
	}
	return within, past
}

// nextTag is the offset of the next bracket in s (a tag, or an error the
// caller reports), len(s) when none.
func nextTag(s string) int {
	if i := strings.IndexAny(s, "[]"); i >= 0 {
		return i
	}
	return len(s)
}

func shorten(s string) string {
	if r := []rune(s); len(r) > 40 {
		return string(r[:40]) + "…"
	}
	return s
}

// SectionPrompt is the text conditioning of one generated section: Prompt,
// or, when Alpha > 0, (1−Alpha)·From + Alpha·To (the LLaMA states, padded,
// and the pooled CLIP output; the mask is From's).
type SectionPrompt struct {
	Prompt   string
	From, To string
	Alpha    float64
}

// PromptSchedule gives each of n sections (in generation order: FramePack
// generates the video's end first) its prompt, as FramePack Studio's worker
// does for its "Original" model: the spans' ends filled in (the next
// span's start, the last one's the video's length), snapped to multiples
// of a section's duration (latent_window_size·4−3 frames at 30 fps, half
// to even), reversed in time; section k, at (k·window·4−3)/30 s of the
// reversed video (0.01 s for the first), takes the first span holding that
// time. With blend > 0 a section whose index equals that of a span where
// the prompt changes (not the first) mixes the two prompts with alpha
// 1/blend, as Studio's worker does.
func PromptSchedule(spans []PromptSpan, seconds float64, window, n, blend int) ([]SectionPrompt, error) {
	if len(spans) == 0 {
		return nil, fmt.Errorf("timed prompt: no prompt")
	}
	ss := append([]PromptSpan(nil), spans...)
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })
	for i := range ss {
		if !ss[i].HasEnd {
			ss[i].End, ss[i].HasEnd = seconds, true
			if i+1 < len(ss) {
				ss[i].End = ss[i+1].Start
			}
		}
	}
	d := float64(window*4-3) / 30
	for i := range ss {
		ss[i].Start = math.RoundToEven(ss[i].Start/d) * d
		ss[i].End = math.RoundToEven(ss[i].End/d) * d
		if ss[i].End <= ss[i].Start {
			ss[i].End = ss[i].Start + d
		}
	}
	for i := range ss {
		ss[i].Start, ss[i].End = seconds-ss[i].End, seconds-ss[i].Start
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].Start < ss[j].Start })

	type change struct {
		idx    int
		prompt string
	}
	var changes []change
	for i, s := range ss {
		if i == 0 || s.Prompt != ss[i-1].Prompt {
			changes = append(changes, change{i, s.Prompt})
		}
	}
	out := make([]SectionPrompt, n)
	for k := range out {
		t := float64(k*window*4-3) / 30
		if t < 0 {
			t = 0.01
		}
		cur := ss[0].Prompt
		for _, s := range ss {
			if s.Start <= t && t < s.End {
				cur = s.Prompt
				break
			}
		}
		out[k].Prompt = cur
		if blend <= 0 || len(ss) < 2 {
			continue
		}
		for i, c := range changes {
			if k < c.idx {
				break
			}
			if k == c.idx {
				if i > 0 && changes[i-1].prompt != c.prompt {
					out[k].From, out[k].To, out[k].Alpha = changes[i-1].prompt, c.prompt, 1/float64(blend)
				}
				break
			}
		}
	}
	return out, nil
}

// String is the section's prompt with the weight of each part when it
// blends two: `75% "a kite" + 25% "a boat"`.
func (s SectionPrompt) String() string {
	if s.Alpha > 0 {
		return fmt.Sprintf("%.0f%% %q + %.0f%% %q", 100*(1-s.Alpha), s.From, 100*s.Alpha, s.To)
	}
	return fmt.Sprintf("%q", s.Prompt)
}

// Prompts lists the schedule's distinct prompts in first use.
func Prompts(sched []SectionPrompt) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range sched {
		for _, p := range []string{s.Prompt, s.From, s.To} {
			if p != "" && !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// Blend is (1−alpha)·a + alpha·b of the embeddings and pooled outputs,
// with a's mask.
func Blend(a, b Text, alpha float64) Text {
	mix := func(x, y []float32) []float32 {
		o := make([]float32, len(x))
		for i := range x {
			o[i] = float32(1-alpha)*x[i] + float32(alpha)*y[i]
		}
		return o
	}
	return Text{
		Embeds: tensorLike(a.Embeds, mix(a.Embeds.Float32s(), b.Embeds.Float32s())),
		Mask:   a.Mask,
		Pooled: tensorLike(a.Pooled, mix(a.Pooled.Float32s(), b.Pooled.Float32s())),
	}
}

func tensorLike(t *tensor.Tensor, v []float32) *tensor.Tensor {
	return tensor.FromFloat32(v, t.Shape()...)
}
