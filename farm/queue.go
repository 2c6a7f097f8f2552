package farm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors the queue's operations return.
var (
	ErrNotFound = errors.New("no such job")
	// ErrConflict: the job changed status meanwhile (a finished job
	// cannot be moved, a running one not deleted, …).
	ErrConflict = errors.New("the job's status does not allow it")
)

// queueMsg is a queue message's body.
type queueMsg struct {
	ID  string `json:"id"`
	Gen uint64 `json:"gen"`
}

// Get reads a job's state and its revision.
func (f *Farm) Get(ctx context.Context, id string) (*Job, uint64, error) {
	if !validID(id) {
		return nil, 0, ErrNotFound
	}
	var e jetstream.KeyValueEntry
	err := retry(ctx, func(ctx context.Context) (err error) {
		e, err = f.state.Get(ctx, id)
		return err
	}, jetstream.ErrKeyNotFound)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("farm: reading job %s: %w", id, err)
	}
	var j Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return nil, 0, fmt.Errorf("farm: job %s: %w", id, err)
	}
	return &j, e.Revision(), nil
}

// validID accepts what NewID makes (and nothing that could name another
// key or object).
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return id[0] != '.' && id[len(id)-1] != '.'
}

// Update applies change to job id's state with compare-and-set, retrying
// when another writer got there first. change returns ErrConflict (or
// another error) to leave the state as it is.
func (f *Farm) Update(ctx context.Context, id string, change func(*Job) error) (*Job, error) {
	for {
		j, rev, err := f.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := change(j); err != nil {
			return j, err
		}
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		err = retry(ctx, func(ctx context.Context) error {
			_, err := f.state.Update(ctx, id, b, rev)
			return err
		}, jetstream.ErrKeyExists)
		if err == nil {
			return j, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("farm: updating job %s: %w", id, err)
		}
		// Another writer changed it: read it again.
	}
}

// transientFor bounds how long an operation is tried again while the
// servers do not answer (a server of the cluster died and its streams
// elect new leaders; a connection moves to another server).
const transientFor = 30 * time.Second

// opTimeout bounds one try of an operation: a request the servers never
// answer (its stream has no leader yet) is given up and tried again,
// whatever the caller's deadline.
const opTimeout = 10 * time.Second

// retry runs op until it succeeds, fails with one of final (or another
// error that is not a server's silence), or transientFor has passed; each
// try gets opTimeout.
func retry(ctx context.Context, op func(context.Context) error, final ...error) error {
	var end time.Time
	wait := 100 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := op(octx)
		cancel()
		if err == nil || !transient(err) || slices.ContainsFunc(final, func(e error) bool { return errors.Is(err, e) }) {
			return err
		}
		if end.IsZero() {
			end = time.Now().Add(transientFor)
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, wait)
		wait = min(2*wait, 2*time.Second)
	}
}

// transient tells whether err is the servers' silence or a leader
// election, which passes, rather than an answer.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return true
	case errors.As(err, &apiErr):
		// 503: "JetStream system temporarily unavailable" (a stream
		// without a leader yet).
		return apiErr.Code == 503
	}
	return strings.Contains(err.Error(), "no responders") || strings.Contains(err.Error(), "timeout")
}

// Submit stores a new job (its uploads already in the file store) and
// queues it.
func (f *Farm) Submit(ctx context.Context, j *Job) error {
	j.Status, j.Gen = Queued, 1
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if _, err := f.state.Create(ctx, j.ID, b); err != nil {
		return fmt.Errorf("farm: storing job %s: %w", j.ID, err)
	}
	if err := f.publish(ctx, j.ID, j.Gen); err != nil {
		f.state.Delete(ctx, j.ID)
		return err
	}
	return nil
}

