package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test binary is its own rank: TestMain runs the rank's part when the
// supervisor started it, as the mode in launchTestMode says.
const launchTestMode = "FRAMEPACK_LAUNCH_TEST_MODE"

func TestMain(m *testing.M) {
	mode, ok := os.LookupEnv(launchTestMode)
	if !ok {
		os.Exit(m.Run())
	}
	r, err := FromEnv()
	if err != nil || r == nil {
		fmt.Fprintln(os.Stderr, "rank without its environment:", err)
		os.Exit(9)
	}
	out := os.Getenv("FRAMEPACK_LAUNCH_TEST_OUT")
	if r.Rank == 0 && mode != "noid" && mode != "hang" {
		if err := r.Publish("id-1234"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(8)
		}
	}
	switch {
	case mode == "noid" && r.Rank == 0:
		fmt.Fprintln(os.Stderr, "rank 0: no GPU")
		os.Exit(1)
	case mode == "hang" && r.Rank == 0:
		time.Sleep(time.Hour)
	case mode == "fail1" && r.Rank == 1:
		fmt.Fprintln(os.Stderr, "some log line\nrank 1: out of device memory")
		os.Exit(3)
	case mode == "fail1":
		time.Sleep(time.Hour) // waits in a collective its peer never joins
	}
	os.WriteFile(filepath.Join(out, fmt.Sprint(r.Rank)), []byte(fmt.Sprintf("%d %d %d %s", r.Rank, r.Size, r.GPU, r.ID)), 0o644)
	if r.Rank == 0 {
		fmt.Println("rank 0 output")
	}
	os.Exit(0)
}

func run(t *testing.T, mode string, gpus []int) (error, string, string, time.Duration) {
	t.Helper()
	out := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	idTimeout := 3 * time.Second
	if mode == "hang" { // rank 0 never publishes: the test waits the timeout out
		idTimeout = 500 * time.Millisecond
	}
	began := time.Now()
	err = Run(context.Background(), Spec{
		Path: exe, Args: []string{"-test.run=^$"}, GPUs: gpus,
		Env:    []string{launchTestMode + "=" + mode, "FRAMEPACK_LAUNCH_TEST_OUT=" + out},
		Stdout: &stdout, Stderr: &stderr, IDTimeout: idTimeout, Grace: time.Second,
	})
	return err, out, stdout.String(), time.Since(began)
}

func TestRunRanks(t *testing.T) {
	err, out, stdout, _ := run(t, "ok", []int{3, 5, 7})
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range []string{"0 3 3 ", "1 3 5 id-1234", "2 3 7 id-1234"} {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprint(r)))
		if err != nil || string(b) != want {
			t.Errorf("rank %d saw %q (%v), want %q", r, b, err, want)
		}
	}
	if stdout != "rank 0 output\n" {
		t.Errorf("stdout %q: want rank 0's output only", stdout)
	}
}

// A rank that fails stops the rest at once, however long they would wait,
// and the error names it with its last line of stderr.
func TestRunRankFails(t *testing.T) {
	err, _, _, took := run(t, "fail1", []int{0, 1})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 || ee.Code != 3 || ee.GPU != 1 {
		t.Fatalf("err %v: want rank 1's exit status 3", err)
	}
	if !strings.Contains(err.Error(), "rank 1: out of device memory") {
		t.Errorf("error %q lacks the rank's last line", err)
	}
	if took > 20*time.Second {
		t.Errorf("took %v: the waiting rank was not stopped", took)
	}
}

func TestRunRankZeroFailsBeforeID(t *testing.T) {
	err, _, _, _ := run(t, "noid", []int{0, 1})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 0 || ee.Code != 1 {
		t.Fatalf("err %v: want rank 0's exit status 1", err)
	}
}

func TestRunIDTimeout(t *testing.T) {
	err, _, _, took := run(t, "hang", []int{0, 1})
	if err == nil || !strings.Contains(err.Error(), "did not publish") {
		t.Fatalf("err %v: want the id timeout", err)
	}
	if took > 20*time.Second {
		t.Errorf("took %v", took)
	}
}

func TestParseGPUs(t *testing.T) {
	for in, want := range map[string]string{"2": "[0 1]", "0,2": "[0 2]", " 3 ": "[0 1 2]", "1, 0": "[1 0]"} {
		g, err := ParseGPUs(in)
		if err != nil || fmt.Sprint(g) != want {
			t.Errorf("ParseGPUs(%q) = %v, %v; want %s", in, g, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "0,0", "0,-2", "1,a", "65"} {
		if g, err := ParseGPUs(in); err == nil {
			t.Errorf("ParseGPUs(%q) = %v: want an error", in, g)
		}
	}
}

// The rank's variables are its own: none is one the engine reads already.
func TestEnvNamesAreOwn(t *testing.T) {
	for _, n := range []string{EnvRank, EnvSize, EnvGPU, EnvID, EnvIDFD} {
		if n == "FRAMEPACK_GPU" || n == "FRAMEPACK_DEVICE" {
			t.Errorf("%s is an engine setting", n)
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvRank, "1")
	t.Setenv(EnvSize, "2")
	t.Setenv(EnvGPU, "4")
	t.Setenv(EnvID, "abc")
	r, err := FromEnv()
	if err != nil || *r != (Rank{1, 2, 4, "abc"}) {
		t.Fatalf("%+v %v", r, err)
	}
	for k, v := range map[string]string{EnvRank: "2", EnvSize: "x", EnvGPU: "-1", EnvID: ""} {
		old := os.Getenv(k)
		t.Setenv(k, v)
		if _, err := FromEnv(); err == nil {
			t.Errorf("%s=%q: want an error", k, v)
		}
		t.Setenv(k, old)
	}
}
