package main

import (
	"encoding/json"
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
	img := abs(t, sceneImage)
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
	r := runBinary(t, dir, "generate", "--image", abs(t, sceneImage), "--write-sections", "--resolution", "64", "--seconds", "0.8",
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
