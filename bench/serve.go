package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ServeOptions are bench serve's: the load on a framepack serve of this
// program on loopback.
type ServeOptions struct {
	Jobs, Clients, Listeners int
	Steps                    int     // sampler steps of each job
	Seconds                  float64 // each job's video length
	Resolution               int
	Image                    string        // every job's start image
	Window                   int           // each job's latent window
	Cache                    string        // each job's step cache ("": the server's default)
	Models                   string        // the server's model folder ("": the built-in tiny model)
	Timeout                  time.Duration // give up after this long
	// JobLines prints a line for each job too: its times from submission
	// to stored video, and its sampling and decoding seconds.
	JobLines bool
}

// Serve starts framepack serve on a loopback port with a fresh data folder,
// submits Jobs jobs from Clients concurrent clients while Listeners follow
// the jobs' event streams, waits for every job to end and prints one line:
// the API's latency, the jobs submitted against the videos stored, the
// events and the server's peak RSS. A job lost or stored twice is an error.
func Serve(ctx context.Context, w io.Writer, o ServeOptions) error {
	if o.Jobs < 1 || o.Clients < 1 || o.Listeners < 0 {
		return usagef("--jobs and --clients must be at least 1, --listeners at least 0")
	}
	img, err := os.ReadFile(o.Image)
	if err != nil {
		return usagef("--image: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	srv, err := startServer(o)
	if err != nil {
		return err
	}
	defer srv.stop()
	l := &serveLoad{o: o, img: img, b: &serveClient{base: srv.url, http: &http.Client{Timeout: time.Minute}}, ids: make(chan string, o.Jobs)}
	t0 := time.Now()
	lctx, stopListeners := context.WithCancel(ctx)
	defer stopListeners()
	listeners := l.listen(lctx)
	l.submit(ctx)
	list, err := l.waitEnded(ctx, srv)
	if err != nil {
		return err
	}
	wall := time.Since(t0)
	stopListeners()
	listeners.Wait()
	return l.report(ctx, w, list, wall, processPeakRSS(srv.cmd.Process.Pid))
}

// server is a framepack serve this bench started.
type server struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{}
	stderr bytes.Buffer
}

// startServer starts framepack serve (this program) on a free loopback
// port and waits for the URL it prints.
func startServer(o ServeOptions) (*server, error) {
	data, err := os.MkdirTemp("", "framepack-bench-serve-")
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	args := []string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--max-queued", strconv.Itoa(o.Jobs + 10), "--quiet",
		"--max-storage", strconv.Itoa(storeBytes) + "B"}
	if o.Models != "" {
		args = append(args, "--models", o.Models)
	}
	s := &server{cmd: exec.Command(self, args...), exited: make(chan struct{})}
	s.cmd.Env = append(os.Environ(), "FRAMEPACK_TOKEN=")
	if o.Models == "" {
		s.cmd.Env = append(s.cmd.Env, "FRAMEPACK_MODELS=")
	}
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(data)
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		os.RemoveAll(data)
		close(s.exited)
	}()
	if s.url, err = serverURL(out, s.exited, &s.stderr); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop interrupts the server, killing it after 5 s.
func (s *server) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

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

// serveLoad is the clients' and listeners' work on one server.
type serveLoad struct {
	o          ServeOptions
	img        []byte
	b          *serveClient
	ids        chan string // the jobs submitted, for the listeners
	submitted  sync.Map    // job id → submission
	submitErrs atomic.Int64
	firstErr   atomic.Value
	events     atomic.Int64
}

// submit submits every job from the clients and returns when they are
// done; each client reads its jobs back as it goes.
func (l *serveLoad) submit(ctx context.Context) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for c := range l.o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1)) - 1
				if n >= l.o.Jobs || ctx.Err() != nil {
					return
				}
				settings := l.settings(n)
				id, err := l.b.submit(ctx, settings, l.img, fmt.Sprintf("bench-%d-%d", c, n))
				if err != nil {
					l.submitErrs.Add(1)
					l.firstErr.CompareAndSwap(nil, err)
					continue
				}
				if _, dup := l.submitted.LoadOrStore(id, n); dup {
					l.firstErr.CompareAndSwap(nil, fmt.Errorf("two submissions made job %s", id))
				}
				l.ids <- id
				l.b.get(ctx, "/api/jobs/"+id)
			}
		}()
	}
	wg.Wait()
}

