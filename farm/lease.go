package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// attempt is the job's Attempts when this lease took it: the run's
	// number, which names its files; writes counts its PutFile calls.
	attempt, writes int
	// Job is the state as taken.
	Job *Job

	stopOnce sync.Once
	stop     chan struct{}
}

// Take waits for the next job and takes it for a worker named worker,
// until ctx ends (then it returns ctx.Err()). Stale messages (an old
// generation, a finished or cancelled job) are dropped on the way.
func (f *Farm) Take(ctx context.Context, worker string) (*Lease, error) {
	return f.TakeWith(ctx, Taker{Worker: worker})
}

// Taker is a worker taking jobs.
type Taker struct {
	// Worker is its name, Instance its run (as announced).
	Worker, Instance string
	// Fit says why the worker cannot run a job (its variant, its LoRAs,
	// its memory); nil takes any job.
	Fit func(*Job) error
}

// How long a job a worker cannot run stays away from the workers before
// it is delivered again: briefly while another live worker may run it (an
// idle one takes it within that), longer while none can (a worker that
// starts takes it within that).
const (
	RefusedDelay    = time.Second
	UnrunnableDelay = 5 * time.Second
)

// TakeWith is Take for a worker that runs only the jobs t.Fit accepts.
// A job it cannot run is left in the queue for the others (its message
// answered with a delayed negative acknowledgement, so that it comes back
// after RefusedDelay or UnrunnableDelay), the refusal and its reason are
// recorded in the job's state, and when every live worker has refused it
// the state says so (Job.Unrunnable).
func (f *Farm) TakeWith(ctx context.Context, t Taker) (*Lease, error) {
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
			l, err := f.lease(ctx, msg, t)
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

// lease takes msg's job, or drops a stale msg, or leaves a job the taker
// cannot run, and returns nil.
func (f *Farm) lease(ctx context.Context, msg jetstream.Msg, t Taker) (*Lease, error) {
	var q queueMsg
	if err := json.Unmarshal(msg.Data(), &q); err != nil || !validID(q.ID) {
		f.log.Warn("farm: dropping a malformed queue message")
		msg.Term()
		return nil, nil
	}
	worker := t.Worker
	if t.Fit != nil {
		j, _, err := f.Get(ctx, q.ID)
		if errors.Is(err, ErrNotFound) {
			msg.Term()
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if j.Gen == q.Gen && !Finished(j.Status) && !j.CancelRequested {
			if why := t.Fit(j); why != nil {
				f.refuse(ctx, msg, q, t, why)
				return nil, nil
			}
		}
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
		j.Refusals, j.Unrunnable = nil, ""
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
			f.deleteFiles(ctx, q.ID, j.File(FileCheckpoint), j.File(FilePartial))
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	l := &Lease{f: f, msg: msg, worker: worker, gen: q.Gen, attempt: j.Attempts, Job: j, stop: make(chan struct{})}
	go l.keepAlive()
	return l, nil
}

// refuse leaves q's job to other workers: it records why t cannot run it
// (and whether any live worker can) and answers msg so that it comes back
// after a delay.
func (f *Farm) refuse(ctx context.Context, msg jetstream.Msg, q queueMsg, t Taker, why error) {
	live, err := f.Workers(ctx)
	if err != nil {
		f.log.Warn("farm: " + err.Error())
	}
	r := Refusal{Worker: t.Worker, Instance: t.Instance, Reason: why.Error(), At: time.Now().UTC()}
	errSame := errors.New("unchanged")
	j, err := f.Update(ctx, q.ID, func(j *Job) error {
		if j.Gen != q.Gen || Finished(j.Status) {
			return ErrConflict
		}
		changed := setRefusal(j, r)
		if j.Status == Running && !isLive(live, j.Worker) {
			// Its worker died: the job waits again.
			j.Status, changed = Queued, true
		}
		if un := Unrunnable(j, live); un != j.Unrunnable {
			j.Unrunnable, changed = un, true
		}
		if !changed {
			return errSame
		}
		return nil
	})
	delay := RefusedDelay
	if err != nil && !errors.Is(err, errSame) && !errors.Is(err, ErrConflict) {
		f.log.Warn(fmt.Sprintf("farm: job %s: recording that %s cannot run it: %v", q.ID, t.Worker, err))
	}
	if j != nil && j.Unrunnable != "" {
		delay = UnrunnableDelay
	}
	if err == nil {
		f.log.Info(fmt.Sprintf("farm: job %s: left for another worker: %s cannot run it: %v", q.ID, t.Worker, why))
	}
	if err := msg.NakWithDelay(delay); err != nil {
		f.log.Warn(fmt.Sprintf("farm: job %s: leaving it: %v", q.ID, err))
	}
}

// keepAlive tells the server the job is still being worked on, three
// times per AckWait, until the lease ends.
func (l *Lease) keepAlive() {
	for {
		select {
		case <-l.stop:
			return
		case <-time.After(l.f.AckWait() / 3):
			if err := l.msg.InProgress(); err != nil {
				l.f.log.Warn(fmt.Sprintf("farm: job %s: progress acknowledgement: %v", l.Job.ID, err))
			}
		}
	}
}

// FileName is the object this run stores the job's file name in: the
// run's own (Job.Files names it once the state says it counts).
func (l *Lease) FileName(name string) string {
	n := strconv.Itoa(l.attempt)
	if i := strings.LastIndexByte(name, '.'); i > 0 {
		return name[:i] + ".run" + n + name[i:]
	}
	return name + ".run" + n
}

// PutFile stores b as a new object for the job's file name and, with
// compare-and-set on the job's state, makes it the one that counts (and
// change, when not nil, changes the state in the same write). The object
// it replaces is deleted; so is the new one when the job is no longer this
// lease's (ErrLost). Each call writes an object of its own, so a run that
// lost the job never overwrites one the state names.
func (l *Lease) PutFile(ctx context.Context, name string, b []byte, change func(*Job) error) (*Job, error) {
	l.writes++
	obj := l.FileName(name)
	if i := strings.LastIndexByte(obj, '.'); i > 0 && strings.Contains(name, ".") {
		obj = obj[:i] + "-" + strconv.Itoa(l.writes) + obj[i:]
	} else {
		obj += "-" + strconv.Itoa(l.writes)
	}
	if err := l.f.PutBytes(ctx, l.Job.ID, obj, b); err != nil {
		return nil, err
	}
	return l.useFiles(ctx, map[string]string{name: obj}, change)
}

// useFiles makes the objects of files (name → object, stored by this
// run) the job's, deleting those they replace.
func (l *Lease) useFiles(ctx context.Context, files map[string]string, change func(*Job) error) (*Job, error) {
	var old []string
	j, err := l.Update(ctx, func(j *Job) error {
		old = old[:0]
		if change != nil {
			if err := change(j); err != nil {
				return err
			}
		}
		if j.Files == nil {
			j.Files = map[string]string{}
		}
		for name, obj := range files {
			if prev := j.File(name); prev != obj {
				old = append(old, prev)
			}
			j.Files[name] = obj
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrLost) {
			for _, obj := range files {
				l.f.deleteFiles(ctx, l.Job.ID, obj)
			}
		}
		return j, err
	}
	l.f.deleteFiles(ctx, l.Job.ID, old...)
	return j, nil
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
// the job made is stored. files (name → object) are objects this run
// stored (through FileName) that become the job's in the same write; the
// checkpoint and the video so far are deleted.
func (l *Lease) Finish(ctx context.Context, files map[string]string, change func(*Job)) (*Job, error) {
	now := time.Now().UTC()
	var drop []string
	j, err := l.useFiles(ctx, files, func(j *Job) error {
		change(j)
		j.Finished = &now
		drop = drop[:0]
		for _, name := range []string{FileCheckpoint, FilePartial} {
			if obj, ok := j.Files[name]; ok {
				drop = append(drop, obj)
				delete(j.Files, name)
			}
		}
		return nil
	})
	l.end()
	if err != nil {
		return j, err
	}
	l.f.deleteFiles(ctx, l.Job.ID, drop...)
	l.f.deleteFiles(ctx, l.Job.ID, FileCheckpoint, FilePartial)
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
