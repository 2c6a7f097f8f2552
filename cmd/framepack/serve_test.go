package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveProc is a `framepack serve` child process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServe starts the built command's serve on a free loopback port
// with its data in data, and waits until it serves.
func startServe(t *testing.T, data string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(cliBinary(t), append([]string{"serve", "-v", "--listen", "127.0.0.1:0", "--data", data}, args...)...)
	cmd.Env = append(os.Environ(), "FRAMEPACK_MODELS=", "FRAMEPACK_TOKEN=", "XDG_CACHE_HOME="+cacheDir(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
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
		// "framepack serve: http://127.0.0.1:PORT/ with …"
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(f[2], "http://") {
			t.Fatalf("serve printed %q", line)
		}
		p.url = strings.TrimSuffix(f[2], "/")
	case <-p.exited:
		t.Fatalf("serve exited at start:\n%s", p.stderr)
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not start within 2 minutes:\n%s", p.stderr)
	}
	return p
}

// servedJob is what the test reads of a job.
type servedJob struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Section   int    `json:"section"`
	Sections  int    `json:"sections"`
	ResumedAt int    `json:"resumed_at"`
	Attempts  int    `json:"attempts"`
	Error     string `json:"error"`
	Result    *struct {
		Frames       int    `json:"frames"`
		VideoSHA256  string `json:"video_sha256"`
		FramesSHA256 string `json:"frames_sha256"`
	} `json:"result"`
}

