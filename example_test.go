package framepack_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/tinymodel"
	"github.com/framepack-go/framepack/video"
)

// quiet drops the pipeline's progress and memory lines (nil Options.Logger
// means slog.Default()).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// tinyRequest is a quick job on p, the built-in tiny model: a plain start
// image, a 0.2-second video, 2 steps per section, at the resolution the
// model was made for (p.DefaultRequest).
func tinyRequest(p *framepack.Pipeline) framepack.Request {
	req := p.DefaultRequest()
	img := section.NewRGB(160, 120)
	for i := range img.Pix {
		img.Pix[i] = uint8(i % 251)
	}
	req.RGB = img
	req.Prompt = "A red kite flies over green hills."
	req.Seconds = 0.2
	req.LatentWindowSize = 3
	req.Steps = 2
	return req
}

// loadTiny loads the built-in tiny model on the CPU as ExampleLoad does,
// or prints why it cannot and returns nil; done closes the pipeline and
// removes the model's temporary folder.
func loadTiny() (p *framepack.Pipeline, done func()) {
	dir, temporary, err := tinymodel.Dir()
	if err != nil {
		fmt.Println(err)
		return nil, nil
	}
	removeDir := func() {
		if temporary {
			os.RemoveAll(dir)
		}
	}
	if p, err = framepack.Load(dir, framepack.Options{Device: framepack.DeviceCPU, Logger: quiet}); err != nil {
		fmt.Println(err)
		removeDir()
		return nil, nil
	}
	return p, func() { p.Close(); removeDir() }
}

// Load the built-in tiny model (random weights in the real architecture)
// on the CPU. With real weights, pass the folder FramePack downloads.
func ExampleLoad() {
	dir, temporary, err := tinymodel.Dir()
	if err != nil {
		fmt.Println(err)
		return
	}
	if temporary {
		defer os.RemoveAll(dir)
	}
	p, err := framepack.Load(dir, framepack.Options{Device: framepack.DeviceCPU, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	fmt.Println("prompt template tokens:", p.CropStart())
	// Output: prompt template tokens: 150
}

// Generate a video, following its stages through Progress.
func ExamplePipeline_Generate() {
	p, done := loadTiny()
	if p == nil {
		return
	}
	defer done()

	req := tinyRequest(p)
	req.Progress = func(pr framepack.Progress) {
		switch pr.Stage {
		case framepack.StageSample:
			fmt.Printf("section %d/%d step %d/%d\n", pr.Section, pr.Sections, pr.Step, pr.Steps)
		case framepack.StageSectionDone:
			fmt.Printf("section %d/%d done: %d frames so far\n", pr.Section, pr.Sections, pr.Frames)
		case framepack.StageDecode:
			if pr.Tile == 0 { // later reports count the decode's tiles
				fmt.Println(pr.Stage)
			}
		default:
			fmt.Println(pr.Stage)
		}
	}
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d frames of %d×%d at %d fps\n", res.T, res.W, res.H, res.FPS)
	// Output:
	// text encode
	// vae encode
	// image encode
	// section 1/1 step 1/2
	// section 1/1 step 2/2
	// decode
	// section 1/1 done: 13 frames so far
	// 13 frames of 128×96 at 30 fps
}

// Cancel a generation through its context: Generate stops before the next
// sampler step or stage and returns an error wrapping ctx.Err().
func ExamplePipeline_Generate_cancel() {
	p, done := loadTiny()
	if p == nil {
		return
	}
	defer done()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := tinyRequest(p)
	req.Progress = func(pr framepack.Progress) {
		if pr.Stage == framepack.StageSample && pr.Step == 1 {
			cancel() // a user pressing stop after the first step
		}
	}
	_, err := p.Generate(ctx, req)
	fmt.Println(errors.Is(err, context.Canceled))
	// Output: true
}

// Write a generated video as the command line does: the MP4 through
// ffmpeg (PNG frames in a folder when ffmpeg is missing) with the settings
// in its comment tag, and the settings file beside it.
func ExamplePipeline_Generate_write() {
	p, done := loadTiny()
	if p == nil {
		return
	}
	defer done()

	req := tinyRequest(p)
	res, err := p.Generate(context.Background(), req)
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := os.MkdirTemp("", "framepack-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(out)
	path := filepath.Join(out, "kite.mp4")

	set := framepack.RequestSettings(req)
	set.Output = path
	set.SetResult(res, 0, 0)
	tag, err := set.CommentTag()
	if err != nil {
		fmt.Println(err)
		return
	}
	wrote, err := video.Write(context.Background(), path, res.Frames, video.Options{FPS: res.FPS, Comment: tag})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := framepack.WriteSettings(framepack.SettingsPath(wrote), &set); err != nil {
		fmt.Println(err)
		return
	}
	_, err = os.Stat(framepack.SettingsPath(wrote))
	fmt.Printf("%d frames at %d fps written; settings beside them: %v\n", res.T, res.FPS, err == nil)
	// Output: 13 frames at 30 fps written; settings beside them: true
}
