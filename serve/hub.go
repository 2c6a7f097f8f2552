package serve

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/framepack-go/framepack/farm"
	"github.com/nats-io/nats.go"
)

// hub keeps every job's state (from the state bucket's watch) and the
// running jobs' latest live events (from their subjects), and fans both
// out to the clients listening: any number of tabs see the same thing,
// and one that connects late gets the latest first.
type hub struct {
	mu    sync.Mutex
	jobs  map[string]*farm.Job
	live  map[string]*live
	subs  map[string]map[*listener]struct{} // by job id; "" for every job's state
	sub   *nats.Subscription
	stop  context.CancelFunc
	ready <-chan struct{}
	// rev is the state bucket's revision of the last change seen;
	// advanced is closed (and replaced) whenever it grows.
	rev      uint64
	advanced chan struct{}
}

// live is a running job's latest events.
type live struct {
	progress, preview, video *farm.Event
}

// listener is one client's event stream.
type listener struct {
	ch chan message
}

// message is one server-sent event.
type message struct {
	event string
	data  []byte
}

func newHub(f *farm.Farm) (*hub, error) {
	h := &hub{jobs: map[string]*farm.Job{}, live: map[string]*live{}, subs: map[string]map[*listener]struct{}{},
		advanced: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	ready, err := f.Watch(ctx, h.state)
	if err != nil {
		cancel()
		return nil, err
	}
	h.ready = ready
	if h.sub, err = f.Events(h.event); err != nil {
		cancel()
		return nil, err
	}
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
	}
	return h, nil
}

func (h *hub) close() {
	h.stop()
	if h.sub != nil {
		h.sub.Unsubscribe()
	}
}

// state records a job's new state (nil: deleted) and sends it on.
func (h *hub) state(id string, j *farm.Job, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev > h.rev {
		h.rev = rev
		close(h.advanced)
		h.advanced = make(chan struct{})
	}
	if j == nil {
		delete(h.jobs, id)
		delete(h.live, id)
		h.send(id, message{event: "deleted", data: mustJSON(map[string]string{"id": id})}, true)
		return
	}
	h.jobs[id] = j
	if j.Status != farm.Running {
		delete(h.live, id)
	}
	h.send(id, message{event: "state", data: mustJSON(viewOf(j))}, true)
}

// event records a running job's live event and sends it on.
func (h *hub) event(e *farm.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if j := h.jobs[e.Job]; j != nil && farm.Finished(j.Status) {
		return // a late event of a job that ended
	}
	lv := h.live[e.Job]
	if lv == nil {
		lv = &live{}
		h.live[e.Job] = lv
	}
	switch e.Type {
	case farm.EventProgress:
		lv.progress = e
	case farm.EventPreview:
		lv.preview = e
	case farm.EventSectionVideo:
		lv.video = e
	}
	h.send(e.Job, message{event: e.Type, data: eventJSON(e)}, false)
}

// eventJSON is an event as clients get it: a section video with its URL.
func eventJSON(e *farm.Event) []byte {
	if e.Type != farm.EventSectionVideo {
		return mustJSON(e)
	}
	return mustJSON(struct {
		*farm.Event
		URL string `json:"url"`
	}{e, sectionVideoURL(e.Job, e.Section)})
}

func sectionVideoURL(id string, section int) string {
	return "/api/jobs/" + id + "/video/partial?section=" + itoa(section)
}

// send delivers m to job id's listeners, and to every-job listeners when
// all is set. A listener too slow to keep up loses events (it re-syncs
// when it reconnects). Called with h.mu held.
func (h *hub) send(id string, m message, all bool) {
	for l := range h.subs[id] {
		select {
		case l.ch <- m:
		default:
		}
	}
	if all {
		for l := range h.subs[""] {
			select {
			case l.ch <- m:
			default:
			}
		}
	}
}

// listen adds a listener to job id's events ("" for every job's state)
// and returns, atomically with it, what it must be sent first.
func (h *hub) listen(id string) (*listener, []message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := &listener{ch: make(chan message, 256)}
	if h.subs[id] == nil {
		h.subs[id] = map[*listener]struct{}{}
	}
	h.subs[id][l] = struct{}{}
	var first []message
	if id == "" {
		return l, nil
	}
	if j := h.jobs[id]; j != nil {
		first = append(first, message{event: "state", data: mustJSON(viewOf(j))})
		if lv := h.live[id]; lv != nil {
			for _, e := range []*farm.Event{lv.progress, lv.preview, lv.video} {
				if e != nil {
					first = append(first, message{event: e.Type, data: eventJSON(e)})
				}
			}
		}
	}
	return l, first
}

func (h *hub) unlisten(id string, l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[id], l)
	if len(h.subs[id]) == 0 {
		delete(h.subs, id)
	}
}

// job is a job's state as the hub last saw it.
func (h *hub) job(id string) *farm.Job {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.jobs[id]
}

// seen waits until the hub has seen the state bucket's revision rev (so
// that a list read after a change shows it), ctx ends or wait passes.
func (h *hub) seen(ctx context.Context, rev uint64, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		h.mu.Lock()
		have, advanced := h.rev, h.advanced
		h.mu.Unlock()
		if have >= rev {
			return true
		}
		select {
		case <-advanced:
		case <-ctx.Done():
			return false
		case <-timer.C:
			return false
		}
	}
}

// progress is a running job's latest progress event.
func (h *hub) progress(id string) *farm.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	if lv := h.live[id]; lv != nil {
		return lv.progress
	}
	return nil
}

// list is every job, running first, then the queue in its order, then
// the finished ones newest first.
func (h *hub) list() []*farm.Job {
	h.mu.Lock()
	var running, queued, finished []*farm.Job
	for _, j := range h.jobs {
		switch j.Status {
		case farm.Running:
			running = append(running, j)
		case farm.Queued:
			queued = append(queued, j)
		default:
			finished = append(finished, j)
		}
	}
	h.mu.Unlock()
	slices.SortFunc(running, func(a, b *farm.Job) int { return a.Created.Compare(b.Created) })
	farm.QueueOrder(queued)
	slices.SortFunc(finished, func(a, b *farm.Job) int {
		ta, tb := a.Created, b.Created
		if a.Finished != nil {
			ta = *a.Finished
		}
		if b.Finished != nil {
			tb = *b.Finished
		}
		return tb.Compare(ta)
	})
	return slices.Concat(running, queued, finished)
}

// counts are the jobs by status.
func (h *hub) counts() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := map[string]int{farm.Queued: 0, farm.Running: 0, farm.Done: 0, farm.Failed: 0, farm.Cancelled: 0}
	for _, j := range h.jobs {
		c[j.Status]++
	}
	return c
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
