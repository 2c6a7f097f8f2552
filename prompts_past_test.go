package framepack

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestTimedPromptPastTheEnd: a part that starts after the video ends is
// left out of the schedule with a warning (Studio's blending by list index
// would mix "a dog" into a section at 25%); a prompt all of whose parts
// start after the end is refused.
func TestTimedPromptPastTheEnd(t *testing.T) {
	var logs bytes.Buffer
	req := DefaultRequest()
	req.Prompt, req.Seconds, req.LatentWindowSize, req.PromptBlend = "[0s: a cat] [30s: a dog]", 1, 2, 4
	j := &job{p: &Pipeline{log: slog.New(slog.NewTextHandler(&logs, nil))}, req: req}
	prompts, err := j.promptSchedule()
	if err != nil {
		t.Fatal(err)
	}
	if len(j.sched) < 2 {
		t.Fatalf("%d sections, want several (the blend is at the second)", len(j.sched))
	}
	for i, s := range j.sched {
		if s.Prompt != "a cat" || s.Alpha != 0 {
			t.Errorf("section %d: %+v, want \"a cat\" alone", i, s)
		}
	}
	if strings.Join(prompts, "|") != "a cat" {
		t.Errorf("prompts to encode %q, want only \"a cat\"", prompts)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), `\"a dog\" starts at 30s, at or after the end of the 1s video: left out`) {
		t.Errorf("no warning:\n%s", logs.String())
	}

	req.Prompt = "[2s: a dog] [5s: a bird]"
	if err := req.ValidateSize(640, 480, false); err == nil || !strings.Contains(err.Error(), "every part starts at or after the end of the 1s video") {
		t.Errorf("every part past the end: %v", err)
	}
}
