package framepack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tensor"
)

// sharedRun is a whole job on the tiny model as a fresh CPU pipeline with
// the default options makes it, with what its Progress reported after each
// section (in generation order) and its debug log. Tests that check other
// properties of the same job read it from runShared instead of running it
// again.
type sharedRun struct {
	*Result
	// Checkpoints are the marshalled Progress.Checkpoint of each section;
	// AfterLatents and AfterPixels host copies of its Progress.Latents and
	// Pixels, AfterFrames its Progress.Frames.
	Checkpoints               [][]byte
	AfterLatents, AfterPixels []*tensor.Tensor
	AfterFrames               []int
	Log                       string
}

// sharedRuns maps a request's key to the once-run job.
var sharedRuns sync.Map // string → func() (*sharedRun, error)

// runShared returns the job req asks for (RGB images; no Progress, no
// Resume), run once per test binary for each distinct request. It is
// shared: read it, never change it.
func runShared(t *testing.T, req Request) *sharedRun {
	t.Helper()
	key := sharedKey(t, req)
	dir := tinyDir(t)
	f, _ := sharedRuns.LoadOrStore(key, sync.OnceValues(func() (*sharedRun, error) {
		var logs bytes.Buffer
		p, err := Load(dir, Options{Device: DeviceCPU,
			Logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, logWriter()), &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			return nil, err
		}
		defer p.Close()
		run := &sharedRun{}
		var perr error
		req.Progress = func(pr Progress) {
			if pr.Stage != StageSectionDone || perr != nil {
				return
			}
			b, err := pr.Checkpoint.MarshalBinary()
			if err != nil {
				perr = err
				return
			}
			run.Checkpoints = append(run.Checkpoints, b)
			run.AfterLatents = append(run.AfterLatents, hostCopy(pr.Latents))
			run.AfterPixels = append(run.AfterPixels, hostCopy(pr.Pixels))
			run.AfterFrames = append(run.AfterFrames, pr.Frames)
		}
		if run.Result, err = p.Generate(context.Background(), req); err == nil {
			err = perr
		}
		run.Log = logs.String()
		return run, err
	}))
	run, err := f.(func() (*sharedRun, error))()
	if err != nil {
		t.Fatalf("the shared run of %s: %v", key, err)
	}
	return run
}

// sharedKey names a request by its settings and its images' pixels.
func sharedKey(t *testing.T, req Request) string {
	t.Helper()
	if req.Image != nil || req.EndImage != nil || req.Progress != nil || req.Resume != nil {
		t.Fatal("a shared run takes its images as RGB, and no Progress or Resume")
	}
	h := sha256.New()
	for _, im := range append([]*section.RGB{req.RGB, req.EndRGB}, req.Video...) {
		if im == nil {
			h.Write([]byte("none;"))
			continue
		}
		fmt.Fprintf(h, "%d×%d:", im.W, im.H)
		h.Write(im.Pix)
	}
	req.RGB, req.EndRGB, req.Video = nil, nil, nil
	return fmt.Sprintf("%+v images %x", req, h.Sum(nil)[:8])
}
