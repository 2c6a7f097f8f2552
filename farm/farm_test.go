package farm

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