// settings are job n's settings, as JSON.
func (l *serveLoad) settings(n int) string {
	set := map[string]any{"prompt": fmt.Sprintf("bench job %d", n), "seed": n, "seconds": l.o.Seconds,
		"steps": l.o.Steps, "window": l.o.Window, "resolution": l.o.Resolution}
	if l.o.Cache != "" {
		set["cache"] = l.o.Cache
	}
	b, _ := json.Marshal(set)
	return string(b)
}

// listen starts the listeners: they follow the jobs' streams as they are
// submitted, each taking the next job when its stream ends, until ctx ends.
func (l *serveLoad) listen(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range l.o.Listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case id := <-l.ids:
					l.events.Add(l.b.follow(ctx, id))
				}
			}
		}()
	}
	return &wg
}

// waitEnded waits for every job to end and returns the server's list.
func (l *serveLoad) waitEnded(ctx context.Context, srv *server) ([]servedJob, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench serve: the jobs did not end within --timeout %s", l.o.Timeout)
		}
		list, err := l.b.list(ctx)
		if err == nil {
			open := slices.IndexFunc(list, func(j servedJob) bool { return j.Status == "queued" || j.Status == "running" })
			if open < 0 {
				return list, nil
			}
		}
		select {
		case <-srv.exited:
			return nil, fmt.Errorf("bench serve: the server exited:\n%s", srv.stderr.String())
		case <-time.After(time.Second):
		}
	}
}

// report counts the jobs (every submitted job has one stored video;
// nothing else is) and prints the line.
func (l *serveLoad) report(ctx context.Context, w io.Writer, list []servedJob, wall time.Duration, rss int64) error {
	nSubmitted, stored, failed, duplicated := 0, 0, 0, 0
	l.submitted.Range(func(_, _ any) bool { nSubmitted++; return true })
	seen := map[string]bool{}
	for _, j := range list {
		if seen[j.ID] {
			duplicated++
		}
		seen[j.ID] = true
		if _, ok := l.submitted.Load(j.ID); !ok {
			duplicated++
			continue
		}
		switch j.Status {
		case "done":
			if j.Result != nil && j.Result.VideoBytes > 0 && l.b.head(ctx, "/api/jobs/"+j.ID+"/video") {
				stored++
			}
		default:
			failed++
		}
	}
	lost := nSubmitted - stored
	p50, p99 := l.b.percentiles()
	o := l.o
	res := Result{"bench": "serve", "jobs": o.Jobs, "clients": o.Clients, "listeners": o.Listeners, "steps": o.Steps,
		"seconds": o.Seconds, "resolution": o.Resolution, "submitted": nSubmitted, "submit_errors": l.submitErrs.Load(), "stored": stored,
		"failed": failed, "lost": lost, "duplicated": duplicated, "api_calls": l.b.calls(), "api_p50_ms": p50, "api_p99_ms": p99,
		"events": l.events.Load(), "wall_s": round3(wall.Seconds()), "jobs_per_min": round3(float64(stored) / wall.Minutes()),
		"server_peak_rss_bytes": rss, "server_peak_rss_mib": round3(float64(rss) / (1 << 20))}
	if o.JobLines {
		for _, j := range list {
			if err := Print(w, j.line()); err != nil {
				return err
			}
		}
	}
	if err := Print(w, res); err != nil {
		return err
	}
	if e, _ := l.firstErr.Load().(error); e != nil {
		return fmt.Errorf("bench serve: %w", e)
	}
	if lost != 0 || duplicated != 0 {
		return fmt.Errorf("bench serve: %d jobs lost, %d duplicated", lost, duplicated)
	}
	return nil
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
