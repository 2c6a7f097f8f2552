package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

// benchCommands are the `framepack bench` subcommands, one line each; their
// work is package bench's.
var benchCommands = []func() *cobra.Command{
	newBenchCompare,
	newBenchFarm,
	newBenchGenerate,
	newBenchModels,
	newBenchServe,
	newBenchTransformer,
	newBenchVAE,
}

func newBench() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the engine's stages; prints one JSON object per measurement",
	}
	var cpuProfile string
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of this process's run to the file (go tool pprof): where the host's time goes between kernels")
	for _, c := range benchCommands {
		sub := c()
		if run := sub.RunE; run != nil {
			sub.RunE = func(cmd *cobra.Command, args []string) error {
				if cmd.Context() == nil {
					cmd.SetContext(context.Background())
				}
				return benchError(withCPUProfile(cpuProfile, func() error { return run(cmd, args) }))
			}
		}
		cmd.AddCommand(sub)
	}
	return cmd
}

// benchError makes a bench tool's bad options a usage error (exit status 2).
func benchError(err error) error {
	var ue *bench.UsageError
	if errors.As(err, &ue) {
		return usage(err)
	}
	return err
}

// withCPUProfile runs run, profiling the process's CPU into path when set.
func withCPUProfile(path string, run func() error) error {
	if path == "" {
		return run()
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	err = run()
	pprof.StopCPUProfile()
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--cpuprofile: %w", cerr)
	}
	return err
}
