// Package bench holds framepack's benchmarks and the harnesses they share
// with the tests: `framepack bench farm` (RunFarm), and the pieces that
// run a farm on loopback — nats-server processes of a cluster, worker
// processes, a submitter and the count of what was stored.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "image/jpeg" // the start image's formats
	_ "image/png"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/video"
)

// Buffer is a goroutine-safe output sink.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NATSServerBinary is a nats-server program: the one on PATH, else one
// built into dir from the nats-server module framepack already depends on
// (the same version as the embedded server; the Go toolchain must be
// there).
func NATSServerBinary(dir string) (string, error) {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "nats-server")
	cmd := exec.Command(goTool, "build", "-o", out, "github.com/nats-io/nats-server/v2")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("no nats-server on PATH, and building one failed: %v\n%s", err, b)
	}
	return out, nil
}

// freePort is a TCP port free on 127.0.0.1 now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NATSNode is one nats-server process of a cluster on loopback, with
// JetStream storing under Dir: it can be killed and started again on the
// same ports and files.
type NATSNode struct {
	Name              string
	Port, ClusterPort int
	Dir               string
	Log               *Buffer

	bin    string
	routes []string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartCluster starts n nats-server processes (bin) routed to each other
// on 127.0.0.1, each with JetStream under dir/<name>, and waits until
// JetStream answers (a meta leader is elected).
func StartCluster(ctx context.Context, bin, dir string, n int) ([]*NATSNode, error) {
	nodes := make([]*NATSNode, n)
	var routes []string
	for i := range nodes {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		cp, err := freePort()
		if err != nil {
			return nil, err
		}
		nodes[i] = &NATSNode{Name: fmt.Sprintf("n%d", i+1), Port: p, ClusterPort: cp, Dir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), bin: bin}
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cp))
	}
	for _, nd := range nodes {
		if n > 1 {
			nd.routes = routes
		}
		if err := nd.Start(); err != nil {
			StopAll(nodes)
			return nil, err
		}
	}
	if err := WaitJetStream(ctx, URLs(nodes)); err != nil {
		StopAll(nodes)
		return nil, err
	}
	return nodes, nil
}

// Start starts the node's process (again).
func (nd *NATSNode) Start() error {
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(nd.Port), "-n", nd.Name, "-js", "-sd", nd.Dir}
	if len(nd.routes) > 0 {
		args = append(args, "--cluster_name", "framepack-test", "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", nd.ClusterPort),
			"--routes", strings.Join(nd.routes, ","))
	}
	if nd.Log == nil {
		nd.Log = &Buffer{}
	}
	nd.cmd = exec.Command(nd.bin, args...)
	nd.cmd.Stdout, nd.cmd.Stderr = nd.Log, nd.Log
	if err := nd.cmd.Start(); err != nil {
		return fmt.Errorf("starting nats-server %s: %w", nd.Name, err)
	}
	nd.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(nd.cmd, nd.exited)
	// Wait for its client port.
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		select {
		case <-nd.exited:
			return fmt.Errorf("nats-server %s exited at start:\n%s", nd.Name, nd.Log)
		default:
		}
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", nd.Port)); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("nats-server %s did not listen within 20 s:\n%s", nd.Name, nd.Log)
}

// Kill kills the node with SIGKILL and waits for it.
func (nd *NATSNode) Kill() {
	if nd.cmd != nil && nd.cmd.Process != nil {
		nd.cmd.Process.Signal(syscall.SIGKILL)
		<-nd.exited
	}
}

// Stop stops the node with SIGTERM (SIGKILL after 10 s).
func (nd *NATSNode) Stop() {
	if nd.cmd == nil || nd.cmd.Process == nil {
		return
	}
	nd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nd.exited:
	case <-time.After(10 * time.Second):
		nd.Kill()
	}
}

// URL is the node's client URL.
func (nd *NATSNode) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", nd.Port) }

// URLs is the nodes' client URLs, comma-separated.
func URLs(nodes []*NATSNode) string {
	var u []string
	for _, nd := range nodes {
		u = append(u, nd.URL())
	}
	return strings.Join(u, ",")
}

// StopAll stops every node.
func StopAll(nodes []*NATSNode) {
	for _, nd := range nodes {
		if nd != nil {
			nd.Stop()
		}
	}
}

// WaitJetStream waits until JetStream answers at urls.
func WaitJetStream(ctx context.Context, urls string) error {
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	defer nc.Close()
	var last error
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		js, err := nc.JetStream()
		if err == nil {
			if _, err = js.AccountInfo(nats.MaxWait(2 * time.Second)); err == nil {
				return nil
			}
		}
		last = err
	}
	return fmt.Errorf("JetStream at %s did not answer within 60 s: %v", urls, last)
}

