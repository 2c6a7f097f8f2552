// Package launch runs one process per GPU: the command the user started
// becomes a supervisor that starts a rank on each GPU, hands them the
// communicator's id, relays rank 0's output, and stops every rank as soon
// as one fails, so a dead peer never leaves the others waiting in a
// collective.
package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The environment a rank is started with.
const (
	EnvRank  = "FRAMEPACK_RANK"       // this process's rank, 0 … size−1
	EnvSize  = "FRAMEPACK_WORLD_SIZE" // the number of ranks
	EnvGPU   = "FRAMEPACK_RANK_GPU"   // the device ordinal this rank opens
	EnvID    = "FRAMEPACK_COMM_ID"    // the communicator's id (ranks 1 …)
	EnvIDFD  = "FRAMEPACK_COMM_ID_FD" // rank 0 writes the id there
	idFD     = 3
	idMaxLen = 4096
)

// Rank is what a started rank reads from its environment.
type Rank struct {
	Rank, Size, GPU int
	// ID is the communicator's id in text; empty on rank 0, which makes
	// it and calls Publish.
	ID string
}

// FromEnv returns the rank this process was started as, or nil when it
// was not started by Run.
func FromEnv() (*Rank, error) {
	rs, ok := os.LookupEnv(EnvRank)
	if !ok {
		return nil, nil
	}
	var r Rank
	var err error
	num := func(name, v string) int {
		n, e := strconv.Atoi(v)
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q is not a number", name, v)
		}
		return n
	}
	r.Rank = num(EnvRank, rs)
	r.Size = num(EnvSize, os.Getenv(EnvSize))
	r.GPU = num(EnvGPU, os.Getenv(EnvGPU))
	r.ID = os.Getenv(EnvID)
	if err != nil {
		return nil, err
	}
	switch {
	case r.Size < 1 || r.Rank < 0 || r.Rank >= r.Size:
		return nil, fmt.Errorf("%s=%d with %s=%d: not a rank of the group", EnvRank, r.Rank, EnvSize, r.Size)
	case r.GPU < 0:
		return nil, fmt.Errorf("%s=%d: not a device ordinal", EnvGPU, r.GPU)
	case r.Rank > 0 && r.ID == "":
		return nil, fmt.Errorf("rank %d was started without %s", r.Rank, EnvID)
	}
	return &r, nil
}

// Publish hands the communicator's id from rank 0 to the supervisor,
// which starts the other ranks with it.
func (r *Rank) Publish(id string) error {
	if r.Rank != 0 {
		return fmt.Errorf("launch: only rank 0 publishes the communicator's id")
	}
	if strings.ContainsAny(id, "\n\x00") || id == "" || len(id) > idMaxLen {
		return fmt.Errorf("launch: communicator id %q is not one line of text", id)
	}
	if os.Getenv(EnvIDFD) != strconv.Itoa(idFD) {
		return fmt.Errorf("launch: rank 0 was started without the id pipe (%s)", EnvIDFD)
	}
	f := os.NewFile(idFD, "comm-id")
	defer f.Close()
	if _, err := io.WriteString(f, id+"\n"); err != nil {
		return fmt.Errorf("launch: publishing the communicator id: %w", err)
	}
	return nil
}

// ParseGPUs reads --gpus: a count N (GPUs 0 … N−1) or a list of ordinals
// "0,2,3".
func ParseGPUs(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("--gpus is empty: give a count (2) or ordinals (0,1)")
	}
	if !strings.Contains(s, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("--gpus %q: want a count from 1 to 64 or a list of ordinals such as 0,1", s)
		}
		gpus := make([]int, n)
		for i := range gpus {
			gpus[i] = i
		}
		return gpus, nil
	}
	seen := map[int]bool{}
	var gpus []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 1023 {
			return nil, fmt.Errorf("--gpus %q: %q is not a device ordinal", s, f)
		}
		if seen[n] {
			return nil, fmt.Errorf("--gpus %q: GPU %d is named twice", s, n)
		}
		seen[n] = true
		gpus = append(gpus, n)
	}
	return gpus, nil
}

// Spec is what Run starts.
type Spec struct {
	// Path and Args are the program and its arguments (without argv[0]);
	// every rank runs the same command line, told its rank by the
	// environment.
	Path string
	Args []string
	GPUs []int
	// Env is added to the supervisor's environment for every rank.
	Env []string
	// Stdout and Stderr get rank 0's output; a failing rank's last lines
	// of stderr go to Stderr with its rank in front.
	Stdout, Stderr io.Writer
	// IDTimeout bounds the wait for rank 0's communicator id (0: 10 min:
	// rank 0 may load models first).
	IDTimeout time.Duration
	// Grace is how long ranks get to stop after SIGTERM before SIGKILL
	// (0: 10 s).
	Grace time.Duration
}

// ExitError is a rank that failed; Run returns the first.
type ExitError struct {
	Rank, GPU int
	Code      int    // the exit status (128+N when killed by signal N)
	Tail      string // the rank's last lines of stderr (ranks 1 …)
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("rank %d (GPU %d) exited with status %d", e.Rank, e.GPU, e.Code)
	if e.Rank == 0 {
		msg += " (its error is above)"
	}
	if e.Tail != "" {
		msg += ": " + lastLine(e.Tail)
	}
	return msg
}

