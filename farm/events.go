package farm

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"
)

// Event types a running job publishes.
const (
	EventProgress     = "progress"      // a stage or a sampler step
	EventPreview      = "preview"       // the latent preview image at a step
	EventSectionVideo = "section-video" // the video so far, stored after a section
)

// Event is a running job's live report, published on core NATS (not
// stored: the job's state holds what must last).
type Event struct {
	Type     string    `json:"type"`
	Job      string    `json:"job"`
	Time     time.Time `json:"time"`
	Stage    string    `json:"stage,omitempty"`
	Section  int       `json:"section,omitempty"`
	Sections int       `json:"sections,omitempty"`
	Step     int       `json:"step,omitempty"`
	Steps    int       `json:"steps,omitempty"`
	Frames   int       `json:"frames,omitempty"`
	// SecondsPerStep is the sampler's recent time per step, and ETA the
	// seconds the job has left at that pace.
	SecondsPerStep float64 `json:"s_per_step,omitempty"`
	ETA            float64 `json:"eta_s,omitempty"`
	// PNG is a preview image (EventPreview), Width×Height.
	PNG    []byte `json:"png,omitempty"`
	Width  int    `json:"width,omitempty"`
	Height int    `json:"height,omitempty"`
	// Seconds is the length of the video so far (EventSectionVideo).
	Seconds float64 `json:"seconds,omitempty"`
	Worker  string  `json:"worker,omitempty"`
}

// Publish sends a running job's event.
func (f *Farm) Publish(e *Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return f.nc.Publish(subjectEvent+e.Job, b)
}

// Events delivers every job's events until the subscription is closed.
func (f *Farm) Events(fn func(*Event)) (*nats.Subscription, error) {
	return f.nc.Subscribe(subjectEvent+">", func(m *nats.Msg) {
		var e Event
		if json.Unmarshal(m.Data, &e) == nil {
			fn(&e)
		}
	})
}
