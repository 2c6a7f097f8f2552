package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/farm"
	"github.com/framepack-go/framepack/section"
)

// A worker on several GPUs is one process per GPU (one rank each, joined
// by the pipeline's communicator): rank 0 takes jobs as any worker does
// and, before each job's generation, tells the other ranks over NATS to
// run it beside it (NewRanks); they read the job's images and checkpoint
// from the farm and call Generate with the same request (Follower), so
// that the ranks share its sampling in lockstep.

const subjectRanks = "framepack.ranks." // + group: the jobs rank 0 starts

// rankJob is the message that starts a job on the other ranks.
type rankJob struct {
	Job        *farm.Job `json:"job"`
	Checkpoint string    `json:"checkpoint,omitempty"`
}

// natsRanks is Ranks over the farm's connection.
type natsRanks struct {
	nc      *nats.Conn
	subject string
	others  int
}

// NewRanks is the Ranks of rank 0 of a worker whose size ranks share the
// group name (the same for every rank of one worker, and no other).
func NewRanks(f *farm.Farm, group string, size int) Ranks {
	return &natsRanks{nc: f.Conn(), subject: subjectRanks + group, others: size - 1}
}

// rankWait bounds how long the other ranks may take to read a job.
const rankWait = 2 * time.Minute

func (r *natsRanks) Start(ctx context.Context, j *farm.Job, checkpoint string) error {
	b, err := json.Marshal(rankJob{Job: j, Checkpoint: checkpoint})
	if err != nil {
		return err
	}
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := r.nc.PublishRequest(r.subject, inbox, b); err != nil {
		return err
	}
	end := time.Now().Add(rankWait)
	for n := 0; n < r.others; n++ {
		m, err := sub.NextMsg(time.Until(end))
		if err != nil {
			return fmt.Errorf("%d of the other %d ranks answered: %w", n, r.others, err)
		}
		if len(m.Data) > 0 {
			return fmt.Errorf("a rank could not run job %s: %s", j.ID, m.Data)
		}
	}
	return nil
}

// Follower is a rank other than 0 of a multi-GPU worker.
type Follower struct {
	f    *farm.Farm
	sub  *nats.Subscription
	jobs chan *nats.Msg
	log  *slog.Logger
}

// NewFollower listens for the jobs rank 0 of group starts. Make it before
// the pipeline joins the other ranks, so that none is missed.
func NewFollower(f *farm.Farm, group string, log *slog.Logger) (*Follower, error) {
	fw := &Follower{f: f, jobs: make(chan *nats.Msg, 16), log: log}
	if fw.log == nil {
		fw.log = slog.Default()
	}
	var err error
	if fw.sub, err = f.Conn().ChanSubscribe(subjectRanks+group, fw.jobs); err != nil {
		return nil, err
	}
	if err := f.Conn().Flush(); err != nil {
		fw.sub.Unsubscribe()
		return nil, err
	}
	return fw, nil
}

// Run runs each job rank 0 starts on p (which must have joined the ranks)
// until ctx ends; a job that fails here ends it with the error, since the
// ranks are then out of step.
func (fw *Follower) Run(ctx context.Context, p *framepack.Pipeline) error {
	defer fw.sub.Unsubscribe()
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return nil
		case m = <-fw.jobs:
		}
		var rj rankJob
		if err := json.Unmarshal(m.Data, &rj); err != nil || rj.Job == nil {
			m.Respond([]byte("a malformed job message"))
			continue
		}
		req, err := fw.request(ctx, &rj)
		if err != nil {
			m.Respond([]byte(err.Error()))
			continue
		}
		if err := m.Respond(nil); err != nil {
			return err
		}
		fw.log.Info(fmt.Sprintf("job %s: running its share", rj.Job.ID))
		if _, err := p.Generate(ctx, req); err != nil {
			return fmt.Errorf("job %s: %w", rj.Job.ID, err)
		}
	}
}

// request is the job's request as rank 0 makes it.
func (fw *Follower) request(ctx context.Context, rj *rankJob) (framepack.Request, error) {
	j := rj.Job
	img := func(name string) (*section.RGB, error) {
		b, err := fw.f.GetBytes(ctx, j.ID, name)
		if err != nil {
			return nil, err
		}
		return section.DecodeImage(bytes.NewReader(b))
	}
	start, err := img(farm.FileImage)
	if err != nil {
		return framepack.Request{}, err
	}
	var end *section.RGB
	if j.EndImage != nil {
		if end, err = img(farm.FileEndImage); err != nil {
			return framepack.Request{}, err
		}
	}
	req := Request(j.Settings, start, end)
	if rj.Checkpoint != "" {
		b, err := fw.f.GetBytes(ctx, j.ID, rj.Checkpoint)
		if err != nil {
			return req, err
		}
		if req.Resume, err = framepack.UnmarshalCheckpoint(b); err != nil {
			return req, errors.New("its checkpoint: " + err.Error())
		}
	}
	return req, nil
}
