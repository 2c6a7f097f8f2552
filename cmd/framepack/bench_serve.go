package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
)

func init() { benchCommands = append(benchCommands, newBenchServe) }

// benchServeFlags are `framepack bench serve`'s options.
type benchServeFlags struct {
	jobs, clients, listeners, steps int
	seconds                         float64
	resolution                      int
	image, models                   string
	timeout                         time.Duration
}

func newBenchServe() *cobra.Command {
	f := &benchServeFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Load the API of a framepack serve on loopback: jobs from concurrent clients, event listeners; latency, loss, RSS",
		Long: `Start framepack serve (this binary) on a loopback port with a fresh data folder, submit --jobs jobs
from --clients concurrent clients (each job with its own Idempotency-Key, each client reading its
jobs back as it goes) while --listeners clients follow the jobs' event streams, wait for every job
to end, and print one JSON line: the API's p50 and p99 latency (every call but the event streams),
jobs submitted against videos stored (lost: a submitted job with no stored video; duplicated: a job
stored that was not submitted, or one submission stored twice), the events received and the
server's peak RSS. Everything stays on 127.0.0.1, and it stops by itself (--timeout).`,
		Example: `  framepack bench serve
  framepack bench serve --jobs 40 --clients 8 --listeners 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchServe(cmd.Context(), cmd, f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.jobs, "jobs", 200, "jobs to submit")
	fl.IntVar(&f.clients, "clients", 20, "concurrent clients submitting")
	fl.IntVar(&f.listeners, "listeners", 50, "concurrent event-stream listeners")
	fl.IntVar(&f.steps, "steps", 1, "sampler steps per section of each job")
	fl.Float64Var(&f.seconds, "seconds", 0.4, "length of each job's video")
	fl.IntVar(&f.resolution, "resolution", 64, "bucket resolution of each job")
	fl.StringVar(&f.image, "image", "testdata/images/scene.png", "start image of every job")
	fl.StringVar(&f.models, "models", "", "model folder for the server (default: the built-in tiny model)")
	fl.DurationVar(&f.timeout, "timeout", 2*time.Hour, "give up after this long")
	return cmd
}

func runBenchServe(ctx context.Context, cmd *cobra.Command, f *benchServeFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.jobs < 1 || f.clients < 1 || f.listeners < 0 {
		return usagef("--jobs and --clients must be at least 1, --listeners at least 0")
	}
	img, err := os.ReadFile(f.image)
	if err != nil {
		return usagef("--image: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	data, err := os.MkdirTemp("", "framepack-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--max-queued", strconv.Itoa(f.jobs + 10), "--quiet"}
	if f.models != "" {
		args = append(args, "--models", f.models)
	}
	srv := exec.Command(self, args...)
	srv.Env = append(os.Environ(), "FRAMEPACK_TOKEN=")
	if f.models == "" {
		srv.Env = append(srv.Env, "FRAMEPACK_MODELS=")
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return err
	}
	var serverErr bytes.Buffer
	srv.Stderr = &serverErr
	if err := srv.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	defer func() {
		srv.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			srv.Process.Kill()
			<-exited
		}
	}()
	base, err := serverURL(out, exited, &serverErr)
	if err != nil {
		return err
	}

	b := &benchClient{base: base, http: &http.Client{Timeout: time.Minute}}
	t0 := time.Now()
	ids := make(chan string, f.jobs)
	var submitted sync.Map
	var submitErrs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for c := range f.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= f.jobs || ctx.Err() != nil {
					return
				}
				settings := fmt.Sprintf(`{"prompt":"bench job %d","seed":%d,"seconds":%g,"steps":%d,"window":3,"resolution":%d}`,
					n, n, f.seconds, f.steps, f.resolution)
				id, err := b.submit(ctx, settings, img, fmt.Sprintf("bench-%d-%d", c, n))
				if err != nil {
					submitErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				if _, dup := submitted.LoadOrStore(id, n); dup {
					firstErr.CompareAndSwap(nil, fmt.Errorf("two submissions made job %s", id))
				}
				ids <- id
				b.get(ctx, "/api/jobs/"+id)
			}
		}()
	}
	// Listeners follow the jobs' streams as they are submitted, each
	// taking the next job when its stream ends.
	var events atomic.Int64
	var lwg sync.WaitGroup
	lctx, stopListeners := context.WithCancel(ctx)
	defer stopListeners()
	for range f.listeners {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			for {
				select {
				case <-lctx.Done():
					return
				case id := <-ids:
					events.Add(b.follow(lctx, id))
				}
			}
		}()
	}
	wg.Wait()
	// Wait for every job to end.
	var list []servedJobSummary
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("bench serve: the jobs did not end within --timeout %s", f.timeout)
		}
		list, err = b.list(ctx)
		if err == nil {
			open := slices.IndexFunc(list, func(j servedJobSummary) bool { return j.Status == "queued" || j.Status == "running" })
			if open < 0 {
				break
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("bench serve: the server exited:\n%s", serverErr.String())
		case <-time.After(time.Second):
		}
	}
	wall := time.Since(t0)
	stopListeners()
	lwg.Wait()
	rss := processPeakRSS(srv.Process.Pid)

	// Count: every submitted job has one stored video; nothing else is.
	nSubmitted, stored, failed, duplicated := 0, 0, 0, 0
	submitted.Range(func(_, _ any) bool { nSubmitted++; return true })
	seen := map[string]bool{}
	for _, j := range list {
		if seen[j.ID] {
			duplicated++
		}
		seen[j.ID] = true
		if _, ok := submitted.Load(j.ID); !ok {
			duplicated++
			continue
		}
		switch j.Status {
		case "done":
			if j.Result != nil && j.Result.VideoBytes > 0 && b.head(ctx, "/api/jobs/"+j.ID+"/video") {
				stored++
			}
		default:
			failed++
		}
	}
	lost := nSubmitted - stored
	p50, p99 := b.percentiles()
	res := benchResult{"bench": "serve", "jobs": f.jobs, "clients": f.clients, "listeners": f.listeners, "steps": f.steps,
		"seconds": f.seconds, "resolution": f.resolution, "submitted": nSubmitted, "submit_errors": submitErrs.Load(), "stored": stored,
		"failed": failed, "lost": lost, "duplicated": duplicated, "api_calls": b.calls(), "api_p50_ms": p50, "api_p99_ms": p99,
		"events": events.Load(), "wall_s": round3(wall.Seconds()), "jobs_per_min": round3(float64(stored) / wall.Minutes()),
		"server_peak_rss_bytes": rss, "server_peak_rss_mib": round3(float64(rss) / (1 << 20))}
	if err := printResult(cmd.OutOrStdout(), res); err != nil {
		return err
	}
	if e, _ := firstErr.Load().(error); e != nil {
		return fmt.Errorf("bench serve: %w", e)
	}
	if lost != 0 || duplicated != 0 {
		return fmt.Errorf("bench serve: %d jobs lost, %d duplicated", lost, duplicated)
	}
	return nil
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// serverURL reads the URL serve prints when it serves.
func serverURL(out io.Reader, exited <-chan struct{}, stderr *bytes.Buffer) (string, error) {
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[2], "http://") {
			return "", fmt.Errorf("bench serve: the server printed %q", line)
		}
		return strings.TrimSuffix(f[2], "/"), nil
	case <-exited:
		return "", fmt.Errorf("bench serve: the server exited at start:\n%s", stderr.String())
	case <-time.After(2 * time.Minute):
		return "", errors.New("bench serve: the server did not start within 2 minutes")
	}
}

// processPeakRSS is a process's peak resident set (VmHWM), 0 where unknown.
func processPeakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// benchClient calls the API and keeps every call's latency.
type benchClient struct {
	base string
	http *http.Client
	mu   sync.Mutex
	lat  []time.Duration
}

func (b *benchClient) record(d time.Duration) {
	b.mu.Lock()
	b.lat = append(b.lat, d)
	b.mu.Unlock()
}

func (b *benchClient) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.lat)
}

// percentiles are the p50 and p99 latencies in milliseconds.
func (b *benchClient) percentiles() (float64, float64) {
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

func (b *benchClient) do(req *http.Request) (*http.Response, []byte, error) {
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
func (b *benchClient) submit(ctx context.Context, settings string, img []byte, key string) (string, error) {
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

func (b *benchClient) get(ctx context.Context, path string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+path, nil)
	b.do(req)
}

func (b *benchClient) head(ctx context.Context, path string) bool {
	req, _ := http.NewRequestWithContext(ctx, "HEAD", b.base+path, nil)
	resp, _, err := b.do(req)
	return err == nil && resp.StatusCode == http.StatusOK
}

// servedJobSummary is what the bench reads of a listed job.
type servedJobSummary struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Result *struct {
		VideoBytes int64 `json:"video_bytes"`
	} `json:"result"`
}

func (b *benchClient) list(ctx context.Context) ([]servedJobSummary, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"/api/jobs", nil)
	resp, body, err := b.do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/jobs: %d", resp.StatusCode)
	}
	var l struct{ Jobs []servedJobSummary }
	return l.Jobs, json.Unmarshal(body, &l)
}

// follow reads a job's event stream until it ends and returns the events.
func (b *benchClient) follow(ctx context.Context, id string) int64 {
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
