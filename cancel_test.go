package framepack

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/framepack-go/framepack/convchain"
)

// TestCancelKillsSearch: cancelling Generate's context while a conv3d
// search hangs (conv3d.cpu=hang, a 30 s deadline) kills the search at
// once: Generate returns the context's error well within a second or two,
// not at the deadline.
func TestCancelKillsSearch(t *testing.T) {
	t.Setenv(convchain.FaultsEnv, "conv3d.cpu=hang")
	p, err := Load(tinyDir(t), Options{Device: DeviceCPU, Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled time.Time
	req := smallestJob(t)
	req.Progress = func(pr Progress) {
		if pr.Stage == StageVAEEncode && cancelled.IsZero() {
			// The first convolution's search starts right after the VAE
			// loads: cancel inside it.
			cancelled = time.Now().Add(500 * time.Millisecond)
			time.AfterFunc(500*time.Millisecond, cancel)
		}
	}
	_, err = p.Generate(ctx, req)
	took := time.Since(cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want the context's error, got %v", err)
	}
	if took > 2*time.Second {
		t.Fatalf("Generate returned %v after its context was cancelled during a search", took)
	}
	t.Logf("returned %v after the cancel: %v", took.Round(time.Millisecond), err)
}