// Run starts a rank on each GPU and waits for all of them. Rank 0 starts
// first and writes the communicator's id to a pipe; the others start with
// it. When a rank exits with an error, or ctx is cancelled, the others get
// SIGTERM, then SIGKILL after the grace period. Every rank dies with the
// supervisor (Linux: the parent-death signal). It returns nil when every
// rank exited with 0, else the first rank's *ExitError (or ctx's error).
func Run(ctx context.Context, sp Spec) error {
	if len(sp.GPUs) == 0 {
		return fmt.Errorf("launch: no GPUs")
	}
	if sp.IDTimeout == 0 {
		sp.IDTimeout = 10 * time.Minute
	}
	if sp.Grace == 0 {
		sp.Grace = 10 * time.Second
	}
	g := &group{sp: sp, done: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	defer pr.Close()
	err = g.start(0, "", pw)
	pw.Close()
	if err != nil {
		return err
	}
	id, err := g.readID(ctx, pr)
	if err != nil {
		if errors.Is(err, errNoID) { // rank 0 closed the pipe: let it exit with its own status
			select {
			case <-g.done:
			case <-time.After(sp.Grace):
			}
		}
		g.stop()
		g.wait()
		if first := g.firstErr(); first != nil {
			return first
		}
		return err
	}
	for r := 1; r < len(sp.GPUs); r++ {
		if err := g.start(r, id, nil); err != nil {
			g.stop()
			g.wait()
			return err
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			g.stop()
		case <-g.done:
		}
	}()
	g.wait()
	if first := g.firstErr(); first != nil {
		return first
	}
	return ctx.Err()
}

type group struct {
	sp    Spec
	mu    sync.Mutex
	procs []*exec.Cmd
	errs  []*ExitError // in the order the ranks failed
	// stopping is set once the supervisor stops the ranks: those that
	// exit with an error after that are not the cause.
	stopping bool
	wg       sync.WaitGroup
	done     chan struct{} // closed when a rank fails
	once     sync.Once
	idle     sync.Once // stop's
}

func (g *group) start(rank int, id string, idPipe *os.File) error {
	gpu := g.sp.GPUs[rank]
	cmd := exec.Command(g.sp.Path, g.sp.Args...)
	cmd.Env = append(os.Environ(), g.sp.Env...)
	cmd.Env = append(cmd.Env,
		EnvRank+"="+strconv.Itoa(rank),
		EnvSize+"="+strconv.Itoa(len(g.sp.GPUs)),
		EnvGPU+"="+strconv.Itoa(gpu))
	cmd.SysProcAttr = sysProcAttr()
	tail := &ring{max: 16 << 10}
	if rank == 0 {
		cmd.Stdout, cmd.Stderr = g.sp.Stdout, g.sp.Stderr
		cmd.ExtraFiles = []*os.File{idPipe} // fd 3
		cmd.Env = append(cmd.Env, EnvIDFD+"="+strconv.Itoa(idFD))
	} else {
		cmd.Stdout = io.Discard
		cmd.Stderr = tail
		cmd.Env = append(cmd.Env, EnvID+"="+id)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launch: starting rank %d: %w", rank, err)
	}
	g.mu.Lock()
	g.procs = append(g.procs, cmd)
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := cmd.Wait()
		if err == nil {
			return
		}
		e := &ExitError{Rank: rank, GPU: gpu, Code: exitStatus(err), Tail: tail.String()}
		g.mu.Lock()
		if !g.stopping {
			g.errs = append(g.errs, e)
		}
		g.mu.Unlock()
		g.once.Do(func() { close(g.done) })
		g.stop()
	}()
	return nil
}

var errNoID = errors.New("launch: rank 0 exited before it published the communicator's id")

// readID waits for rank 0's id line, rank 0's exit (EOF) or the timeout.
func (g *group) readID(ctx context.Context, pr *os.File) (string, error) {
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		s, err := bufio.NewReaderSize(io.LimitReader(pr, idMaxLen+1), idMaxLen+1).ReadString('\n')
		ch <- line{strings.TrimSuffix(s, "\n"), err}
	}()
	timer := time.NewTimer(g.sp.IDTimeout)
	defer timer.Stop()
	select {
	case l := <-ch:
		if l.err != nil {
			return "", errNoID
		}
		return l.s, nil
	case <-timer.C:
		return "", fmt.Errorf("launch: rank 0 did not publish the communicator's id within %v", g.sp.IDTimeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop sends SIGTERM to every rank still running, then SIGKILL to those
// left after the grace period.
func (g *group) stop() {
	g.idle.Do(func() {
		g.mu.Lock()
		g.stopping = true
		procs := append([]*exec.Cmd(nil), g.procs...)
		g.mu.Unlock()
		for _, c := range procs {
			c.Process.Signal(syscall.SIGTERM) // an error for one that exited: nothing to do
		}
		go func() {
			time.Sleep(g.sp.Grace)
			for _, c := range procs {
				c.Process.Kill()
			}
		}()
	})
}

func (g *group) wait() { g.wg.Wait() }

// firstErr is the rank that failed first. Ranks stopped by the supervisor
// after that are not the cause and are not reported.
func (g *group) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.errs) == 0 {
		return nil
	}
	return g.errs[0]
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// ring keeps the last max bytes written to it.
type ring struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if len(r.buf) > r.max {
		r.buf = append(r.buf[:0], r.buf[len(r.buf)-r.max:]...)
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