// publish queues generation gen of job id and records the message's
// sequence in its state.
func (f *Farm) publish(ctx context.Context, id string, gen uint64) error {
	b, _ := json.Marshal(queueMsg{ID: id, Gen: gen})
	var ack *jetstream.PubAck
	err := retry(ctx, func(ctx context.Context) (err error) {
		ack, err = f.js.Publish(ctx, subjectRun+id, b, jetstream.WithMsgID(id+"/"+strconv.FormatUint(gen, 10)))
		return err
	})
	if err != nil {
		return fmt.Errorf("farm: queueing job %s: %w", id, err)
	}
	f.Update(ctx, id, func(j *Job) error {
		if j.Gen != gen {
			return ErrConflict
		}
		j.Seq = ack.Sequence
		return nil
	})
	return nil
}

// dropMessage deletes a job's old queue message, if it is still there
// (a stale one that a worker receives is dropped anyway).
func (f *Farm) dropMessage(ctx context.Context, seq uint64) {
	if seq > 0 {
		f.stream.DeleteMsg(ctx, seq)
	}
}

// Cancel cancels a queued job, or asks the worker running it to stop.
// It returns the job's state after.
func (f *Farm) Cancel(ctx context.Context, id string) (*Job, error) {
	now := time.Now().UTC()
	j, err := f.Update(ctx, id, func(j *Job) error {
		switch j.Status {
		case Queued:
			j.Status, j.Finished = Cancelled, &now
		case Running:
			j.CancelRequested = true
		default:
			return ErrConflict
		}
		return nil
	})
	if err != nil {
		return j, err
	}
	if j.Status == Cancelled {
		f.dropMessage(ctx, j.Seq)
		f.deleteFiles(ctx, id, j.File(FileCheckpoint), j.File(FilePartial))
	} else {
		f.nc.Publish(subjectCancel+id, nil)
	}
	return j, nil
}

// Delete removes a finished job and its files.
func (f *Farm) Delete(ctx context.Context, id string) error {
	j, rev, err := f.Get(ctx, id)
	if err != nil {
		return err
	}
	if !Finished(j.Status) {
		return ErrConflict
	}
	if err := f.state.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return ErrConflict
		}
		return fmt.Errorf("farm: deleting job %s: %w", id, err)
	}
	f.deleteFiles(ctx, id, fileNames...)
	for _, obj := range j.Files {
		f.deleteFiles(ctx, id, obj)
	}
	return nil
}

