package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/framepack-go/framepack/bench"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/internal/testmode"
)

// The farm tests run what several machines would: nats-server processes
// routed into a cluster on 127.0.0.1, `framepack worker` processes on the
// tiny model on the CPU (each standing for a machine), and a submitter
// (this test, through the farm package, as serve submits). Every job has
// the same settings, so every video must be the same, bit for bit,
// whether its run was interrupted or not.

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// natsServer is a nats-server program, built once per test run when none
// is on PATH.
func natsServer(t *testing.T) string {
	t.Helper()
	natsBinOnce.Do(func() {
		cliBinary(t) // its build folder
		natsBin, natsBinErr = bench.NATSServerBinary(buildDir)
	})
	if natsBinErr != nil {
		t.Fatal(natsBinErr)
	}
	return natsBin
}

// farmAckWait is the queue's ack wait in these tests: a killed worker's
// job goes to another within it.
const farmAckWait = 3 * time.Second

// farmJob is every test job: 3 sections of 2 steps on the tiny model at
// 64, about two seconds a section on a shared 2-core machine; farmJob2
// is 2 sections.
func farmJob() farm.Settings  { return bench.Settings(1.2, 2, 3, 64, 11) }
func farmJob2() farm.Settings { return bench.Settings(0.8, 2, 3, 64, 11) }

type farmEnv struct {
	t       *testing.T
	ctx     context.Context
	nodes   []*bench.NATSNode
	url     string
	f       *farm.Farm
	workers []*bench.WorkerProc
	img     []byte
	ids     []string
}

// newFarmEnv starts a cluster of n nats-server processes and connects the
// submitter to it.
func newFarmEnv(t *testing.T, n int) *farmEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	e := &farmEnv{t: t, ctx: ctx}
	var err error
	if e.img, err = os.ReadFile(sceneImage); err != nil {
		t.Fatal(err)
	}
	if e.nodes, err = bench.StartCluster(ctx, natsServer(t), t.TempDir(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bench.StopAll(e.nodes) })
	e.url = bench.URLs(e.nodes)
	e.f = e.open()
	t.Cleanup(func() {
		bench.StopWorkers(e.workers)
		if t.Failed() {
			for _, w := range e.workers {
				t.Logf("worker %s:\n%s", w.Name, tail(w.Stderr.String(), 40))
			}
		}
	})
	return e
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (e *farmEnv) open() *farm.Farm {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	f, err := farm.Open(e.ctx, farm.Config{URL: e.url, AckWait: farmAckWait, Log: log})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(f.Close)
	return f
}

