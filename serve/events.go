package serve

import (
	"fmt"
	"net/http"
	"time"

	"github.com/framepack-go/framepack/farm"
)

// sse starts a server-sent event stream.
func sse(w http.ResponseWriter) (http.Flusher, bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported here")
		return nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	fl.Flush()
	return fl, true
}

func writeEvent(w http.ResponseWriter, m message) error {
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, m.data)
	return err
}

// jobEvents is GET /api/jobs/{id}/events: the job's state, then its live
// progress, preview and section-video events as they come, until it ends
// (an "end" event) or the client goes.
func (s *Server) jobEvents(w http.ResponseWriter, r *http.Request) {
	j := s.job(w, r)
	if j == nil {
		return
	}
	l, first := s.hub.listen(j.ID)
	defer s.hub.unlisten(j.ID, l)
	if len(first) == 0 {
		// The hub has not seen the job yet: its state as read.
		first = []message{{event: "state", data: mustJSON(viewOf(j))}}
	}
	fl, ok := sse(w)
	if !ok {
		return
	}
	ended := func(m message) bool {
		if m.event == "deleted" {
			return true
		}
		if m.event != "state" {
			return false
		}
		var st struct{ Status string }
		if json_ := m.data; len(json_) > 0 {
			unmarshal(json_, &st)
		}
		return farm.Finished(st.Status)
	}
	for _, m := range first {
		if writeEvent(w, m) != nil {
			return
		}
		if ended(m) {
			writeEvent(w, message{event: "end", data: []byte(`{}`)})
			fl.Flush()
			return
		}
	}
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
		case m := <-l.ch:
			if writeEvent(w, m) != nil {
				return
			}
			if ended(m) {
				writeEvent(w, message{event: "end", data: []byte(`{}`)})
				fl.Flush()
				return
			}
			fl.Flush()
		}
	}
}

// allEvents is GET /api/events: every job's state changes ("state" and
// "deleted" events), for a page's queue and history.
func (s *Server) allEvents(w http.ResponseWriter, r *http.Request) {
	l, _ := s.hub.listen("")
	defer s.hub.unlisten("", l)
	fl, ok := sse(w)
	if !ok {
		return
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
		case m := <-l.ch:
			if writeEvent(w, m) != nil {
				return
			}
			fl.Flush()
		}
	}
}
