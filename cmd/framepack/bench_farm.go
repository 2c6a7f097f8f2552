package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

func newBenchFarm() *cobra.Command {
	var cfg bench.FarmConfig
	var image string
	cmd := &cobra.Command{
		Use:   "farm [--workers 1,2,3] [--workers-gpus LAYOUT …] [--models DIR]",
		Short: "Measure workers sharing a NATS queue on loopback: jobs per minute by worker count, recovery after a worker dies",
		Long: `Run a farm on loopback — a NATS server (in this process, or --nats), framepack worker processes
(this binary) and a submitter — and print one JSON line per run: for each worker count of --workers,
--jobs jobs submitted at once and the jobs per minute until the last is stored (every job counted:
submitted, stored, lost, duplicated). --workers-gpus measures GPU layouts instead: "0;1" is one
worker on GPU 0 and one on GPU 1, "0,1" one worker running each job on GPUs 0 and 1 (sequence
parallel); repeat it for several. Before each run every worker runs one short job, not counted, so
that its model load is left out (--warmup=false keeps it in). With --recovery a last run kills a
worker with SIGKILL once its job has finished a section and measures the time until the job runs
again on another worker: about the queue's ack wait (--ack-wait; 30 s by default).`,
		Example: `  framepack bench farm
  framepack bench farm --models /tmp/m --workers-gpus 0 --workers-gpus '0;1' --workers-gpus 0,1 --jobs 4 --seconds 2 --recovery=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			img, err := os.ReadFile(image)
			if err != nil {
				return usagef("--image: %v", err)
			}
			cfg.Image = img
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if cfg.Jobs < 1 || cfg.Steps < 1 || cfg.Window < 1 || cfg.Seconds <= 0 {
				return usagef("--jobs, --steps and --window must be at least 1, --seconds above 0")
			}
			if len(cfg.Layouts) == 0 && len(cfg.Workers) == 0 {
				return usagef("give --workers or --workers-gpus")
			}
			if len(cfg.Layouts) > 0 && !cmd.Flags().Changed("workers") {
				cfg.Workers = nil
			}
			if len(cfg.Layouts) > 0 && len(cfg.Workers) > 0 {
				return usagef("give --workers or --workers-gpus, not both")
			}
			if cfg.Resolution == 0 && cfg.Models == "" {
				cfg.Resolution = 64
			}
			if cfg.Resolution == 0 {
				cfg.Resolution = 640
			}
			cfg.Log, cfg.Out = slog.Default(), cmd.OutOrStdout()
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return bench.RunFarm(ctx, cfg)
		},
	}
	fl := cmd.Flags()
	fl.IntSliceVar(&cfg.Workers, "workers", []int{1, 2, 3}, "worker counts to measure, one run each")
	fl.StringArrayVar(&cfg.Layouts, "workers-gpus", nil, `a GPU layout to measure instead: "0;1" (a worker per GPU), "0,1" (one worker on both); repeatable`)
	fl.StringVar(&cfg.Models, "models", "", "the workers' model folder (default: the built-in tiny model)")
	fl.StringVar(&cfg.NATS, "nats", "", "an external NATS server with JetStream (default: one in this process on a loopback port)")
	fl.IntVar(&cfg.Jobs, "jobs", 6, "jobs per run")
	fl.Float64Var(&cfg.Seconds, "seconds", 1.2, "length of each job's video")
	fl.IntVar(&cfg.Steps, "steps", 1, "sampler steps per section")
	fl.IntVar(&cfg.Window, "window", 3, "latent window size")
	fl.IntVar(&cfg.Resolution, "resolution", 0, "bucket resolution (default 64 on the tiny model, 640 on --models)")
	fl.StringVar(&image, "image", "testdata/images/scene.png", "start image of every job")
	fl.DurationVar(&cfg.AckWait, "ack-wait", 0, "set the queue's ack wait (default: 30 s, the queue's own)")
	fl.BoolVar(&cfg.Warmup, "warmup", true, "run one short job on each worker before measuring, to leave the model load out")
	fl.BoolVar(&cfg.Recovery, "recovery", true, "measure the time from a worker's death to its job running again")
	fl.StringArrayVar(&cfg.WorkerArgs, "worker-arg", nil, "an argument for every worker (repeatable): --worker-arg=--vram-limit=40G")
	fl.DurationVar(&cfg.Timeout, "timeout", time.Hour, "give up after this long")
	return cmd
}
