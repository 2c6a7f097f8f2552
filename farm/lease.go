package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLost is a lease whose job another worker took, or that was deleted.
var ErrLost = errors.New("the job is no longer this worker's")

// Lease is a job a worker took: its queue message, held (and kept alive
// with progress acknowledgements) until the worker finishes or requeues it.
type Lease struct {
	f      *Farm
	msg    jetstream.Msg
	worker string
	gen    uint64
	// Job is the state as taken.
	Job *Job

	stopOnce sync.Once
	stop     chan struct{}
}

// Take waits for the next job a worker named worker can run and takes it,
// until ctx ends (then it returns ctx.Err()). Stale messages (an old
// generation, a finished or cancelled job) are dropped on the way.
func (f *Farm) Take(ctx context.Context, worker string) (*Lease, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := f.cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			f.log.Warn("farm: fetching a job: " + err.Error())
			sleep(ctx, time.Second)
			continue
		}
		for msg := range batch.Messages() {
			l, err := f.lease(ctx, msg, worker)
			if err != nil {
				f.log.Warn("farm: taking a job: " + err.Error())
				msg.Nak()
				continue
			}
			if l != nil {
				return l, nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			f.log.Warn("farm: fetching a job: " + err.Error())
			sleep(ctx, time.Second)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lease takes msg's job, or drops a stale msg and returns nil.
func (f *Farm) lease(ctx context.Context, msg jetstream.Msg, worker string) (*Lease, error) {
	var q queueMsg
	if err := json.Unmarshal(msg.Data(), &q); err != nil || !validID(q.ID) {
		f.log.Warn("farm: dropping a malformed queue message")
		msg.Term()
		return nil, nil
	}
	now := time.Now().UTC()
	drop := false
	j, err := f.Update(ctx, q.ID, func(j *Job) error {
		switch {
		case j.Gen != q.Gen || Finished(j.Status):
			drop = true
			return ErrConflict
		case j.CancelRequested:
			// Cancelled while a worker that died ran it.
			j.Status, j.Finished = Cancelled, &now
			drop = true
			return nil
		}
		j.Status, j.Worker = Running, worker
		j.Attempts++
		if j.Started == nil {
			j.Started = &now
		}
		return nil
	})
	switch {
	case errors.Is(err, ErrNotFound):
		msg.Term()
		return nil, nil
	case drop:
		msg.Ack()
		if err == nil && j.Status == Cancelled {
			f.deleteFiles(ctx, q.ID, FileCheckpoint, FilePartial)
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	l := &Lease{f: f, msg: msg, worker: worker, gen: q.Gen, Job: j, stop: make(chan struct{})}
	go l.keepAlive()
	return l, nil
}

// keepAlive tells the server the job is still being worked on, three
// times per AckWait, until the lease ends.
func (l *Lease) keepAlive() {
	t := time.NewTicker(l.f.ackWait / 3)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			if err := l.msg.InProgress(); err != nil {
				l.f.log.Warn(fmt.Sprintf("farm: job %s: progress acknowledgement: %v", l.Job.ID, err))
			}
		}
	}
}

func (l *Lease) end() { l.stopOnce.Do(func() { close(l.stop) }) }

// Update changes the job's state while this lease holds it.
func (l *Lease) Update(ctx context.Context, change func(*Job) error) (*Job, error) {
	return l.f.Update(ctx, l.Job.ID, func(j *Job) error {
		if j.Status != Running || j.Gen != l.gen || j.Worker != l.worker {
			return ErrLost
		}
		return change(j)
	})
}

// Finish records the job's end (change sets the status: Done, Failed or
// Cancelled) and acknowledges its message: call it only once everything
// the job made is stored.
func (l *Lease) Finish(ctx context.Context, change func(*Job)) (*Job, error) {
	now := time.Now().UTC()
	j, err := l.Update(ctx, func(j *Job) error {
		change(j)
		j.Finished = &now
		return nil
	})
	l.end()
	if err != nil {
		return j, err
	}
	if err := l.msg.DoubleAck(ctx); err != nil {
		l.f.log.Warn(fmt.Sprintf("farm: job %s: acknowledging: %v", l.Job.ID, err))
	}
	return j, nil
}

// Requeue puts the job back in the queue at once, where it is (a worker
// that stops: the job goes on from its checkpoint on the next).
func (l *Lease) Requeue(ctx context.Context) error {
	_, err := l.Update(ctx, func(j *Job) error {
		j.Status = Queued
		return nil
	})
	l.end()
	if nerr := l.msg.Nak(); err == nil {
		err = nerr
	}
	return err
}

// Release stops keeping the job alive without answering its message
// (it is delivered again after AckWait).
func (l *Lease) Release() { l.end() }

// Farm is the lease's farm.
func (l *Lease) Farm() *Farm { return l.f }
