package framepack

import (
	"fmt"
	"strings"

	"github.com/framepack-go/framepack/section"
)

// promptSchedule reads the request's prompt: the prompts to encode, the
// first the one the first section uses. A timed prompt also sets j.sched.
func (j *job) promptSchedule() ([]string, error) {
	req := j.req
	spans, err := section.ParseTimedPrompt(req.Prompt)
	if err != nil || spans == nil {
		return []string{req.Prompt}, err
	}
	plan, err := section.NewPlan(req.Seconds, req.LatentWindowSize)
	if err != nil {
		return nil, fmt.Errorf("framepack: %w", err)
	}
	spans, past := section.PastTheEnd(spans, req.Seconds)
	for _, sp := range past {
		j.p.log.Warn(fmt.Sprintf("timed prompt: %q starts at %gs, at or after the end of the %gs video: left out", sp.Prompt, sp.Start, req.Seconds))
	}
	j.sched, err = section.PromptSchedule(spans, req.Seconds, req.LatentWindowSize, plan.Sections, req.PromptBlend)
	if err != nil {
		return nil, fmt.Errorf("framepack: %w", err)
	}
	var lines []string
	for i, s := range j.sched {
		lines = append(lines, fmt.Sprintf("%d: %v", i+1, s))
	}
	j.p.log.Info("timed prompt, by section in generation order (the video's end first): " + strings.Join(lines, "; "))
	prompts := section.Prompts(j.sched)
	return prompts, nil
}

// sectionText is section i's text conditioning under a timed prompt,
// padded to the transformer's text width d.
func (j *job) sectionText(i, d int) section.Text {
	s := j.sched[i]
	if s.Alpha > 0 {
		return section.Blend(j.prompts[s.From].Padded(d), j.prompts[s.To].Padded(d), s.Alpha)
	}
	return j.prompts[s.Prompt].Padded(d)
}
