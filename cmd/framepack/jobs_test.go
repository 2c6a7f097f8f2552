package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/framepack-go/framepack/video"
)

// probeFrames is ffprobe's frame count of a video; -1 without ffprobe.
func probeFrames(t *testing.T, path string) int {
	t.Helper()
	if _, err := exec.LookPath("ffprobe"); err != nil {
		return -1
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "default=nw=1:nk=1", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("ffprobe %s: %q", path, out)
	}
	return n
}

func verifyMP4(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	st, _ := fh.Stat()
	if err := video.VerifyMP4(fh, st.Size()); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

// TestCLIJobs: three jobs, the second bad (an unknown key), run with the
// models loaded once: two videos, one error naming line 2, exit status 1,
// and the third job loads no model.
func TestCLIJobs(t *testing.T) {
	if !video.HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	dir := t.TempDir()
	img := stripImage(t)
	jobs := strings.Join([]string{
		`{"image":` + strconv.Quote(img) + `,"prompt":"a kite","seconds":0.2,"seed":1,"o":"a.mp4","steps":3}`,
		`{"image":` + strconv.Quote(img) + `,"prompt":"a boat","colour":"red","o":"b.mp4"}`,
		`# a comment`,
		`{"image":` + strconv.Quote(img) + `,"prompt":"a boat","seconds":0.2,"seed":2,"output":"c.mp4","steps":2,"teacache":false}`,
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "jobs.jsonl"), []byte(jobs), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, dir, "generate", "--jobs", "jobs.jsonl", "--json", "-v", "--resolution", "64", "--window", "3")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stderr, "model: transformer"); n != 1 {
		t.Errorf("the models were loaded %d times, want once:\n%s", n, r.stderr)
	}
	var results, errs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		switch ev["event"] {
		case "result":
			results = append(results, ev)
		case "error":
			if ev["line"] != nil {
				errs = append(errs, ev)
			}
		}
	}
	if len(results) != 2 || len(errs) != 1 {
		t.Fatalf("%d results and %d job errors, want 2 and 1:\n%s", len(results), len(errs), r.stdout)
	}
	if msg, _ := errs[0]["error"].(string); errs[0]["line"] != 2.0 || !strings.Contains(msg, "jobs.jsonl line 2") || !strings.Contains(msg, `"colour"`) {
		t.Errorf("error record %v", errs[0])
	}
	if results[0]["line"] != 1.0 || results[1]["line"] != 4.0 {
		t.Errorf("results for lines %v and %v, want 1 and 4", results[0]["line"], results[1]["line"])
	}
	if l, _ := results[0]["loads"].(float64); l == 0 {
		t.Errorf("the first job reports no model loads")
	}
	if l, _ := results[1]["loads"].(float64); l != 0 {
		t.Errorf("the second job loaded %v models; they stay loaded", l)
	}
	for _, name := range []string{"a.mp4", "c.mp4"} {
		verifyMP4(t, filepath.Join(dir, name))
		if _, err := os.Stat(filepath.Join(dir, name+".json")); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "b.mp4")); !os.IsNotExist(err) {
		t.Errorf("the bad job left b.mp4: %v", err)
	}

	// Without --json: one line a job.
	r = runBinary(t, dir, "generate", "--jobs", "jobs.jsonl", "--resolution", "64", "--window", "3")
	if r.code != 1 || strings.Count(r.stdout, "wrote ") != 2 || !strings.Contains(r.stdout, `jobs.jsonl line 2: failed: unknown key "colour"`) {
		t.Errorf("exit %d:\n%s", r.code, r.stdout)
	}
}

// TestCLIWriteSections: --write-sections leaves a valid video after every
// section, and the last write holds every frame.
func TestCLIWriteSections(t *testing.T) {
	if !video.HaveFFmpeg() {
		t.Skip("ffmpeg is not installed")
	}
	dir := t.TempDir()
	r := runBinary(t, dir, "generate", "--image", stripImage(t), "--write-sections", "--resolution", "64", "--seconds", "0.8",
		"--window", "3", "--steps", "2", "--json", "-o", "out.mp4")
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	// Section 1 of 2 is written by the section writer; its log line says
	// how many frames it held.
	if !strings.Contains(r.stderr, "frames after section 1 of 2") {
		t.Errorf("no write after section 1:\n%s", r.stderr)
	}
	var frames float64
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["event"] == "result" {
			frames, _ = ev["frames"].(float64)
		}
	}
	out := filepath.Join(dir, "out.mp4")
	verifyMP4(t, out)
	if n := probeFrames(t, out); n >= 0 && n != int(frames) {
		t.Errorf("the final video has %d frames, the result %v", n, frames)
	}
}

