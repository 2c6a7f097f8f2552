package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/framepack-go/framepack/convchain"
)

// The tests in this file run the command as a user does, for what only a
// process shows: exit statuses, signals, stdout and stderr.

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	// A copy of this binary is the command (main, the code a build of it
	// runs) when started under its name, through cliBinary's link, or when
	// asked (bench generate runs each job in a fresh copy of its own
	// executable); a conv3d search runs in a child copy as the command's
	// do.
	if filepath.Base(os.Args[0]) == "framepack" || os.Getenv(benchChildEnv) == "1" {
		main()
	}
	convchain.MaybeRunChild()
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	if cachePath != "" {
		os.RemoveAll(cachePath)
	}
	if strip.dir != "" {
		os.RemoveAll(strip.dir)
	}
	if testVideo40.dir != "" {
		os.RemoveAll(testVideo40.dir)
	}
	os.Exit(code)
}

// cliBinary is the command for the tests that start it: a link named
// framepack to this test binary, made once per test run (linking the
// command itself would cost seconds of CPU for the same code).
func cliBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "framepack-cli-test-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "framepack")
		buildErr = os.Symlink(exe, buildBin)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

type cliRun struct {
	stdout, stderr string
	code           int
}

// run runs the built command with args in dir and the tiny-model
// environment.
func runBinary(t *testing.T, dir string, args ...string) cliRun {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FRAMEPACK_MODELS=", "XDG_CACHE_HOME="+cacheDir(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliRun{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

var (
	cacheOnce sync.Once
	cachePath string
)

// cacheDir is one user cache for the run's processes, so the tiny model is
// extracted once.
func cacheDir(t *testing.T) string {
	cacheOnce.Do(func() {
		cachePath = filepath.Join(os.TempDir(), fmt.Sprintf("framepack-cli-test-cache-%d", os.Getpid()))
	})
	return cachePath
}

// abs is path made absolute.
func abs(t *testing.T, path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCLIUsageErrors: a command line that cannot run exits 2 at once with
// one line naming the problem, prefixed once.
func TestCLIUsageErrors(t *testing.T) {
	dir := t.TempDir()
	img := abs(t, sceneImage)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--nosuch"}, "unknown flag: --nosuch"},
		{[]string{"generate", "--steps", "many"}, `invalid argument "many" for "--steps"`},
		{[]string{"generate"}, "--image is required"},
		{[]string{"generate", "--image", img, "--seed", "junk"}, `--seed "junk"`},
		{[]string{"generate", "--image", img, "--seed", "-2"}, `--seed "-2"`},
		{[]string{"generate", "--image", img, "--seed", "18446744073709551616"}, "--seed"},
		{[]string{"generate", "--image", img, "--crf", "99"}, "--crf 99"},
		{[]string{"generate", "--image", img, "extra"}, "unknown command"},
		{[]string{"generate", "--image", img, "-o", "out.png"}, `".png" is not a video extension; want .mp4, .mov, .mkv`},
		{[]string{"generate", "--image", img, "-o", "/proc/x.mp4"}, "cannot create files in /proc"},
		{[]string{"nosuch"}, `unknown command "nosuch"`},
		{[]string{"vae", "nosuch"}, `unknown command "nosuch"`},
		{[]string{"vae", "decode", "--vae", abs(t, goldenVAE), "--latents", "x.safetensors", "-o", "o.mp4", "--crf", "99"}, "--crf 99"},
		{[]string{"vae", "decode", "--vae", abs(t, goldenVAE), "--latents", "x.safetensors", "-o", "o.mp4", "--fps", "-5"}, "--fps -5"},
		{[]string{"vae", "decode", "--vae", abs(t, goldenVAE), "--latents", "x.safetensors", "-o", "o.mp4", "--tiling", "spatial:0:0"}, `--tiling "spatial:0:0"`},
	} {
		r := runBinary(t, dir, c.args...)
		if r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", c.args, r.code, exitUsage, r.stderr)
		}
		last := strings.TrimSpace(r.stderr)
		if i := strings.LastIndex(last, "\n"); i >= 0 {
			last = last[i+1:]
		}
		if !strings.HasPrefix(last, "framepack: ") || strings.Count(last, "framepack:") != 1 || !strings.Contains(last, c.want) {
			t.Errorf("%v: last line %q, want one framepack: prefix and %q", c.args, last, c.want)
		}
		if strings.Contains(r.stderr, "device:") {
			t.Errorf("%v: a device was opened before the command line was refused:\n%s", c.args, r.stderr)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("refused commands left %d entries, first %s", len(ents), ents[0].Name())
	}
}

func TestErrorText(t *testing.T) {
	for in, want := range map[string]string{
		"framepack: section 1 of 2: framepack: loading the VAE decoder: framepack: x": "section 1 of 2: loading the VAE decoder: x",
		"framepack: framepack: x": "x",
		"video: writing a.mp4: y": "video: writing a.mp4: y",
	} {
		if got := errorText(errors.New(in)); got != want {
			t.Errorf("errorText(%q) = %q, want %q", in, got, want)
		}
	}
	var buf bytes.Buffer
	if code := exitCode(&buf, fmt.Errorf("framepack: stage: %w", context.Canceled), syscall.SIGTERM); code != 143 {
		t.Errorf("cancelled by SIGTERM: exit %d, want 143", code)
	}
	if code := exitCode(&buf, fmt.Errorf("x: %w", context.Canceled), os.Interrupt); code != 130 {
		t.Errorf("cancelled by SIGINT: exit %d, want 130", code)
	}
	if code := exitCode(&buf, usagef("bad"), nil); code != 2 {
		t.Errorf("usage error: exit %d, want 2", code)
	}
	if code := exitCode(&buf, errors.New("boom"), nil); code != 1 {
		t.Errorf("failure: exit %d, want 1", code)
	}
	if got := buf.String(); strings.Count(got, "framepack: ") != 4 || strings.Contains(got, "framepack: framepack") {
		t.Errorf("printed:\n%s", got)
	}
}

func TestCLIVersion(t *testing.T) {
	dir := t.TempDir()
	a, b := runBinary(t, dir, "--version"), runBinary(t, dir, "version")
	if a.code != 0 || b.code != 0 || a.stdout != b.stdout {
		t.Fatalf("--version (%d) %q and version (%d) %q differ", a.code, a.stdout, b.code, b.stdout)
	}
	line := strings.TrimSpace(a.stdout)
	if !strings.HasPrefix(line, "framepack ") || !strings.HasSuffix(line, runtime.Version()) || strings.Count(a.stdout, "\n") != 1 {
		t.Errorf("version %q: want one line, framepack … %s", line, runtime.Version())
	}
	t.Log(line)
	v := readBuildVersion()
	if v.Go != runtime.Version() || v.Module != "github.com/framepack-go/framepack" {
		t.Errorf("build version %+v", v)
	}
	withRev := buildVersion{Version: "v1.2.3", Revision: "0123456789abcdef", Modified: true, Time: "2026-01-02T03:04:05Z", Go: "go1.26"}
	if got, want := withRev.String(), "framepack v1.2.3 rev 0123456789ab (modified) 2026-01-02T03:04:05Z go1.26"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// TestCLISignals stops a generation with SIGTERM and SIGINT mid-run: exit
// 143 and 130, and nothing left in the output folder.
func TestCLISignals(t *testing.T) {
	img := stripImage(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		dir := t.TempDir()
		// Three sections of 20 steps: seconds on the CPU.
		cmd := exec.Command(cliBinary(t), "generate", "--image", img, "--resolution", "64", "--seconds", "1.2", "--window", "3", "--steps", "20", "-o", "out.mp4")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FRAMEPACK_MODELS=", "XDG_CACHE_HOME="+cacheDir(t))
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			// Mid-run: the second section's sampling, after a decode
			// wrote nothing yet.
			if !sent && strings.Contains(sc.Text(), "sampling section 2/") {
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				sent = true
			}
		}
		err = cmd.Wait()
		if !sent {
			t.Fatalf("%v: the run ended before its second section (%v):\n%s", sig, err, log.String())
		}
		code := cmd.ProcessState.ExitCode()
		if want := 128 + int(sig); code != want {
			t.Errorf("%v: exit %d, want %d:\n%s", sig, code, want, log.String())
		}
		if last := lastLine(log.String()); !strings.HasPrefix(last, "framepack: stopped by SIG") || !strings.Contains(last, "cancel") {
			t.Errorf("%v: no cancellation message:\n%s", sig, log.String())
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("%v left %d entries, first %s", sig, len(ents), ents[0].Name())
		}
	}
}

// TestCLIOutputRefused: an output path that a rename would wrongly replace
// is refused before any work, and left as it was.
func TestCLIOutputRefused(t *testing.T) {
	dir := t.TempDir()
	img := abs(t, sceneImage)
	target := filepath.Join(dir, "target.mp4")
	os.WriteFile(target, []byte("keep me"), 0o644)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(target, filepath.Join(dir, "link.mp4")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo.mp4"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "folder.mp4"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "stuff"), 0o755))
	must(os.Symlink("stuff", filepath.Join(dir, "linkdir")))
	os.WriteFile(filepath.Join(dir, "stuff", "notes.txt"), []byte("mine"), 0o644)
	// A settings file's place taken by a folder.
	os.WriteFile(filepath.Join(dir, "taken.mp4"), nil, 0o644)
	must(os.Mkdir(filepath.Join(dir, "taken.mp4.json"), 0o755))
	cases := []struct{ out, want string }{
		{"link.mp4", "is a symbolic link"},
		{"linkdir/", "is a symbolic link"},
		{"fifo.mp4", "not a regular file (a named pipe)"},
		{"folder.mp4", "is a folder"},
		{"stuff", "folder with other things in it"},
		{"target.mp4/x.mp4", "does not exist"},
		{"taken.mp4", "taken.mp4.json is a folder"},
	}
	// A device node of our own (as root): /dev/null itself must never be
	// at stake if the check broke.
	null := filepath.Join(dir, "null.mp4")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, int(unixMkdev(1, 3))); err == nil {
		cases = append(cases, struct{ out, want string }{"null.mp4", "not a regular file (a character device)"})
	} else {
		t.Logf("no device node test: mknod: %v", err)
	}
	for _, c := range cases {
		r := runBinary(t, dir, "generate", "--image", img, "-o", c.out)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("-o %s: exit %d, want %d and %q:\n%s", c.out, r.code, exitUsage, c.want, r.stderr)
		}
		if strings.Contains(r.stderr, "device:") {
			t.Errorf("-o %s: refused only after work started:\n%s", c.out, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"vae", "decode", "--vae", abs(t, goldenVAE), "--latents", "none.safetensors", "-o", "fifo.mp4"},
		{"vae", "decode", "--vae", abs(t, goldenVAE), "--latents", "none.safetensors", "-o", "stuff"},
		{"vae", "encode", "--vae", abs(t, goldenVAE), "--image", img, "-o", "link.mp4"},
		{"vae", "encode", "--vae", abs(t, goldenVAE), "--image", img, "-o", "folder.mp4"},
	} {
		if r := runBinary(t, dir, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	// Everything is as it was.
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Errorf("the link's target now holds %q", b)
	}
	for name, mode := range map[string]os.FileMode{"link.mp4": os.ModeSymlink, "fifo.mp4": os.ModeNamedPipe, "folder.mp4": os.ModeDir} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || st.Mode().Type() != mode {
			t.Errorf("%s: %v %v, want type %v", name, st, err, mode)
		}
	}
	if st, err := os.Lstat(null); err == nil && st.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("null.mp4 is no longer a device: %v", st.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "stuff", "notes.txt")); string(b) != "mine" {
		t.Error("stuff/notes.txt is gone")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 10 && len(ents) != 9 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("the folder now holds %v", names)
	}
}

func unixMkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor)
}

// TestCLIFullDisk: a video that does not fit the disk fails (exit 1) and
// leaves nothing, not a file without its index reported as written.
func TestCLIFullDisk(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is not installed")
	}
	dir := t.TempDir()
	// The quick job's video takes about 28 KiB, its settings file 2.5.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16k", "framepack-test", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { syscall.Unmount(dir, 0) })
	r := runBinary(t, dir, append([]string{"generate", "--image", abs(t, sceneImage), "-o", "out.mp4"}, quick...)...)
	if r.code != exitFailure || strings.Contains(r.stdout, "wrote") || !strings.Contains(r.stderr, "No space left on device") {
		t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", r.code, exitFailure, r.stdout, r.stderr)
	}
	t.Log(lastLine(r.stderr))
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %d entries, first %s", len(ents), ents[0].Name())
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestCLIJSON: --json prints one JSON object a line on stdout — progress,
// the result with its timings — and the settings file and comment tag
// record the run.
func TestCLIJSON(t *testing.T) {
	dir := t.TempDir()
	r := runBinary(t, dir, append([]string{"generate", "--image", stripImage(t), "--json", "--seed", "random", "-o", "clip.mkv"}, quick...)...)
	if r.code != 0 {
		t.Fatalf("exit %d:\n%s", r.code, r.stderr)
	}
	kinds := map[string]int{}
	var result map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		kind, _ := ev["event"].(string)
		kinds[kind]++
		if kind == "result" {
			result = ev
		}
	}
	if kinds["start"] != 1 || kinds["progress"] < 3 || kinds["result"] != 1 {
		t.Fatalf("events %v:\n%s", kinds, r.stdout)
	}
	if result["output"] != filepath.Join(dir, "clip.mkv") && result["output"] != "clip.mkv" {
		t.Errorf("result output %v", result["output"])
	}
	tm, _ := result["timings"].(map[string]any)
	if tm == nil || tm["sampling"] == nil || tm["decoding"] == nil || tm["load"] == nil {
		t.Errorf("result timings %v", result["timings"])
	}
	if !strings.Contains(r.stderr, "(random)") {
		t.Errorf("the random seed is not printed:\n%s", r.stderr)
	}

	b, err := os.ReadFile(filepath.Join(dir, "clip.mkv.json"))
	if err != nil {
		t.Fatal(err)
	}
	var set settings
	if err := json.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	if seed, _ := result["seed"].(float64); !set.SeedRandom || uint64(seed) != set.Seed || set.Steps != 3 || set.Resolution != 64 || !set.TinyModel {
		t.Errorf("settings %+v (result seed %v)", set, result["seed"])
	}
	if m := set.Models["transformer"]; len(m.ConfigSHA256) != 64 || !strings.HasSuffix(m.Folder, "transformer") {
		t.Errorf("transformer %+v", m)
	}
	if set.Timings == nil || len(set.Timings.Sections) != 1 || set.Framepack.Go != runtime.Version() {
		t.Errorf("timings %+v, version %+v", set.Timings, set.Framepack)
	}
	if _, err := exec.LookPath("ffprobe"); err == nil {
		tag, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "default=nw=1:nk=1",
			filepath.Join(dir, "clip.mkv")).Output()
		if err != nil {
			t.Fatal(err)
		}
		var inTag settings
		if err := json.Unmarshal(bytes.TrimSpace(tag), &inTag); err != nil || inTag.Seed != set.Seed || inTag.Prompt != set.Prompt {
			t.Errorf("comment tag %q: %v", tag, err)
		}
	}
}

