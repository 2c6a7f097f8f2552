package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/framepack-go/framepack/internal/atomicfile"
)

// stallEnv makes this test binary a process whose work ignores its
// cancellation (as a model load or a long op does) after writing a tracked
// temporary into the folder it names: only the signal's deadline ends it.
const stallEnv = "FRAMEPACK_TEST_STALL"

func init() {
	dir := os.Getenv(stallEnv)
	if dir == "" {
		return
	}
	signalContext()
	tmp := filepath.Join(dir, ".out.mp4.tmp-stall")
	if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
		panic(err)
	}
	atomicfile.Track(tmp)
	fmt.Fprintln(os.Stderr, "stalling")
	select {}
}

// signalExit is the maximum time from a signal to the process's exit.
const signalExit = 2 * time.Second

// stopAt starts cmd, sends sig once a stderr line matches at (after delay),
// and returns the log, the time from the signal to the exit, and whether
// it was sent.
func stopAt(t *testing.T, cmd *exec.Cmd, sig syscall.Signal, at *regexp.Regexp, delay time.Duration) (log string, took time.Duration, sent bool) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var at0 time.Time
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		buf.WriteString(sc.Text() + "\n")
		if !sent && at.MatchString(sc.Text()) {
			time.Sleep(delay)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			at0, sent = time.Now(), true
		}
	}
	cmd.Wait()
	if sent {
		took = time.Since(at0)
	}
	return buf.String(), took, sent
}

// TestSignalDeadline: work that ignores its cancellation (a load, a long
// op) still ends within 2 s of a signal: the process removes the
// temporaries being written and exits 128+N.
func TestSignalDeadline(t *testing.T) {
	t.Parallel() // it waits the deadline out: beside the other tests
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			t.Parallel()
			signalDeadline(t, exe, sig)
		})
	}
}

// signalDeadline stops a stalled copy of this binary with sig.
func signalDeadline(t *testing.T, exe string, sig syscall.Signal) {
	dir := t.TempDir()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), stallEnv+"="+dir)
	log, took, sent := stopAt(t, cmd, sig, regexp.MustCompile("^stalling$"), 0)
	if !sent {
		t.Fatalf("the process never stalled:\n%s", log)
	}
	if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
		t.Errorf("%v: exit %d, want %d:\n%s", sig, code, 128+int(sig), log)
	}
	if took > signalExit {
		t.Errorf("%v: exited %v after the signal, want at most %v", sig, took, signalExit)
	}
	if last := lastLine(log); !strings.Contains(last, "stopped by "+signalName(sig)) || !strings.Contains(last, "did not stop within 1.5s") {
		t.Errorf("%v: last line %q", sig, last)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%v: the temporary %s was left", sig, ents[0].Name())
	}
	t.Logf("%v: exited %v after the signal: %s", sig, took.Round(time.Millisecond), lastLine(log))
}

// TestSignalAtEveryStage stops `generate` on the tiny model at each stage
// (load, text, VAE encode, image encode, sampling, decode) and during a
// conv3d search that hangs: each exits 143 within 2 s of SIGTERM, with
// nothing left in the output folder, and the search child dies at once.
func TestSignalAtEveryStage(t *testing.T) {
	img := stripImage(t)
	for _, st := range []struct {
		stage, at string
		faults    string
	}{
		{"load", `msg="device: `, ""},
		{"text", `weights: text_encoder: `, ""},
		{"vae encode", `weights: vae: `, ""},
		{"image encode", `weights: image_encoder: `, ""},
		{"sampling", `sampling section 1/2, step 2/`, ""},
		{"decode", `msg="decoding section 1/2`, ""},
		{"search", `conv3d: searching tier cpu`, "conv3d.cpu=hang"},
	} {
		t.Run(st.stage, func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(cliBinary(t), "generate", "-v", "--image", img, "--resolution", "64", "--seconds", "0.8", "--window", "3", "--steps", "4", "-o", "out.mp4")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "FRAMEPACK_MODELS=", "XDG_CACHE_HOME="+cacheDir(t), "FRAMEPACK_FAULTS="+st.faults)
			// In a search: well inside its 30 s deadline.
			delay := time.Duration(0)
			if st.faults != "" {
				delay = 500 * time.Millisecond
			}
			log, took, sent := stopAt(t, cmd, syscall.SIGTERM, regexp.MustCompile(regexp.QuoteMeta(st.at)), delay)
			if !sent {
				t.Fatalf("the run never reached %q:\n%s", st.at, log)
			}
			if code := cmd.ProcessState.ExitCode(); code != 143 {
				t.Errorf("exit %d, want 143:\n%s", code, log)
			}
			if took > signalExit {
				t.Errorf("exited %v after SIGTERM, want at most %v:\n%s", took, signalExit, log)
			}
			if last := lastLine(log); !strings.HasPrefix(last, "framepack: stopped by SIGTERM") {
				t.Errorf("last line %q", last)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left %d entries, first %s", len(ents), ents[0].Name())
			}
			if st.faults != "" {
				m := regexp.MustCompile(`search of tier cpu killed after (\S+) \(pid (\d+)\)`).FindStringSubmatch(log)
				if m == nil {
					t.Fatalf("the search was not killed by the signal:\n%s", log)
				}
				pid, _ := strconv.Atoi(m[2])
				if syscall.Kill(pid, 0) == nil {
					t.Errorf("search child %d still runs", pid)
				}
			}
			t.Logf("%s: exited %v after SIGTERM: %s", st.stage, took.Round(time.Millisecond), lastLine(log))
		})
	}
}
