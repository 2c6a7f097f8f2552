package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

func newBenchServe() *cobra.Command {
	var o bench.ServeOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Load the API of a framepack serve on loopback: jobs from concurrent clients, event listeners; latency, loss, RSS",
		Long: `Start framepack serve (this binary) on a loopback port with a fresh data folder, submit --jobs jobs
from --clients concurrent clients (each job with its own Idempotency-Key, each client reading its
jobs back as it goes) while --listeners clients follow the jobs' event streams, wait for every job
to end, and print one JSON line: the API's p50 and p99 latency (every call but the event streams),
jobs submitted against videos stored (lost: a submitted job with no stored video; duplicated: a job
stored that was not submitted, or one submission stored twice), the events received and the
server's peak RSS. Everything stays on 127.0.0.1, and it stops by itself (--timeout).

--job-lines prints a line for each job before it (bench "serve_job"): submit_to_end_s from the
submission to the stored video, queued_s until a worker took it, run_s from then, and the job's
generate_s, sample_s and decode_s, to set a served job beside the same job in bench generate.`,
		Example: `  framepack bench serve
  framepack bench serve --jobs 40 --clients 8 --listeners 20
  framepack bench serve --models /tmp/fp --jobs 2 --clients 1 --listeners 2 --seconds 5 \
      --resolution 640 --steps 25 --window 9 --cache teacache --job-lines`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return bench.Serve(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	fl := cmd.Flags()
	fl.IntVar(&o.Jobs, "jobs", 200, "jobs to submit")
	fl.IntVar(&o.Clients, "clients", 20, "concurrent clients submitting")
	fl.IntVar(&o.Listeners, "listeners", 50, "concurrent event-stream listeners")
	fl.IntVar(&o.Steps, "steps", 1, "sampler steps per section of each job")
	fl.Float64Var(&o.Seconds, "seconds", 0.4, "length of each job's video")
	fl.IntVar(&o.Resolution, "resolution", 64, "bucket resolution of each job")
	fl.IntVar(&o.Window, "window", 3, "latent window of each job")
	fl.StringVar(&o.Cache, "cache", "", "step cache of each job: none, teacache or magcache (default: the server's)")
	fl.BoolVar(&o.JobLines, "job-lines", false, "print a line for each job too: its times and stages")
	fl.StringVar(&o.Image, "image", "testdata/images/scene.png", "start image of every job")
	fl.StringVar(&o.Models, "models", "", "model folder for the server (default: the built-in tiny model)")
	fl.DurationVar(&o.Timeout, "timeout", 2*time.Hour, "give up after this long")
	return cmd
}