// worker starts a worker process named name and waits until it is live.
func (e *farmEnv) worker(name string, args ...string) *bench.WorkerProc {
	e.t.Helper()
	w, err := bench.StartWorker(cliBinary(e.t), name, append([]string{"--nats", e.url, "-v"}, args...),
		[]string{"FRAMEPACK_MODELS=", "XDG_CACHE_HOME=" + cacheDir(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.workers = append(e.workers, w)
	e.waitLive(w)
	return w
}

func (e *farmEnv) waitLive(ws ...*bench.WorkerProc) {
	e.t.Helper()
	var names []string
	for _, w := range ws {
		names = append(names, w.Name)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	if err := bench.WaitLive(ctx, e.f, names...); err != nil {
		for _, w := range ws {
			e.t.Logf("worker %s:\n%s", w.Name, tail(w.Stderr.String(), 30))
		}
		e.t.Fatal(err)
	}
}

// submit queues n jobs of settings s.
func (e *farmEnv) submit(n int, s farm.Settings) []string {
	e.t.Helper()
	var ids []string
	for range n {
		id, err := bench.Submit(e.ctx, e.f, s, e.img)
		if err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	e.ids = append(e.ids, ids...)
	return ids
}

// midJob waits until one of ids has finished a section and has more to
// run, and returns its state.
func (e *farmEnv) midJob(ids ...string) *farm.Job {
	e.t.Helper()
	for {
		for _, id := range ids {
			j, _, err := e.f.Get(e.ctx, id)
			if err == nil && j.Status == farm.Running && j.Section >= 1 && j.Section < j.Sections {
				return j
			}
		}
		if e.ctx.Err() != nil {
			e.t.Fatal("no job reached the middle of a section in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *farmEnv) byName(name string) *bench.WorkerProc {
	for _, w := range e.workers {
		if w.Name == name {
			return w
		}
	}
	e.t.Fatalf("no worker %q", name)
	return nil
}

// finish waits for every job, counts them and checks that none was lost
// or duplicated and that the videos of the jobs same (of one settings)
// are one video; it returns the jobs' states and the count.
func (e *farmEnv) finish(same []string) (map[string]*farm.Job, bench.Tally) {
	e.t.Helper()
	jobs, err := bench.WaitJobs(e.ctx, e.f, e.ids)
	if err != nil {
		e.t.Fatal(err)
	}
	t, err := bench.Count(e.ctx, e.f, e.ids, e.workers)
	if err != nil {
		e.t.Fatal(err)
	}
	if t.Stored != t.Submitted || t.Lost != 0 || t.Duplicated != 0 {
		e.t.Errorf("%s", t.Line("?"))
	}
	byID := map[string]*farm.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
	}
	var ref *farm.Job
	for _, id := range same {
		j := byID[id]
		if ref == nil {
			ref = j
			continue
		}
		if j.Result.VideoSHA256 != ref.Result.VideoSHA256 || j.Result.FramesSHA256 != ref.Result.FramesSHA256 {
			e.t.Errorf("job %s (resumed after section %d, attempts %d, sections by %v) made another video than job %s (resumed after %d, attempts %d)",
				j.ID, j.ResumedAt, j.Attempts, j.SectionWorkers, ref.ID, ref.ResumedAt, ref.Attempts)
		}
	}
	for _, j := range jobs {
		for i, w := range j.SectionWorkers {
			if w == "" {
				e.t.Errorf("job %s: no worker recorded for section %d: %v", j.ID, i+1, j.SectionWorkers)
			}
		}
	}
	return byID, t
}

// report prints the count's line with the fault.
func (e *farmEnv) report(t bench.Tally, fault string) {
	line := t.Line(fault)
	e.t.Log(line)
	fmt.Println(line)
}

// resumed checks that job id went on from a checkpoint on another worker
// than the one killed, and describes it.
func (e *farmEnv) resumed(jobs map[string]*farm.Job, mid *farm.Job) string {
	e.t.Helper()
	j := jobs[mid.ID]
	if j.ResumedAt < mid.Section || j.Attempts < 2 || j.SectionWorkers[0] != mid.Worker {
		e.t.Errorf("job %s: resumed after section %d (killed after %d), %d attempts, sections by %v", j.ID, j.ResumedAt, mid.Section,
			j.Attempts, j.SectionWorkers)
	}
	return fmt.Sprintf("resumed after section %d of %d, sections by %s, video bit-identical to the uninterrupted runs'",
		j.ResumedAt, j.Sections, strings.Join(j.SectionWorkers, ","))
}

// A worker killed with SIGKILL in the middle of a section: its job goes
// to another worker within the ack wait, which goes on from the last
// checkpointed section; every job is stored once and the videos are the
// same. The fast variant of TestFarmWorkerKilled: one NATS server, two
// workers, two jobs.
func TestFarmWorkerKilledSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs NATS and two worker processes")
	}
	t.Parallel()
	workerKilled(t, 1, []string{"w1", "w2"}, 2, farmJob2())
}

// The full variant: a 3-node cluster, three workers, a worker killed with
// SIGKILL in the middle of a section.
func TestFarmWorkerKilled(t *testing.T) {
	if !testmode.Full() {
		t.Skip("the full suite's (FRAMEPACK_TEST_FULL=1); TestFarmWorkerKilledSmall is its default-suite variant")
	}
	workerKilled(t, 3, []string{"w1", "w2", "w3"}, 4, farmJob())
}

// workerKilled runs jobs on workers over a cluster of servers and kills
// the worker of one with SIGKILL in the middle of a section.
func workerKilled(t *testing.T, servers int, workers []string, jobs int, s farm.Settings) {
	e := newFarmEnv(t, servers)
	for _, n := range workers {
		e.worker(n)
	}
	ids := e.submit(jobs, s)
	mid := e.midJob(ids...)
	e.byName(mid.Worker).Kill()
	done, tally := e.finish(ids)
	e.report(tally, fmt.Sprintf("SIGKILL worker %s in the middle of section %d of %d; %s", mid.Worker, mid.Section+1, mid.Sections, e.resumed(done, mid)))
}

// A NATS server of the cluster killed with SIGKILL while jobs run: the
// queue, the states and the files are on three servers, the clients move
// to the others, and nothing is lost.
func TestFarmNATSNodeKilled(t *testing.T) {
	if !testmode.Full() {
		t.Skip("the full suite's (FRAMEPACK_TEST_FULL=1)")
	}
	e := newFarmEnv(t, 3)
	if e.f.Replicas() != 3 {
		t.Fatalf("the farm keeps %d replicas on a 3-server cluster", e.f.Replicas())
	}
	for _, n := range []string{"w1", "w2", "w3"} {
		e.worker(n)
	}
	ids := e.submit(4, farmJob())
	mid := e.midJob(ids...)
	e.nodes[0].Kill()
	_, tally := e.finish(ids)
	e.report(tally, fmt.Sprintf("SIGKILL NATS server %s of 3 in the middle of section %d of %d of job %s; videos bit-identical", e.nodes[0].Name,
		mid.Section+1, mid.Sections, mid.ID))
}

// Every process stopped at once (SIGKILL, as a power cut would) and
// started again: the cluster comes back from its files, the jobs go on
// from their checkpoints.
func TestFarmRestartAll(t *testing.T) {
	if !testmode.Full() {
		t.Skip("the full suite's (FRAMEPACK_TEST_FULL=1)")
	}
	e := newFarmEnv(t, 3)
	for _, n := range []string{"w1", "w2", "w3"} {
		e.worker(n)
	}
	ids := e.submit(4, farmJob())
	mid := e.midJob(ids...)
	var wg sync.WaitGroup
	for _, w := range e.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.Kill() }()
	}
	for _, nd := range e.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); nd.Kill() }()
	}
	wg.Wait()
	e.f.Close()
	for _, nd := range e.nodes {
		if err := nd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := bench.WaitJetStream(e.ctx, e.url); err != nil {
		t.Fatal(err)
	}
	e.f = e.open()
	for _, w := range e.workers {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
	}
	e.waitLive(e.workers...)
	jobs, tally := e.finish(ids)
	e.report(tally, fmt.Sprintf("SIGKILL of the 3 NATS servers and the 3 workers in the middle of section %d of %d of job %s, all started again; %s",
		mid.Section+1, mid.Sections, mid.ID, e.resumed(jobs, mid)))
}

// A job no live worker can run (the F1 variant, which the workers do not
// have) waits, its state saying why, while the others run; a worker that
// has the variant takes it when it starts.
func TestFarmUnrunnable(t *testing.T) {
	if !testmode.Full() {
		t.Skip("the full suite's (FRAMEPACK_TEST_FULL=1)")
	}
	e := newFarmEnv(t, 3)
	e.worker("w1", "--model", "framepack")
	e.worker("w2", "--model", "framepack")
	f1 := farmJob()
	f1.Model = "f1"
	other := e.submit(1, f1)[0]
	ids := e.submit(2, farmJob())
	var j *farm.Job
	for {
		var err error
		j, _, err = e.f.Get(e.ctx, other)
		if err == nil && strings.Contains(j.Unrunnable, "w1: no f1 transformer") && strings.Contains(j.Unrunnable, "w2: no f1 transformer") {
			break
		}
		if e.ctx.Err() != nil {
			t.Fatalf("the F1 job's state never said no live worker can run it: %+v", j)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if j.Status != farm.Queued {
		t.Errorf("the F1 job is %s while no worker can run it", j.Status)
	}
	e.worker("w3", "--model", "f1")
	jobs, tally := e.finish(ids)
	e.report(tally, fmt.Sprintf("workers w1, w2 without the f1 variant: the f1 job waited, its state saying %q, until w3 (f1) started and ran it", j.Unrunnable))
	if got := jobs[other].SectionWorkers; strings.Join(got, ",") != "w3,w3,w3" {
		t.Errorf("the F1 job's sections ran on %v", got)
	}
}

// bench farm on one worker and two jobs, with the recovery run: its lines
// count every job stored.
func TestBenchFarmSmall(t *testing.T) {
	if !testmode.Full() {
		t.Skip("the full suite's (FRAMEPACK_TEST_FULL=1); the farm tests run its pieces")
	}
	// bench farm starts its workers as its own executable, which is this
	// test binary: the variable makes them the command too.
	t.Setenv(benchChildEnv, "1")
	out := runBinary(t, filepath.Join("..", ".."), "bench", "farm", "--workers", "1", "--jobs", "2", "--ack-wait", "3s")
	if out.code != 0 {
		t.Fatalf("exit %d: %s", out.code, out.stderr)
	}
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"stored":2`) || !strings.Contains(lines[0], `"lost":0`) ||
		!strings.Contains(lines[1], `"death_to_running_s"`) {
		t.Fatalf("bench farm printed:\n%s", out.stdout)
	}
	t.Log(out.stdout)
}

// A NATS password on the command line is refused before anything starts,
// without printing it; so is a worker without --nats.
func TestFarmRefusesClearPassword(t *testing.T) {
	for _, args := range [][]string{
		{"worker", "--nats", "nats://fp:s3cret@127.0.0.1:4222"},
		{"serve", "--nats", "nats://127.0.0.1:4222,nats://fp:s3cret@127.0.0.1:4223", "--workers", "0", "--listen", "127.0.0.1:0"},
	} {
		r := runBinary(t, t.TempDir(), args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "NATS_PASSWORD") || strings.Contains(r.stderr, "s3cret") {
			t.Errorf("%v: exit %d: %s", args, r.code, r.stderr)
		}
	}
	if r := runBinary(t, t.TempDir(), "worker"); r.code != exitUsage || !strings.Contains(r.stderr, "--nats is required") {
		t.Errorf("worker without --nats: exit %d: %s", r.code, r.stderr)
	}
}
