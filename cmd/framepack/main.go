// Command framepack turns one image and a prompt into a video the way
// FramePack does, on AMD and NVIDIA GPUs or the CPU.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/convchain"
	"github.com/framepack-go/framepack/internal/atomicfile"
)

// Exit statuses: 1 a failure, 2 a command line that cannot run (nothing
// was done), 128+N stopped by signal N (130 SIGINT, 143 SIGTERM) after
// removing what it had half written.
const (
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	// A conv3d algorithm search runs in a child copy of this program, so a
	// search that hangs can be killed at its deadline; that child stops here.
	convchain.MaybeRunChild()

	ctx, caught := signalContext()
	convchain.BindAll(ctx) // a signal kills a conv3d search at once
	err := newRoot().ExecuteContext(ctx)
	exiting.Lock()
	os.Exit(exitCode(os.Stderr, err, caught()))
}

// stopGrace is how long the work gets to stop after the first signal
// before the process removes its temporary files and exits anyway: the
// engine stops at its next step, tile or stage, but a model load, a GPU
// kernel or a CPU op under way cannot be cut short, and at real size one
// can take minutes. A supervisor of one process per GPU waits a little
// longer, for its processes to stop first.
var stopGrace atomic.Int64

func init() { stopGrace.Store(int64(1500 * time.Millisecond)) }

// exiting is held by whoever ends the process: main once the command
// returned, or the signal's deadline.
var exiting sync.Mutex

// signalContext is cancelled by the first SIGINT or SIGTERM, so the job
// stops and removes its temporary files, and the process exits within
// stopGrace whatever it was doing; a second one kills the process at once
// (the signal's default action). caught returns the signal that cancelled
// the context, or nil.
func signalContext() (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	got := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-ch
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		got <- s
		cancel()
		grace := time.Duration(stopGrace.Load())
		time.AfterFunc(grace, func() { forceExit(os.Stderr, s, grace) })
	}()
	return ctx, func() os.Signal {
		select {
		case s := <-got:
			return s
		default:
			return nil
		}
	}
}

// forceExit ends a process whose work did not stop within grace of signal
// s: it removes the temporary files being written (nothing it would
// replace is touched) and exits 128+s, as a stopped job does. A search
// child dies with it (convchain starts it so).
func forceExit(w io.Writer, s os.Signal, grace time.Duration) {
	if !exiting.TryLock() {
		return // main is printing its result and exiting
	}
	atomicfile.RemoveTracked()
	sig, _ := s.(syscall.Signal)
	fmt.Fprintf(w, "framepack: stopped by %s: cancelled; the work under way did not stop within %v, so the process exits now, its temporary files removed\n", signalName(sig), grace)
	os.Exit(128 + int(sig))
}

func signalName(s syscall.Signal) string {
	if name, ok := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[s]; ok {
		return name
	}
	return s.String()
}

// exitCode prints err (with one "framepack:" prefix) and returns the
// process's exit status.
func exitCode(w io.Writer, err error, sig os.Signal) int {
	if err == nil {
		return 0
	}
	var ue *usageError
	var be *framepack.BudgetError // a budget below the least plan: a bad value, refused before any work
	s, ok := sig.(syscall.Signal)
	if ok && errors.Is(err, context.Canceled) {
		fmt.Fprintf(w, "framepack: stopped by %s: %s\n", signalName(s), errorText(err))
		return 128 + int(s)
	}
	fmt.Fprintln(w, "framepack: "+errorText(err))
	switch {
	case errors.Is(err, context.Canceled):
		return 128 + int(syscall.SIGINT)
	case errors.As(err, &ue), errors.As(err, &be):
		return exitUsage
	}
	return exitFailure
}

// errorText is err's message without the "framepack: " each layer of the
// library adds; the command prints the prefix once.
func errorText(err error) string {
	msg := err.Error()
	for {
		t := strings.TrimPrefix(msg, "framepack: ")
		t = strings.ReplaceAll(t, ": framepack: ", ": ")
		if t == msg {
			return msg
		}
		msg = t
	}
}

// usageError is a command line that cannot run: an unknown flag, a bad
// value, a missing input or an unusable output. It exits with status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// usage marks err (when not nil) as a usage error.
func usage(err error) error {
	if err == nil {
		return nil
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return &usageError{err}
}

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:           "framepack",
		Short:         "Image-to-video with FramePack's HunyuanVideo model, natively on AMD, NVIDIA or the CPU",
		Version:       versionLine(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			// By default only the command's notices and the warnings show,
			// plainly; -v gives the structured log.
			var h slog.Handler = plainHandler{logWriter{cmd.ErrOrStderr()}, levelNotice}
			if q, _ := cmd.Flags().GetBool("quiet"); q {
				h = plainHandler{logWriter{cmd.ErrOrStderr()}, slog.LevelWarn}
			} else if verbose {
				h = slog.NewTextHandler(logWriter{cmd.ErrOrStderr()}, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: levelName})
			}
			slog.SetDefault(slog.New(h))
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usage(err) })
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "the structured log, debug lines included (default: progress and one line per finished stage)")
	root.PersistentFlags().BoolP("quiet", "q", false, "no progress, no summary, only warnings and errors")
	root.AddCommand(newDoctor())
	root.AddCommand(newBench())
	root.AddCommand(newGenerate())
	root.AddCommand(newServe())
	root.AddCommand(newVAE())
	root.AddCommand(newVersion())
	root.AddCommand(newWorker())
	markUsage(root)
	return root
}

// markUsage makes every command's argument check a usage error, and a
// command group run without a subcommand one too.
func markUsage(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		markUsage(c)
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error { return usage(args(c, a)) }
	}
	if cmd.Run == nil && cmd.RunE == nil && cmd.HasSubCommands() {
		// Without this cobra prints help and exits 0 for "framepack vae x".
		cmd.Args = func(c *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usagef("unknown command %q for %q", a[0], c.CommandPath())
			}
			return nil
		}
		cmd.RunE = func(c *cobra.Command, a []string) error {
			c.Help()
			return usagef("%s needs a subcommand", c.CommandPath())
		}
	}
}
