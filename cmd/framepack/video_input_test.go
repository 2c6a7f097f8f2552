package main

import (
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/framepack-go/framepack/section"
	"github.com/framepack-go/framepack/video"
)

// writeTestVideo writes n frames of 200×150 panning across the test image
// as an MP4 (when ffmpeg is installed) and as a folder of PNG frames.
func writeTestVideo(t *testing.T, dir string, n int) (mp4, frames string) {
	t.Helper()
	img, err := section.LoadImage(sceneImage)
	if err != nil {
		t.Fatal(err)
	}
	f := video.Frames{T: n, H: 150, W: 200}
	frames = filepath.Join(dir, "frames")
	os.Mkdir(frames, 0o755)
	for i := 0; i < n; i++ {
		c := img.Crop(i, i/2, i+200, i/2+150)
		f.Pix = append(f.Pix, c.Pix...)
		fh, err := os.Create(filepath.Join(frames, "f"+string(rune('a'+i/26))+string(rune('a'+i%26))+".png"))
		if err != nil {
			t.Fatal(err)
		}
		png.Encode(fh, (video.Frames{T: 1, H: 150, W: 200, Pix: c.Pix}).Frame(0))
		fh.Close()
	}
	mp4 = filepath.Join(dir, "in.mp4")
	if video.HaveFFmpeg() {
		if err := video.WriteMP4(context.Background(), mp4, f, video.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	return mp4, frames
}

var testVideo40 struct {
	once             sync.Once
	dir, mp4, frames string
	err              error
}

// sharedTestVideo is writeTestVideo's 40 frames, written once per test
// run for the tests that only read them.
func sharedTestVideo(t *testing.T) (mp4, frames string) {
	t.Helper()
	testVideo40.once.Do(func() {
		if testVideo40.dir, testVideo40.err = os.MkdirTemp("", "framepack-cli-test-video-"); testVideo40.err == nil {
			testVideo40.err = errors.New("writing the test video failed (see the first test that asked)")
			testVideo40.mp4, testVideo40.frames = writeTestVideo(t, testVideo40.dir, 40)
			testVideo40.err = nil
		}
	})
	if testVideo40.err != nil {
		t.Fatal(testVideo40.err)
	}
	return testVideo40.mp4, testVideo40.frames
}

// TestGenerateVideoBadInput: each bad --video fails before any model
// loads, with one line naming the problem.
func TestGenerateVideoBadInput(t *testing.T) {
	if !video.HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	tinyEnv(t)
	dir := t.TempDir()
	mp4, frames := sharedTestVideo(t)
	short, _ := writeTestVideo(t, t.TempDir(), 20)
	junk := filepath.Join(dir, "junk.mp4")
	os.WriteFile(junk, []byte("not a video"), 0o644)
	mixed := filepath.Join(dir, "mixed")
	os.Mkdir(mixed, 0o755)
	for i, w := range []int{64, 64, 80} {
		fh, _ := os.Create(filepath.Join(mixed, string(rune('a'+i))+".png"))
		png.Encode(fh, image.NewRGBA(image.Rect(0, 0, w, 48)))
		fh.Close()
	}
	empty := t.TempDir()
	out := filepath.Join(dir, "out.mp4")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--image", sceneImage, "--video", mp4}, "--image and --video: give one"},
		{[]string{"--video", filepath.Join(dir, "none.mp4")}, "--video: stat"},
		{[]string{"--video", junk}, "not a video ffmpeg can read"},
		{[]string{"--video", short}, "--video is too short: 20 frames; with --video-context-frames 5 and --window 3 it needs at least 28"},
		{[]string{"--video", mp4, "--model", "f1", "--video-context-frames", "10"}, "needs at least 52"},
		{[]string{"--video", mp4, "--video-context-frames", "11"}, "--video-context-frames must be in 2–10"},
		{[]string{"--video", mixed}, "c.png is 80×48, a.png 64×48"},
		{[]string{"--video", empty}, "holds no PNG, JPEG or WebP file"},
		{[]string{"--video", frames, "--end-image", sceneImage, "--model", "f1"}, "an end image needs"},
	} {
		args := append(append([]string{"generate", "-o", out}, c.args...), quick...)
		_, err := runCLI(t, context.Background(), args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %v, want one line containing %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a refused job left its output")
	}
}

// TestGenerateVideoTiny extends 40 frames on the tiny model, as a folder
// (F1) and as an MP4 (--new-only): the output is the input's 40 frames,
// cropped, then 9 new ones (a section of window 3), or the new ones
// alone.
func TestGenerateVideoTiny(t *testing.T) {
	tinyEnv(t)
	mp4, frames := sharedTestVideo(t)
	cases := []struct {
		name  string
		args  []string
		total int
	}{
		{"folder", []string{"--video", frames, "--model", "f1"}, 49},
	}
	if video.HaveFFmpeg() {
		cases = append(cases, struct {
			name  string
			args  []string
			total int
		}{"mp4, new only", []string{"--video", mp4, "--new-only"}, 9})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "frames")
			args := append([]string{"generate", "-o", out, "--seconds", "0.2", "--resolution", "64", "--window", "3", "--steps", "2"}, c.args...)
			stdout, err := runCLI(t, context.Background(), args...)
			if err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(out)
			if len(ents) != c.total {
				t.Errorf("%d frames, want %d", len(ents), c.total)
			}
			b, err := os.ReadFile(out + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var set map[string]any
			json.Unmarshal(b, &set)
			input := 0.0
			if c.total == 49 {
				input = 40
				if !strings.Contains(stdout, "the input video's 40 frames, then 9 new ones") {
					t.Errorf("summary:\n%s", stdout)
				}
			}
			if v, _ := set["video"].(map[string]any); v == nil || v["path"] == "" || set["video_context_frames"] != 5.0 {
				t.Errorf("settings: video %v, context frames %v", set["video"], set["video_context_frames"])
			}
			if got, _ := set["input_frames"].(float64); got != input {
				t.Errorf("settings: input_frames %v, want %v", set["input_frames"], input)
			}
		})
	}
}