// TestJobsChecks: the checks before the first job. Two lines with one
// output (however spelt) are refused, the later one; the images are only
// looked at, not decoded, until their job runs; the flags for every job
// are checked as a single job's are.
func TestJobsChecks(t *testing.T) {
	tinyEnv(t)
	dir := t.TempDir()
	img := abs(t, sceneImage)
	// A PNG whose header is whole and whose pixels are cut off: its size
	// can be read, it cannot be decoded.
	var full bytes.Buffer
	if err := png.Encode(&full, image.NewGray(image.Rect(0, 0, 96, 64))); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.png")
	if err := os.WriteFile(cut, full.Bytes()[:33], 0o644); err != nil { // signature and IHDR
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := func(image, out string) string {
		return `{"image":` + strconv.Quote(image) + `,"seconds":0.2,"steps":2,"o":` + strconv.Quote(out) + `}`
	}
	jobs := filepath.Join(dir, "jobs.jsonl")
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(jobs, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	same := filepath.Join(dir, "same.mp4")
	write(line(img, same), line(img, filepath.Join(dir, "sub", "..", "same.mp4")), line(cut, filepath.Join(dir, "cut.mp4")))
	check := func(args ...string) ([]*jobSpec, error) {
		t.Helper()
		cmd, f := newGenerateCmd()
		if err := cmd.ParseFlags(append([]string{"--jobs", jobs, "--resolution", "64", "--window", "3"}, args...)); err != nil {
			t.Fatal(err)
		}
		return checkJobs(cmd, f)
	}
	specs, err := check()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 3 || specs[0].err != nil || specs[1].err == nil || !strings.Contains(specs[1].err.Error(), "is line 1's output too") {
		t.Fatalf("specs %+v, want line 2 refused for line 1's output", specs)
	}
	if specs[2].err != nil {
		t.Errorf("line 3 was decoded before its job ran: %v", specs[2].err)
	}
	// Two names of one existing file.
	old := filepath.Join(dir, "old.mp4")
	if err := os.WriteFile(old, []byte("an old video"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(old, filepath.Join(dir, "link.mp4")); err != nil {
		t.Fatal(err)
	}
	// A line whose output is its image (a PNG named in.mp4).
	inMP4 := filepath.Join(dir, "in.mp4")
	copyFile(t, img, inMP4)
	write(line(img, old), line(img, filepath.Join(dir, "link.mp4")), line(inMP4, inMP4))
	if specs, err = check(); err != nil || len(specs) != 3 || specs[0].err != nil || specs[1].err == nil ||
		!strings.Contains(specs[1].err.Error(), "is line 1's output ("+old+") too") {
		t.Errorf("hard links: %v, %+v", err, specs)
	}
	if specs[2].err == nil || !strings.Contains(specs[2].err.Error(), "is the --image input") {
		t.Errorf("line 3, its output its image: %v", specs[2].err)
	}
	write(line(img, same), line(img, filepath.Join(dir, "sub", "..", "same.mp4")), line(cut, filepath.Join(dir, "cut.mp4")))

	// The flags for every job: bad ones stop the command before any job,
	// the sizes as their flags are read.
	var ue *usageError
	if _, err := check("--lora", cut+":NaN"); err == nil || !errors.As(err, &ue) {
		t.Errorf("--lora %s:NaN: %v, want a usage error", cut, err)
	}
	for _, args := range [][]string{{"--ram-limit", "garbage"}, {"--vram-limit", "1M"}} {
		cmd, _ := newGenerateCmd()
		if err := cmd.ParseFlags(append([]string{"--jobs", jobs}, args...)); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: %v, want the flag refused", args, err)
		}
	}

	// Run: line 1 writes same.mp4; line 2 is refused; line 3 fails when its
	// image is decoded.
	_, err = runCLI(t, context.Background(), "generate", "--jobs", jobs, "--resolution", "64", "--window", "3", "-q")
	if err == nil || !strings.Contains(err.Error(), "2 of 3 jobs") {
		t.Errorf("error %v, want 2 of 3 jobs failed", err)
	}
	if _, err := os.Stat(same); err != nil {
		t.Errorf("line 1's video: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cut.mp4")); !os.IsNotExist(err) {
		t.Errorf("line 3 wrote a video: %v", err)
	}
}
