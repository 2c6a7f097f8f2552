package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/internal/launch"
)

// --gpus runs one process per GPU: the command the user started supervises
// (internal/launch) and each rank runs the same command line on its GPU,
// joined by one communicator. Rank 0 does what a one-GPU run does; the
// other ranks compute with it and write nothing.

const gpusUsage = "GPUs to run on, one process each: a count (2: GPUs 0 and 1) or ordinals (0,2); several share each section's sampling (sequence parallel, and with --cfg > 1 the two guidance passes side by side)"

// thisRank is the rank this process was started as by a supervisor, or nil.
var thisRank = sync.OnceValues(launch.FromEnv)

// isFollower tells whether this process is a rank other than 0: it runs
// the job but writes no output and prints no progress.
func isFollower() bool {
	r, _ := thisRank()
	return r != nil && r.Rank != 0
}

// superviseGPUs starts the ranks when --gpus names more than one GPU and
// this process is not a rank itself; supervised is false when the caller
// should run the job here. extra is appended to the ranks' arguments
// (later flags override earlier ones: a random seed drawn once, say).
func superviseGPUs(ctx context.Context, cmd *cobra.Command, gpus string, extra ...string) (supervised bool, err error) {
	r, err := thisRank()
	if err != nil {
		return true, err
	}
	if r != nil || gpus == "" {
		return false, nil
	}
	list, err := launch.ParseGPUs(gpus)
	if err != nil {
		return true, usage(err)
	}
	if len(list) == 1 {
		return false, nil
	}
	self, err := os.Executable()
	if err != nil {
		return true, fmt.Errorf("finding this program to start a process per GPU: %w", err)
	}
	slog.Default().Info(fmt.Sprintf("starting %d processes, one on each of GPUs %v", len(list), list))
	// The processes stop within their own grace after a signal; this one
	// waits for them a little longer before it exits regardless.
	stopGrace.Store(int64(1900 * time.Millisecond))
	err = launch.Run(ctx, launch.Spec{
		Path: self, Args: append(append([]string(nil), os.Args[1:]...), extra...), GPUs: list,
		Env:    framepack.RankEnv(),
		Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
	})
	return true, err
}

// rankOptions puts this process's GPU and communicator into o when it is a
// rank. Rank 0 makes the communicator's id and hands it to the supervisor;
// the others were started with it.
func rankOptions(o *framepack.Options) error {
	r, err := thisRank()
	if err != nil || r == nil {
		return err
	}
	o.GPU = r.GPU
	o.Ranks = &framepack.Ranks{Rank: r.Rank, Size: r.Size, ID: r.ID, Timeout: 10 * time.Minute}
	if r.Rank == 0 {
		o.Ranks.Publish = r.Publish
	}
	return nil
}

// rankSeed is the --seed the ranks get: a random one is drawn once, here.
func rankSeed(f *generateFlags) []string {
	if f.seedRandom {
		return []string{"--seed", strconv.FormatUint(f.seedValue, 10)}
	}
	return nil
}
