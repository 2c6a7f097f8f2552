package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// serveClient calls the API and keeps every call's latency.
type serveClient struct {
	base string
	http *http.Client
	mu   sync.Mutex
	lat  []time.Duration
}

func (b *serveClient) record(d time.Duration) {
	b.mu.Lock()
	b.lat = append(b.lat, d)
	b.mu.Unlock()
}

func (b *serveClient) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lat)
}

// percentiles are the p50 and p99 latencies in milliseconds.
func (b *serveClient) percentiles() (float64, float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lat) == 0 {
		return 0, 0
	}
	s := slices.Clone(b.lat)
	slices.Sort(s)
	at := func(p float64) float64 {
		return round3(float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000)
	}
	return at(0.50), at(0.99)
}

func (b *serveClient) do(req *http.Request) (*http.Response, []byte, error) {
	t := time.Now()
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	b.record(time.Since(t))
	return resp, body, err
}

// submit posts one job and returns its id.
func (b *serveClient) submit(ctx context.Context, settings string, img []byte, key string) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("settings", settings)
	fw, _ := mw.CreateFormFile("image", "image.png")
	fw.Write(img)
	mw.Close()
	req, _ := http.NewRequestWithContext(ctx, "POST", b.base+"/api/jobs", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Idempotency-Key", key)
	resp, rb, err := b.do(req)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST /api/jobs: %d %s", resp.StatusCode, rb)
	}
	var j struct{ ID string }
	if err := json.Unmarshal(rb, &j); err != nil || j.ID == "" {
		return "", fmt.Errorf("POST /api/jobs: %s", rb)
	}
	return j.ID, nil
}

func (b *serveClient) get(ctx context.Context, path string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+path, nil)
	b.do(req)
}

func (b *serveClient) head(ctx context.Context, path string) bool {
	req, _ := http.NewRequestWithContext(ctx, "HEAD", b.base+path, nil)
	resp, _, err := b.do(req)
	return err == nil && resp.StatusCode == http.StatusOK
}

// servedJob is what the bench reads of a listed job.
type servedJob struct {
	ID       string     `json:"id"`
	Status   string     `json:"status"`
	Created  time.Time  `json:"created"`
	Started  *time.Time `json:"started"`
	Finished *time.Time `json:"finished"`
	Attempts int        `json:"attempts"`
	Sections int        `json:"sections"`
	Result   *struct {
		VideoBytes int64   `json:"video_bytes"`
		Frames     int     `json:"frames"`
		Generate   float64 `json:"generate_seconds"`
		Sample     float64 `json:"sample_seconds"`
		Decode     float64 `json:"decode_seconds"`
	} `json:"result"`
}

// line is the job's own line: its times from submission (queued: until a
// worker took it; run: from then to the stored video) and, when done,
// its stages.
func (j servedJob) line() Result {
	r := Result{"bench": "serve_job", "id": j.ID, "status": j.Status, "attempts": j.Attempts, "sections": j.Sections}
	if j.Finished != nil {
		r["submit_to_end_s"] = round3(j.Finished.Sub(j.Created).Seconds())
		if j.Started != nil {
			r["queued_s"] = round3(j.Started.Sub(j.Created).Seconds())
			r["run_s"] = round3(j.Finished.Sub(*j.Started).Seconds())
		}
	}
	if res := j.Result; res != nil {
		r["frames"], r["video_bytes"] = res.Frames, res.VideoBytes
		r["generate_s"], r["sample_s"], r["decode_s"] = round3(res.Generate), round3(res.Sample), round3(res.Decode)
	}
	return r
}

func (b *serveClient) list(ctx context.Context) ([]servedJob, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"/api/jobs", nil)
	resp, body, err := b.do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/jobs: %d", resp.StatusCode)
	}
	var l struct{ Jobs []servedJob }
	return l.Jobs, json.Unmarshal(body, &l)
}

// follow reads a job's event stream until it ends and returns the events.
func (b *serveClient) follow(ctx context.Context, id string) int64 {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"/api/jobs/"+id+"/events", nil)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n int64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "event: ") {
			n++
			if line == "event: end" {
				break
			}
		}
	}
	return n
}