// Jobs lists every job's state (unordered).
func (f *Farm) Jobs(ctx context.Context) ([]*Job, error) {
	lctx, cancel := context.WithTimeout(ctx, 3*opTimeout)
	defer cancel()
	lister, err := f.state.ListKeys(lctx)
	if err != nil {
		return nil, fmt.Errorf("farm: listing jobs: %w", err)
	}
	var jobs []*Job
	for k := range lister.Keys() {
		j, _, err := f.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// QueueOrder sorts queued jobs as the queue runs them: by the sequence
// of their live message.
func QueueOrder(jobs []*Job) {
	slices.SortStableFunc(jobs, func(a, b *Job) int {
		switch {
		case a.Seq != b.Seq:
			if a.Seq == 0 {
				return 1
			}
			if b.Seq == 0 {
				return -1
			}
			if a.Seq < b.Seq {
				return -1
			}
			return 1
		case a.Created.Before(b.Created):
			return -1
		case b.Created.Before(a.Created):
			return 1
		}
		return 0
	})
}

// MoveUp moves a queued job one place up the queue: it and the job before
// it swap places. The queue is a stream, so the jobs from the one before
// it on are queued again (new generations) after it, in their order.
func (f *Farm) MoveUp(ctx context.Context, id string) error {
	jobs, err := f.Jobs(ctx)
	if err != nil {
		return err
	}
	var queued []*Job
	for _, j := range jobs {
		if j.Status == Queued {
			queued = append(queued, j)
		}
	}
	QueueOrder(queued)
	at := slices.IndexFunc(queued, func(j *Job) bool { return j.ID == id })
	if at < 0 {
		if _, _, err := f.Get(ctx, id); err != nil {
			return err
		}
		return ErrConflict
	}
	if at == 0 {
		return nil // first already
	}
	for _, j := range queued[at-1:] {
		if j.ID != id {
			if err := f.requeue(ctx, j.ID); err != nil && !errors.Is(err, ErrConflict) {
				return err
			}
		}
	}
	return nil
}

// requeue gives a queued job a new message at the end of the queue.
func (f *Farm) requeue(ctx context.Context, id string) error {
	var old uint64
	j, err := f.Update(ctx, id, func(j *Job) error {
		if j.Status != Queued {
			return ErrConflict
		}
		old = j.Seq
		j.Gen++
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.publish(ctx, id, j.Gen); err != nil {
		return err
	}
	f.dropMessage(ctx, old)
	return nil
}

// Reconcile queues again every queued or running job that has no message
// in the stream (a process that died between storing a job and queueing
// it), so that no job is lost; it returns how many it queued.
func (f *Farm) Reconcile(ctx context.Context) (int, error) {
	jobs, err := f.Jobs(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range jobs {
		if Finished(j.Status) {
			continue
		}
		_, err := f.stream.GetLastMsgForSubject(ctx, subjectRun+j.ID)
		if err == nil {
			continue
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, fmt.Errorf("farm: checking job %s's message: %w", j.ID, err)
		}
		if err := f.publish(ctx, j.ID, j.Gen); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Watch follows every job's state: the current ones first, then each
// change (a nil Job with the id for a deletion, or for a state it cannot
// read), until ctx ends. rev is the change's revision in the state bucket
// (see StateRevision).
func (f *Farm) Watch(ctx context.Context, fn func(id string, j *Job, rev uint64)) (ready <-chan struct{}, err error) {
	w, err := f.state.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("farm: watching jobs: %w", err)
	}
	rd := make(chan struct{})
	go func() {
		defer w.Stop()
		readyOnce := false
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if !readyOnce {
						readyOnce = true
						close(rd)
					}
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					fn(e.Key(), nil, e.Revision())
					continue
				}
				var j Job
				if json.Unmarshal(e.Value(), &j) != nil {
					fn(e.Key(), nil, e.Revision()) // unreadable: as good as gone
					continue
				}
				fn(e.Key(), &j, e.Revision())
			}
		}
	}()
	return rd, nil
}

// StateRevision is the state bucket's latest revision: a watcher that has
// seen a change of this revision has seen every change made before it was
// asked, by this process or any other.
func (f *Farm) StateRevision(ctx context.Context) (uint64, error) {
	var rev uint64
	err := retry(ctx, func(ctx context.Context) error {
		st, err := f.state.Status(ctx)
		if err == nil {
			rev = st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("farm: reading the state bucket's revision: %w", err)
	}
	return rev, nil
}

// Idempotent records that an Idempotency-Key (its hash, key) made job id
// from a request whose hash is body. When the key was used before, it
// returns the job it made and whether that request's body was the same.
func (f *Farm) Idempotent(ctx context.Context, key, body, id string) (prev string, same bool, err error) {
	v, _ := json.Marshal(map[string]string{"job": id, "body": body})
	_, err = f.idem.Create(ctx, key, v)
	if err == nil {
		return "", false, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", false, fmt.Errorf("farm: idempotency key: %w", err)
	}
	e, err := f.idem.Get(ctx, key)
	if err != nil {
		return "", false, fmt.Errorf("farm: idempotency key: %w", err)
	}
	var rec map[string]string
	json.Unmarshal(e.Value(), &rec)
	return rec["job"], rec["body"] == body, nil
}

// ForgetIdempotent drops a key whose job could not be made.
func (f *Farm) ForgetIdempotent(ctx context.Context, key string) { f.idem.Purge(ctx, key) }

// Cancels delivers the ids of jobs whose cancel is asked, until the
// subscription is closed.
func (f *Farm) Cancels(fn func(id string)) (*nats.Subscription, error) {
	return f.nc.Subscribe(subjectCancel+">", func(m *nats.Msg) { fn(m.Subject[len(subjectCancel):]) })
}
