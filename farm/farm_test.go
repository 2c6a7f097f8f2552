package farm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/framepack-go/framepack/memory"
)

// externalServer runs a NATS server with JetStream on a free loopback
// port, as a separate deployment would.
func externalServer(t *testing.T) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns.ClientURL()
}

// Two processes on one external NATS share the queue: a job submitted
// through one is taken by the other; a worker that stops acknowledging
// progress loses its job to another after the ack wait, which resumes it;
// the job is finished once.
func TestExternalSharedQueue(t *testing.T) {
	t.Parallel() // its own NATS server; the tests mostly wait out ack waits and delays
	url := externalServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *Farm {
		f, err := Open(ctx, Config{URL: url, AckWait: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		return f
	}
	api, w1, w2 := open(), open(), open()
	if api.Embedded() {
		t.Fatal("a farm on a URL says it is embedded")
	}
	j := &Job{ID: NewID(time.Now()), Created: time.Now().UTC()}
	if err := api.PutBytes(ctx, j.ID, FileImage, []byte("image")); err != nil {
		t.Fatal(err)
	}
	if err := api.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	l1, err := w1.Take(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if l1.Job.ID != j.ID || l1.Job.Status != Running || l1.Job.Worker != "w1" {
		t.Fatalf("w1 took %+v", l1.Job)
	}
	if b, err := w1.GetBytes(ctx, j.ID, FileImage); err != nil || string(b) != "image" {
		t.Fatalf("the upload through another process: %q %v", b, err)
	}
	// w1 goes silent (a dead machine): after the ack wait w2 gets the job.
	l1.Release()
	t0 := time.Now()
	l2, err := w2.Take(ctx, "w2")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Job.ID != j.ID || l2.Job.Attempts != 2 || l2.Job.Worker != "w2" {
		t.Fatalf("w2 took %+v", l2.Job)
	}
	t.Logf("redelivered to another worker %s after the first went silent", time.Since(t0).Round(time.Millisecond))
	// The silent worker cannot finish it any more; the new one does.
	if _, err := l1.Finish(ctx, nil, func(j *Job) { j.Status = Done }); err == nil {
		t.Error("the worker that lost the job finished it")
	}
	if _, err := l2.Finish(ctx, nil, func(j *Job) { j.Status = Done }); err != nil {
		t.Fatal(err)
	}
	got, _, err := api.Get(ctx, j.ID)
	if err != nil || got.Status != Done || got.Worker != "w2" {
		t.Fatalf("the job after: %+v %v", got, err)
	}
	// Nothing is left to take.
	tctx, tcancel := context.WithTimeout(ctx, 3*time.Second)
	defer tcancel()
	if l, err := w1.Take(tctx, "w1"); err == nil {
		t.Fatalf("job %s taken again after it was done", l.Job.ID)
	}
}

// A running worker's progress acknowledgements keep its job beyond the
// ack wait.
func TestProgressKeepsJob(t *testing.T) {
	t.Parallel() // its own NATS server; the tests mostly wait out ack waits and delays
	url := externalServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w1, err := Open(ctx, Config{URL: url, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	w2, err := Open(ctx, Config{URL: url, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	j := &Job{ID: NewID(time.Now()), Created: time.Now().UTC()}
	if err := w1.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	l, err := w1.Take(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 4*time.Second)
	defer tcancel()
	if other, err := w2.Take(tctx, "w2"); err == nil {
		t.Fatalf("a job kept alive went to another worker: %+v", other.Job)
	}
	if err := l.Requeue(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := w2.Take(ctx, "w2")
	if err != nil || l2.Job.ID != j.ID || l2.Job.Status != Running {
		t.Fatalf("after a requeue: %v %+v", err, l2)
	}
	l2.Finish(ctx, nil, func(j *Job) { j.Status = Done })
}

// Two workers racing on one job after a redelivery store one result: the
// one that lost the job (it went silent past the ack wait, then came
// back) can neither record a checkpoint nor finish, and its files are
// deleted; the state names the winner's files only.
func TestRaceStoresOneResult(t *testing.T) {
	t.Parallel() // its own NATS server; the tests mostly wait out ack waits and delays
	url := externalServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func() *Farm {
		f, err := Open(ctx, Config{URL: url, AckWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		return f
	}
	api, w1, w2 := open(), open(), open()
	j := &Job{ID: NewID(time.Now()), Created: time.Now().UTC()}
	if err := api.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	l1, err := w1.Take(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l1.PutFile(ctx, FileCheckpoint, []byte("section 1 by w1"), func(j *Job) error { j.Section = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	l1.Release() // w1 goes silent
	l2, err := w2.Take(ctx, "w2")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := w2.GetBytes(ctx, j.ID, l2.Job.File(FileCheckpoint)); err != nil || string(b) != "section 1 by w1" {
		t.Fatalf("w2 reads the checkpoint %q (%v)", b, err)
	}
	// Both store a video and try to finish; w1 first.
	v1, v2 := l1.FileName(FileVideo), l2.FileName(FileVideo)
	if v1 == v2 {
		t.Fatalf("two runs store the video under one name %q", v1)
	}
	if _, err := l1.PutFile(ctx, FileCheckpoint, []byte("section 2 by w1"), nil); !errors.Is(err, ErrLost) {
		t.Errorf("w1's checkpoint after losing the job: %v", err)
	}
	if b, err := w2.GetBytes(ctx, j.ID, l2.Job.File(FileCheckpoint)); err != nil || string(b) != "section 1 by w1" {
		t.Fatalf("after w1's late write w2 reads the checkpoint %q (%v)", b, err)
	}
	w1.PutBytes(ctx, j.ID, v1, []byte("w1's video"))
	if _, err := l1.Finish(ctx, map[string]string{FileVideo: v1}, func(j *Job) { j.Status = Done }); !errors.Is(err, ErrLost) {
		t.Errorf("w1 finished a job it lost: %v", err)
	}
	w2.PutBytes(ctx, j.ID, v2, []byte("w2's video"))
	if _, err := l2.Finish(ctx, map[string]string{FileVideo: v2}, func(j *Job) { j.Status = Done }); err != nil {
		t.Fatal(err)
	}
	got, _, err := api.Get(ctx, j.ID)
	if err != nil || got.Status != Done || got.Worker != "w2" {
		t.Fatalf("the job: %+v %v", got, err)
	}
	if b, err := api.GetBytes(ctx, j.ID, got.File(FileVideo)); err != nil || string(b) != "w2's video" {
		t.Fatalf("the stored video: %q %v", b, err)
	}
	objs, err := api.Objects(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 || objs[0] != v2 {
		t.Errorf("the job's objects after the race: %v, want only %s", objs, v2)
	}
}

// A job a worker cannot run is left for another, with the reason in its
// state; when every live worker refused it, the state says no live worker
// can run it; a worker that can takes it, which clears both.
func TestRefusals(t *testing.T) {
	t.Parallel() // its own NATS server; the tests mostly wait out ack waits and delays
	url := externalServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, w := range []string{"a", "b"} {
		if err := f.Announce(ctx, &WorkerInfo{Name: w, Instance: "i-" + w}); err != nil {
			t.Fatal(err)
		}
	}
	j := &Job{ID: NewID(time.Now()), Created: time.Now().UTC(), Settings: Settings{Model: "f1"}}
	if err := f.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	refuse := func(j *Job) error { return errors.New("no f1 transformer") }
	take := func(name string, fit func(*Job) error, d time.Duration) (*Lease, error) {
		tctx, tcancel := context.WithTimeout(ctx, d)
		defer tcancel()
		return f.TakeWith(tctx, Taker{Worker: name, Instance: "i-" + name, Fit: fit})
	}
	if l, err := take("a", refuse, 1500*time.Millisecond); err == nil {
		t.Fatalf("a took %s", l.Job.ID)
	}
	got, _, _ := f.Get(ctx, j.ID)
	if got.Status != Queued || len(got.Refusals) != 1 || got.Refusals[0].Worker != "a" || got.Unrunnable != "" {
		t.Fatalf("after a's refusal: %+v", got)
	}
	if l, err := take("b", refuse, 2500*time.Millisecond); err == nil {
		t.Fatalf("b took %s", l.Job.ID)
	}
	got, _, _ = f.Get(ctx, j.ID)
	if want := "no live worker can run it (a: no f1 transformer; b: no f1 transformer)"; got.Unrunnable != want {
		t.Fatalf("after both refused: %q, want %q", got.Unrunnable, want)
	}
	if err := f.Announce(ctx, &WorkerInfo{Name: "c", Instance: "i-c"}); err != nil {
		t.Fatal(err)
	}
	live, err := f.Workers(ctx)
	if err != nil || len(live) != 3 {
		t.Fatalf("live workers: %v %v", live, err)
	}
	l, err := take("c", func(*Job) error { return nil }, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l.Job.Unrunnable != "" || l.Job.Refusals != nil || l.Job.Worker != "c" {
		t.Errorf("taken: %+v", l.Job)
	}
	l.Finish(ctx, nil, func(j *Job) { j.Status = Done })
	f.Withdraw(ctx, "c", "i-c")
	if live, _ := f.Workers(ctx); len(live) != 2 {
		t.Errorf("after c withdrew: %d live", len(live))
	}
}

// Credentials never come from a URL's password; a URL's user takes its
// password from the environment, and the options are built from files.
func TestAuth(t *testing.T) {
	if err := CheckURL("nats://u:secret@127.0.0.1:4222"); err == nil || !strings.Contains(err.Error(), "NATS_PASSWORD") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a password in the URL: %v", err)
	}
	if err := CheckURL("nats://a:4222,nats://alice@b:4222,c:4222"); err != nil {
		t.Error(err)
	}
	t.Setenv(EnvPassword, "")
	if _, _, err := (Auth{}).Options("nats://alice@b:4222"); err == nil || !strings.Contains(err.Error(), "no password") {
		t.Errorf("a user without a password: %v", err)
	}
	t.Setenv(EnvPassword, "pw")
	dial, opts, err := (Auth{}).Options("nats://alice@b:4222,nats://c:4222")
	if err != nil || dial != "nats://b:4222,nats://c:4222" || len(opts) != 1 {
		t.Errorf("a user with $NATS_PASSWORD: %q %d %v", dial, len(opts), err)
	}
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("tkn\n"), 0o600)
	if _, _, err := (Auth{TokenFile: tok}).Options("nats://alice@b:4222"); err == nil {
		t.Error("a user and a token both taken")
	}
	t.Setenv(EnvPassword, "")
	if _, opts, err := (Auth{TokenFile: tok}).Options("nats://b:4222"); err != nil || len(opts) != 1 {
		t.Errorf("a token file: %d %v", len(opts), err)
	}
	if _, _, err := (Auth{TLSCert: "x.pem"}).Options("tls://b:4222"); err == nil {
		t.Error("a client certificate without its key")
	}
}

// A file store larger than the embedded server may keep on the data
// folder's disk is refused at Open with a message that names the size and
// the folder, not NATS's bare "insufficient storage resources".
func TestStoreLargerThanDisk(t *testing.T) {
	t.Parallel() // its own NATS server; the tests mostly wait out ack waits and delays
	data := t.TempDir()
	f, err := Open(context.Background(), Config{DataDir: data, MaxStoredBytes: 1 << 60})
	if err == nil {
		f.Close()
		t.Fatal("a 1 EiB file store opened")
	}
	for _, want := range []string{memory.FormatBytes(1 << 60), data, "give a smaller size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
}