// InProcessNATS runs a one-node NATS server with JetStream in this
// process, listening on a free loopback port, storing under dir.
func InProcessNATS(dir string) (url string, stop func(), err error) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		ServerName: "framepack-bench"})
	if err != nil {
		return "", nil, err
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		ns.Shutdown()
		return "", nil, errors.New("the in-process NATS server did not start within 20 s")
	}
	return ns.ClientURL(), func() { ns.Shutdown(); ns.WaitForShutdown() }, nil
}

// WorkerProc is a `framepack worker` process.
type WorkerProc struct {
	Name   string
	Args   []string
	Env    []string
	Stderr *Buffer
	bin    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartWorker starts bin as `worker --name name args…` with env added to
// this process's environment.
func StartWorker(bin, name string, args, env []string) (*WorkerProc, error) {
	w := &WorkerProc{Name: name, Args: args, Env: env, Stderr: &Buffer{}, bin: bin}
	return w, w.Start()
}

// Start starts the worker's process (again), its output appended.
func (w *WorkerProc) Start() error {
	w.cmd = exec.Command(w.bin, append([]string{"worker", "--name", w.Name}, w.Args...)...)
	w.cmd.Env = append(os.Environ(), w.Env...)
	w.cmd.Stdout, w.cmd.Stderr = w.Stderr, w.Stderr
	if err := w.cmd.Start(); err != nil {
		return fmt.Errorf("starting worker %s: %w", w.Name, err)
	}
	w.exited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(w.cmd, w.exited)
	return nil
}

// Exited is closed when the process has exited.
func (w *WorkerProc) Exited() <-chan struct{} { return w.exited }

// Kill kills the worker with SIGKILL (a machine that dies) and waits.
func (w *WorkerProc) Kill() {
	if w.cmd != nil && w.cmd.Process != nil {
		w.cmd.Process.Signal(syscall.SIGKILL)
		<-w.exited
	}
}

// Stop stops the worker with SIGTERM (SIGKILL after 10 s) and waits.
func (w *WorkerProc) Stop() {
	if w.cmd == nil || w.cmd.Process == nil {
		return
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(10 * time.Second):
		w.Kill()
	}
}

var doneLine = regexp.MustCompile(`job ([0-9A-Za-z._-]+): done in`)

// Done lists the jobs the worker's log says it finished (stored and
// acknowledged), once per time it did.
func (w *WorkerProc) Done() []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(w.Stderr.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := doneLine.FindStringSubmatch(sc.Text()); m != nil {
			ids = append(ids, m[1])
		}
	}
	return ids
}

