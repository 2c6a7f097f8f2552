package convchain

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/framepack-go/framepack/tensor"
)

// childEnv carries a SearchRequest to the child process; its presence makes
// MaybeRunChild run only the search.
const childEnv = "FRAMEPACK_CONVCHAIN_SEARCH"

// resultPrefix marks the child's answer on its stdout, so that stray
// output of a vendor library cannot be mistaken for it.
const resultPrefix = "framepack-convchain-result: "

type childResult struct {
	Plan  *Plan  `json:"plan,omitempty"`
	Error string `json:"error,omitempty"`
	OOM   bool   `json:"oom,omitempty"`
}

// MaybeRunChild makes this process an algorithm-search child when it was
// started as one: it runs the one search asked for, prints the result and
// exits. Otherwise it returns at once. main() and TestMain call it first,
// before flags are parsed or devices opened.
func MaybeRunChild() {
	req, ok := os.LookupEnv(childEnv)
	if !ok {
		hooked.Store(true)
		return
	}
	os.Exit(runChild(req, os.Stdout))
}

// hooked is set once MaybeRunChild has run in this process: only then is a
// fresh start of this binary known to run a search rather than the whole
// program.
var hooked atomic.Bool

func runChild(reqJSON string, out io.Writer) int {
	write := func(r childResult) int {
		b, _ := json.Marshal(r)
		fmt.Fprintf(out, "\n%s%s\n", resultPrefix, b)
		return 0
	}
	var req SearchRequest
	if err := json.Unmarshal([]byte(reqJSON), &req); err != nil {
		write(childResult{Error: fmt.Sprintf("bad search request: %v", err)})
		return 2
	}
	if req.Fault == FaultHang {
		for { // the injected hang: only the parent's kill ends it
			time.Sleep(time.Hour)
		}
	}
	fn := searchFor(req.Tier)
	if fn == nil {
		return write(childResult{Error: fmt.Sprintf("this binary registers no search for tier %s", req.Tier)})
	}
	var plan *Plan
	var err error
	if cerr := tensor.Catch(func() { plan, err = fn(context.Background(), req) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		return write(childResult{Error: err.Error(), OOM: errors.Is(err, tensor.ErrOutOfMemory)})
	}
	if plan == nil {
		return write(childResult{Error: "search returned no plan"})
	}
	return write(childResult{Plan: plan})
}

// ErrDeadline is wrapped by a search that did not finish in time.
var ErrDeadline = errors.New("search deadline exceeded")

// errChild is wrapped when a search child dies without an answer.
var errChild = errors.New("search child failed")

// errNoChild is wrapped when no search child can be started.
var errNoChild = errors.New("no search child")

// searchInChild runs req in a fresh start of this binary and kills it (and
// anything it started) at the deadline, or at once when parent is done.
func searchInChild(parent context.Context, req SearchRequest, deadline time.Duration) (*Plan, error) {
	if !hooked.Load() {
		return nil, fmt.Errorf("%w: this binary does not call convchain.MaybeRunChild first in main (or TestMain), so a search cannot run in a child process", errNoChild)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot start a search child: %w", err)
	}
	reqJSON, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(parent, deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(childEnviron(), childEnv+"="+string(reqJSON))
	var stdout bytes.Buffer
	stderr := &tailWriter{max: 4096}
	cmd.Stdout = &limitWriter{w: &stdout, n: 16 << 20}
	cmd.Stderr = stderr
	cmd.WaitDelay = time.Second // never wait on pipes held open by a stray grandchild
	prepareChild(cmd)
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start)

	res, found := parseResult(stdout.Bytes())
	if !found {
		pid := 0
		if cmd.Process != nil {
			pid = cmd.Process.Pid
		}
		if parent.Err() != nil {
			return nil, fmt.Errorf("%w: search of tier %s killed after %v (pid %d): %w", errCancelled, req.Tier, elapsed.Round(time.Millisecond), pid, context.Cause(parent))
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%w: search of tier %s killed after %v (pid %d)", ErrDeadline, req.Tier, deadline, pid)
		}
		return nil, fmt.Errorf("%w: pid %d ended after %v without a result: %v%s", errChild, pid, elapsed.Round(time.Millisecond), runErr, stderr.describe())
	}
	if res.Error != "" {
		err := errors.New(res.Error)
		if res.OOM {
			err = fmt.Errorf("%s: %w", res.Error, tensor.ErrOutOfMemory)
		}
		return nil, err
	}
	return res.Plan, nil
}

// childEnviron is this process's environment without the fault setting:
// the child gets its fault, if any, in the request.
func childEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, FaultsEnv+"=") || strings.HasPrefix(kv, childEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func parseResult(out []byte) (childResult, bool) {
	var res childResult
	found := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), resultPrefix); ok {
			var r childResult
			if json.Unmarshal([]byte(rest), &r) == nil {
				res, found = r, true
			}
		}
	}
	return res, found
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) describe() string {
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "; its stderr ends: " + s
}

// limitWriter drops what comes after n bytes.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	q := p
	if len(q) > l.n {
		q = q[:l.n]
	}
	l.n -= len(q)
	if _, err := l.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}
