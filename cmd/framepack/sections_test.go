package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/video"
)

// TestSectionWriter: the video after section 1 is a valid file holding
// that section's frames by the time section 2 decodes (section 1's decode
// may run beside section 2's sampling), and a failed job removes it.
func TestSectionWriter(t *testing.T) {
	if !video.HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	t.Setenv("XDG_CACHE_HOME", cacheDir(t))
	dir, temporary, err := tinymodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	if temporary {
		defer os.RemoveAll(dir)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := framepack.Load(dir, framepack.Options{Device: framepack.DeviceCPU, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	img, err := section.LoadImage(sceneImage)
	if err != nil {
		t.Fatal(err)
	}
	out, err := checkVideoOutput(filepath.Join(t.TempDir(), "out.mp4"), true)
	if err != nil {
		t.Fatal(err)
	}
	req := framepack.DefaultRequest()
	req.RGB, req.Resolution, req.Seconds, req.LatentWindowSize, req.Steps = img, 64, 1.2, 3, 2 // three sections
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sw := newSectionWriter(ctx, out, video.Options{FPS: framepack.FPS}, log)
	checked := false
	req.Progress = func(pr framepack.Progress) {
		sw.report(pr)
		if pr.Stage == framepack.StageDecode && pr.Section == 2 {
			if err := sw.wait(); err != nil {
				t.Fatal(err)
			}
			verifyMP4(t, out.path)
			if n := probeFrames(t, out.path); n >= 0 && n != pr.Frames {
				t.Errorf("after section 1: %d frames in the file, %d made", n, pr.Frames)
			}
			checked = true
			cancel() // the job stops before section 3: the section video goes
		}
	}
	if _, err := p.Generate(ctx, req); err == nil {
		t.Fatal("the cancelled job succeeded")
	}
	if !checked {
		t.Fatal("section 2 never decoded")
	}
	sw.discard()
	if _, err := os.Stat(out.path); !os.IsNotExist(err) {
		t.Errorf("the failed job left its section video: %v", err)
	}
}