func (p *serveProc) submit(t *testing.T, settings string) servedJob {
	t.Helper()
	img, err := os.ReadFile(stripImage(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	mw.WriteField("settings", settings)
	fw, _ := mw.CreateFormFile("image", "scene.png")
	fw.Write(img)
	mw.Close()
	resp, err := http.Post(p.url+"/api/jobs", mw.FormDataContentType(), &b)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var j servedJob
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &j) != nil {
		t.Fatalf("POST /api/jobs: %d %s", resp.StatusCode, body)
	}
	return j
}

func (p *serveProc) job(t *testing.T, id string) servedJob {
	t.Helper()
	resp, err := http.Get(p.url + "/api/jobs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var j servedJob
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &j) != nil {
		t.Fatalf("GET job %s: %d %s", id, resp.StatusCode, body)
	}
	return j
}

// wait polls job id until cond holds.
func (p *serveProc) wait(t *testing.T, id string, d time.Duration, cond func(servedJob) bool) servedJob {
	t.Helper()
	end := time.Now().Add(d)
	for {
		j := p.job(t, id)
		if cond(j) {
			return j
		}
		if j.Status == "failed" || j.Status == "cancelled" {
			t.Fatalf("job %s %s: %s", id, j.Status, j.Error)
		}
		if time.Now().After(end) {
			t.Fatalf("job %s: still %s at section %d of %d after %s\n%s", id, j.Status, j.Section, j.Sections, d, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isDone(j servedJob) bool { return j.Status == "done" }

// A server killed with SIGKILL in the middle of a job goes on from the
// job's last finished section when started again, and the video is the
// same, bit for bit, as an uninterrupted run's; the jobs waiting survive.
// SIGTERM checkpoints the running job, leaves it queued and exits within
// 2 s; the history survives both.
func TestServeResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several jobs on the tiny model (about a minute)")
	}
	t.Parallel() // its processes' environment is their own; it waits on kills and restarts: beside the others that do
	data := t.TempDir()
	const three = `{"prompt":"a red kite over green hills","seconds":0.4,"window":1,"steps":2,"resolution":64,"seed":11}`
	p := startServe(t, data)
	b := p.submit(t, three)
	c := p.submit(t, `{"prompt":"a short one","seconds":0.4,"window":3,"steps":1,"resolution":64}`)
	mid := p.wait(t, b.ID, 3*time.Minute, func(j servedJob) bool { return j.Section >= 1 })
	if mid.Section >= mid.Sections {
		t.Fatalf("the job finished before it could be killed: %+v", mid)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited

	p = startServe(t, data)
	b = p.wait(t, b.ID, 3*time.Minute, isDone)
	if b.ResumedAt < mid.Section || b.Attempts != 2 {
		t.Fatalf("after the restart: resumed after section %d (killed after %d), %d attempts", b.ResumedAt, mid.Section, b.Attempts)
	}
	if c = p.wait(t, c.ID, 3*time.Minute, isDone); c.Result == nil {
		t.Fatalf("the waiting job: %+v", c)
	}
	// The same job, uninterrupted.
	d := p.submit(t, three)
	d = p.wait(t, d.ID, 3*time.Minute, isDone)
	if b.Result.FramesSHA256 != d.Result.FramesSHA256 || b.Result.VideoSHA256 != d.Result.VideoSHA256 {
		t.Fatalf("the resumed job's video differs from the uninterrupted run's:\n%+v\n%+v", b.Result, d.Result)
	}
	t.Logf("serve: resumed at section %d of %d after SIGKILL, video bit-identical", b.ResumedAt+1, b.Sections)

	// SIGTERM: checkpointed, queued, exited within 2 s.
	e := p.submit(t, three)
	mid = p.wait(t, e.ID, 3*time.Minute, func(j servedJob) bool { return j.Section >= 1 })
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not exit within 10 s of SIGTERM")
	}
	took := time.Since(t0)
	if took > 2*time.Second {
		t.Errorf("serve took %s to exit after SIGTERM, want at most 2 s", took)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("serve exited %d after SIGTERM\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "queued again") {
		t.Errorf("no line saying the job was queued again:\n%s", p.stderr)
	}
	p = startServe(t, data)
	e = p.wait(t, e.ID, 3*time.Minute, isDone)
	if e.ResumedAt < mid.Section || e.Result.VideoSHA256 != d.Result.VideoSHA256 {
		t.Errorf("after SIGTERM: resumed after section %d (stopped after %d), video %s, want %s", e.ResumedAt, mid.Section,
			e.Result.VideoSHA256, d.Result.VideoSHA256)
	}
	for _, id := range []string{b.ID, c.ID, d.ID} {
		if j := p.job(t, id); j.Status != "done" {
			t.Errorf("history: job %s is %s after the restarts", id, j.Status)
		}
		resp, err := http.Get(p.url + "/api/jobs/" + id + "/video")
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("history: job %s's video: %v %v", id, err, resp.Status)
		}
		resp.Body.Close()
	}
	t.Logf("serve: SIGTERM exited in %s; the job went on after section %d", took.Round(time.Millisecond), e.ResumedAt)
}

// A --listen beyond loopback without a token is refused before anything
// starts.
func TestServeRefusesOpenListen(t *testing.T) {
	r := runBinary(t, t.TempDir(), "serve", "--listen", "0.0.0.0:0", "--data", t.TempDir())
	if r.code != exitUsage || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

// bench serve on a few jobs: its line counts every job submitted as
// stored, none lost or duplicated.
func TestBenchServeSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and three jobs")
	}
	t.Setenv(benchChildEnv, "1")
	t.Setenv("XDG_CACHE_HOME", cacheDir(t))
	out, err := runCLI(t, context.Background(), "bench", "serve", "--jobs", "3", "--clients", "2", "--listeners", "3", "--image", stripImage(t))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if r["submitted"] != 3.0 || r["stored"] != 3.0 || r["lost"] != 0.0 || r["duplicated"] != 0.0 {
		t.Errorf("bench serve: %s", out)
	}
	for _, k := range []string{"api_p50_ms", "api_p99_ms", "server_peak_rss_bytes", "events"} {
		if v, _ := r[k].(float64); v <= 0 {
			t.Errorf("%s is %v: %s", k, r[k], out)
		}
	}
}