// TestCLIQuiet: --quiet prints nothing on success; without it, a pipe gets
// plain lines: the finished stages, and the steps with their time; -v
// adds the structured log.
func TestCLIQuiet(t *testing.T) {
	dir := t.TempDir()
	r := runBinary(t, dir, append([]string{"generate", "--image", stripImage(t), "--quiet", "-o", "a.mp4"}, quick...)...)
	// Warnings may show (a machine without OpenBLAS); nothing else.
	if r.code != 0 || r.stdout != "" || strings.Contains(r.stderr, "level=INFO") || strings.Contains(r.stderr, "step") {
		t.Errorf("--quiet: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, dir, append([]string{"generate", "--image", stripImage(t), "-o", "b"}, quick...)...)
	for _, want := range []string{"s/step, video ", "decoding section 1/1", "text encode: ", "section 1/1: 13 frames, sampled in ",
		"video: 0.43 s (13 frames, 1 section); --seconds 0.2 rounds to whole sections"} {
		if r.code != 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("exit %d, no %q in stderr:\n%s", r.code, want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "level=") || strings.Contains(r.stderr, "resident →") {
		t.Errorf("the structured log at the default level:\n%s", r.stderr)
	}
	// "b" has no extension: PNG frames in the folder b, settings in b.json.
	if ents, err := os.ReadDir(filepath.Join(dir, "b")); err != nil || len(ents) != 13 {
		t.Errorf("PNG folder: %d entries, %v", len(ents), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.json")); err != nil {
		t.Error(err)
	}
	// Again over the same frames folder, with -v: replaced.
	if r := runBinary(t, dir, append([]string{"generate", "--image", stripImage(t), "-v", "-o", "b"}, quick...)...); r.code != 0 {
		t.Errorf("writing over a frames folder: exit %d:\n%s", r.code, r.stderr)
	} else if !strings.Contains(r.stderr, "level=INFO msg=\"model: transformer") || !strings.Contains(r.stderr, "level=NOTE msg=\"video: ") {
		t.Errorf("-v: no structured log:\n%s", r.stderr)
	}
}

func TestParseSeed(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "31337": 31337, " 7 ": 7, "18446744073709551615": 1<<64 - 1} {
		if got, random, err := parseSeed(in); err != nil || random || got != want {
			t.Errorf("parseSeed(%q) = %d, %v, %v; want %d", in, got, random, err, want)
		}
	}
	seen := map[uint64]bool{}
	for _, in := range []string{"random", "-1", "random", "-1"} {
		got, random, err := parseSeed(in)
		if err != nil || !random || got >= 1<<32 {
			t.Errorf("parseSeed(%q) = %d, %v, %v; want a random seed below 2³²", in, got, random, err)
		}
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Errorf("four random seeds, %d distinct", len(seen))
	}
	for _, in := range []string{"", "junk", "-2", "1.5", "0x10", "18446744073709551616", "1e3", "Random"} {
		if _, _, err := parseSeed(in); err == nil || !strings.Contains(err.Error(), "--seed") {
			t.Errorf("parseSeed(%q): %v, want an error naming --seed", in, err)
		}
	}
}

// TestOutputKind: the extension picks the output.
func TestOutputKind(t *testing.T) {
	for path, want := range map[string]videoKind{"a.mp4": kindContainer, "b.MOV": kindContainer, "dir/c.mkv": kindContainer, "frames": kindFrames, "dir/frames": kindFrames} {
		if got, err := outputKind(path); err != nil || got != want {
			t.Errorf("outputKind(%q) = %v, %v; want %v", path, got, err, want)
		}
	}
	for _, path := range []string{"out.png", "out.gif", "out.avi", "out.mp4.tmp"} {
		if _, err := outputKind(path); err == nil || !strings.Contains(err.Error(), ".mp4, .mov, .mkv") {
			t.Errorf("outputKind(%q): %v", path, err)
		}
	}
	if got := settingsPath("dir/out.mp4"); got != "dir/out.mp4.json" {
		t.Errorf("settingsPath: %q", got)
	}
	if got := settingsPath("frames/"); got != "frames.json" {
		t.Errorf("settingsPath: %q", got)
	}
}