// WaitLive waits until every worker named is announced live in f.
func WaitLive(ctx context.Context, f *farm.Farm, names ...string) error {
	for {
		live, err := f.Workers(ctx)
		if err == nil {
			n := 0
			for _, w := range live {
				for _, name := range names {
					if w.Name == name {
						n++
					}
				}
			}
			if n == len(names) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for workers %v to be live: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Settings are a job's settings: FramePack's defaults at this length,
// steps, latent window and resolution, with the seed given.
func Settings(seconds float64, steps, window, resolution int, seed uint64) farm.Settings {
	r := framepack.DefaultRequest()
	return farm.Settings{Prompt: "a red kite over green hills", Seed: seed, Seconds: seconds, Steps: steps, Window: window, CFG: r.CFG,
		GS: r.GS, RS: r.RS, TeaCache: r.TeaCache, Resolution: resolution, Model: framepack.ModelFramePack, PromptBlend: r.PromptBlend,
		StartEmbedStrength: r.StartEmbedStrength, CRF: video.DefaultCRF}
}

// Submit stores img and queues a job of settings s, as serve does.
func Submit(ctx context.Context, f *farm.Farm, s farm.Settings, img []byte) (string, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(img))
	if err != nil {
		return "", fmt.Errorf("the start image: %w", err)
	}
	sum := sha256.Sum256(img)
	now := time.Now().UTC()
	j := &farm.Job{ID: farm.NewID(now), Settings: s, Created: now,
		Image: &farm.File{Name: "image." + format, Type: "image/" + format, Bytes: int64(len(img)), Width: cfg.Width, Height: cfg.Height,
			SHA256: hex.EncodeToString(sum[:])}}
	if err := f.PutBytes(ctx, j.ID, farm.FileImage, img); err != nil {
		return "", err
	}
	if err := f.Submit(ctx, j); err != nil {
		return "", err
	}
	return j.ID, nil
}

// WaitJobs waits until every job of ids is over, and returns their
// states; a job that failed or was cancelled is an error.
func WaitJobs(ctx context.Context, f *farm.Farm, ids []string) ([]*farm.Job, error) {
	out := make([]*farm.Job, len(ids))
	for i, id := range ids {
		for {
			j, _, err := f.Get(ctx, id)
			if err == nil && farm.Finished(j.Status) {
				if j.Status != farm.Done {
					return nil, fmt.Errorf("job %s %s: %s", id, j.Status, j.Error)
				}
				out[i] = j
				break
			}
			select {
			case <-ctx.Done():
				state := "unknown"
				if j != nil {
					state = fmt.Sprintf("%s, section %d of %d, worker %s, %s", j.Status, j.Section, j.Sections, j.Worker, j.Unrunnable)
				}
				return nil, fmt.Errorf("job %s did not end: %s (%w)", id, state, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return out, nil
}

// Tally counts jobs submitted against videos stored.
type Tally struct {
	Submitted int `json:"submitted"`
	// Stored: done, with the video its state names stored and matching
	// the state's hash.
	Stored int `json:"stored"`
	// Lost: submitted and not stored.
	Lost int `json:"lost"`
	// Duplicated: finished more than once (by the workers' logs), or with
	// more than one video stored.
	Duplicated int `json:"duplicated"`
}

// Line is the tally as the tests print it.
func (t Tally) Line(fault string) string {
	return fmt.Sprintf("farm: %d submitted, %d stored, %d lost, %d duplicated (fault: %s)", t.Submitted, t.Stored, t.Lost, t.Duplicated, fault)
}

// Count tallies the jobs ids against what f stores and what the workers
// say they finished.
func Count(ctx context.Context, f *farm.Farm, ids []string, workers []*WorkerProc) (Tally, error) {
	t := Tally{Submitted: len(ids)}
	done := map[string]int{}
	for _, w := range workers {
		for _, id := range w.Done() {
			done[id]++
		}
	}
	for _, id := range ids {
		j, _, err := f.Get(ctx, id)
		if err != nil {
			return t, err
		}
		objs, err := f.Objects(ctx, id)
		if err != nil {
			return t, err
		}
		videos := 0
		for _, o := range objs {
			if strings.HasPrefix(o, "video") {
				videos++
			}
		}
		if done[id] > 1 || videos > 1 {
			t.Duplicated++
		}
		if j.Status != farm.Done || j.Result == nil {
			continue
		}
		b, err := f.GetBytes(ctx, id, j.File(farm.FileVideo))
		if err != nil {
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) == j.Result.VideoSHA256 {
			t.Stored++
		}
	}
	t.Lost = t.Submitted - t.Stored
	return t, nil
}

// FarmConfig configures RunFarm.
type FarmConfig struct {
	// Binary is the framepack program the workers run.
	Binary string
	// NATS is an external server's URL; empty runs one in this process.
	NATS string
	// Models is the workers' model folder ("": the built-in tiny model).
	Models string
	// Workers are the worker counts to measure, one run each, every
	// worker on the CPU (or the device the worker chooses). Layouts are
	// GPU layouts instead: "0;1" is a worker on GPU 0 and one on GPU 1,
	// "0,1" one worker running each job on GPUs 0 and 1.
	Workers []int
	Layouts []string
	// Jobs per run, each Seconds long at Steps, Window and Resolution.
	Jobs                      int
	Seconds                   float64
	Steps, Window, Resolution int
	// Image is every job's start image (PNG or JPEG bytes).
	Image []byte
	// AckWait sets the queue's ack wait (0: the queue's own).
	AckWait time.Duration
	// WorkerArgs and WorkerEnv go to every worker process.
	WorkerArgs, WorkerEnv []string
	// Warmup runs a short job on each worker first, not counted (the
	// models load on a worker's first job). Recovery adds the run that
	// kills a worker.
	Warmup, Recovery bool
	Timeout          time.Duration
	Log              *slog.Logger
	Out              io.Writer
	TempDir          string
}

// RunFarm measures a farm on loopback and prints one JSON line per run:
// jobs per minute with each worker count (or GPU layout), and, with
// Recovery, the time from a worker's death (SIGKILL) to its job running
// again on another.
func RunFarm(ctx context.Context, cfg FarmConfig) error {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	tmp, err := os.MkdirTemp(cfg.TempDir, "framepack-bench-farm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	url := cfg.NATS
	if url == "" {
		u, stop, err := InProcessNATS(filepath.Join(tmp, "nats"))
		if err != nil {
			return err
		}
		defer stop()
		url = u
	}
	f, err := farm.Open(ctx, farm.Config{URL: url, AckWait: cfg.AckWait, Log: cfg.Log, MaxStoredBytes: storeBytes})
	if err != nil {
		return err
	}
	defer f.Close()
	runs := cfg.Layouts
	if len(runs) == 0 {
		for _, n := range cfg.Workers {
			runs = append(runs, "cpu:"+strconv.Itoa(n))
		}
	}
	for i, layout := range runs {
		r, err := farmRun(ctx, cfg, f, url, layout, fmt.Sprintf("r%d", i+1))
		if err != nil {
			return fmt.Errorf("bench farm %s: %w", layout, err)
		}
		if err := printJSON(cfg.Out, r); err != nil {
			return err
		}
	}
	if cfg.Recovery {
		r, err := farmRecovery(ctx, cfg, f, url)
		if err != nil {
			return fmt.Errorf("bench farm: recovery: %w", err)
		}
		return printJSON(cfg.Out, r)
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// workerSpec is one worker of a layout: its GPUs ("" for the default
// device) and whether it runs each job on all of them.
type workerSpec struct{ gpus string }

// parseLayout reads "cpu:N" (N workers on the default device) or a GPU
// layout ("0;1", "0,1").
func parseLayout(layout string) ([]workerSpec, error) {
	if n, ok := strings.CutPrefix(layout, "cpu:"); ok {
		k, err := strconv.Atoi(n)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("%d workers: want at least 1", k)
		}
		return make([]workerSpec, k), nil
	}
	var specs []workerSpec
	for _, w := range strings.Split(layout, ";") {
		w = strings.TrimSpace(w)
		for _, g := range strings.Split(w, ",") {
			if _, err := strconv.Atoi(g); err != nil {
				return nil, fmt.Errorf("layout %q: %q is not a GPU ordinal (want e.g. 0;1 or 0,1)", layout, g)
			}
		}
		specs = append(specs, workerSpec{gpus: w})
	}
	return specs, nil
}

// startWorkers starts a layout's workers and waits until they are live.
func startWorkers(ctx context.Context, cfg FarmConfig, f *farm.Farm, url, layout, prefix string) ([]*WorkerProc, error) {
	specs, err := parseLayout(layout)
	if err != nil {
		return nil, err
	}
	var ws []*WorkerProc
	var names []string
	for i, sp := range specs {
		name := fmt.Sprintf("%s-w%d", prefix, i+1)
		args := append([]string{"--nats", url, "-v"}, cfg.WorkerArgs...)
		if cfg.Models != "" {
			args = append(args, "--models", cfg.Models)
		}
		env := append([]string(nil), cfg.WorkerEnv...)
		if cfg.Models == "" {
			env = append(env, "FRAMEPACK_MODELS=")
		}
		switch {
		case sp.gpus == "":
		case !strings.Contains(sp.gpus, ","):
			// One GPU: the process sees that one alone.
			env = append(env, "CUDA_VISIBLE_DEVICES="+sp.gpus, "HIP_VISIBLE_DEVICES="+sp.gpus)
		default:
			args = append(args, "--gpus", sp.gpus)
		}
		w, err := StartWorker(cfg.Binary, name, args, env)
		if err != nil {
			StopWorkers(ws)
			return nil, err
		}
		ws = append(ws, w)
		names = append(names, name)
	}
	lctx, cancel := context.WithTimeoutCause(ctx, 5*time.Minute, errors.New("not live within 5 minutes"))
	defer cancel()
	exited := make(chan struct{})
	var once sync.Once
	for _, w := range ws {
		go func() {
			select {
			case <-w.Exited():
				once.Do(func() { close(exited) })
				cancel()
			case <-lctx.Done():
			}
		}()
	}
	if err := WaitLive(lctx, f, names...); err != nil {
		select {
		case <-exited:
			err = errors.New("a worker exited")
		default:
		}
		var logs []string
		for _, w := range ws {
			logs = append(logs, w.Name+":\n"+w.Stderr.String())
		}
		StopWorkers(ws)
		return nil, fmt.Errorf("%w\n%s", err, strings.Join(logs, "\n"))
	}
	return ws, nil
}

// StopWorkers stops every worker.
func StopWorkers(ws []*WorkerProc) {
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.Stop() }()
	}
	wg.Wait()
}

func (cfg FarmConfig) settings(seed uint64) farm.Settings {
	return Settings(cfg.Seconds, cfg.Steps, cfg.Window, cfg.Resolution, seed)
}

// withLogs adds the end of each worker's log to err.
func withLogs(err error, ws []*WorkerProc) error {
	if err == nil {
		return nil
	}
	var b strings.Builder
	for _, w := range ws {
		lines := strings.Split(strings.TrimRight(w.Stderr.String(), "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "\nworker %s:\n%s", w.Name, strings.Join(lines, "\n"))
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// farmRun runs cfg.Jobs jobs on a layout's workers and measures them.
func farmRun(ctx context.Context, cfg FarmConfig, f *farm.Farm, url, layout, prefix string) (r map[string]any, err error) {
	ws, err := startWorkers(ctx, cfg, f, url, layout, prefix)
	if err != nil {
		return nil, err
	}
	defer StopWorkers(ws)
	defer func() { err = withLogs(err, ws) }()
	if cfg.Warmup {
		// Each worker loads its models on its first job: one short job
		// each, not counted, so that the runs compare the work alone.
		var ids []string
		for i := range ws {
			s := cfg.settings(uint64(1000 + i))
			s.Seconds, s.Steps = 0.1, 1
			id, err := Submit(ctx, f, s, cfg.Image)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		if _, err := WaitJobs(ctx, f, ids); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	var ids []string
	for i := range cfg.Jobs {
		id, err := Submit(ctx, f, cfg.settings(uint64(i+1)), cfg.Image)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	jobs, err := WaitJobs(ctx, f, ids)
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0)
	t, err := Count(ctx, f, ids, ws)
	if err != nil {
		return nil, err
	}
	if t.Lost != 0 || t.Duplicated != 0 {
		return nil, fmt.Errorf("%s", t.Line("none"))
	}
	specs, _ := parseLayout(layout)
	gpus := 0
	for _, sp := range specs {
		if sp.gpus != "" {
			gpus += len(strings.Split(sp.gpus, ","))
		}
	}
	r = map[string]any{"bench": "farm", "layout": layout, "workers": len(ws), "gpus": gpus, "jobs": cfg.Jobs, "seconds": cfg.Seconds,
		"steps": cfg.Steps, "window": cfg.Window, "resolution": cfg.Resolution, "submitted": t.Submitted, "stored": t.Stored,
		"lost": t.Lost, "duplicated": t.Duplicated, "wall_s": round3(wall.Seconds()),
		"jobs_per_min": round3(float64(cfg.Jobs) / wall.Minutes()), "warmup": cfg.Warmup}
	var gen float64
	for _, j := range jobs {
		gen += j.Result.Generate
	}
	r["job_mean_s"] = round3(gen / float64(len(jobs)))
	return r, nil
}

// farmRecovery kills the worker of a running job once it has finished a
// section and measures how long the job takes to run again on another.
func farmRecovery(ctx context.Context, cfg FarmConfig, f *farm.Farm, url string) (map[string]any, error) {
	ws, err := startWorkers(ctx, cfg, f, url, "cpu:2", "rec")
	if err != nil {
		return nil, err
	}
	defer StopWorkers(ws)
	s := cfg.settings(7)
	if s.Seconds < 1 {
		s.Seconds = 1.2 // a few sections, to kill one between them
	}
	id, err := Submit(ctx, f, s, cfg.Image)
	if err != nil {
		return nil, err
	}
	var j *farm.Job
	for {
		j, _, err = f.Get(ctx, id)
		if err == nil && j.Status == farm.Running && j.Section >= 1 && j.Section < j.Sections {
			break
		}
		if err == nil && farm.Finished(j.Status) {
			return nil, fmt.Errorf("job %s ended before a worker could be killed", id)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	var victim *WorkerProc
	for _, w := range ws {
		if w.Name == j.Worker {
			victim = w
		}
	}
	if victim == nil {
		return nil, fmt.Errorf("job %s runs on %q, not a worker of the bench", id, j.Worker)
	}
	killed := time.Now()
	victim.Kill()
	var again time.Time
	for {
		k, _, err := f.Get(ctx, id)
		if err == nil && k.Attempts > j.Attempts && (k.Status == farm.Running || k.Status == farm.Done) {
			again = time.Now()
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	done, err := WaitJobs(ctx, f, []string{id})
	if err != nil {
		return nil, err
	}
	return map[string]any{"bench": "farm", "fault": "SIGKILL a worker after section " + strconv.Itoa(j.Section),
		"ack_wait_s": f.AckWait().Seconds(), "death_to_running_s": round3(again.Sub(killed).Seconds()),
		"resumed_at": done[0].ResumedAt, "sections": done[0].Sections}, nil
}
