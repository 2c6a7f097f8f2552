package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// benchCommands are the `framepack bench` subcommands; each file that adds
// one appends its constructor in an init function.
var benchCommands []func() *cobra.Command

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
				return withCPUProfile(cpuProfile, func() error { return run(cmd, args) })
			}
		}
		cmd.AddCommand(sub)
	}
	return cmd
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

// benchResult is one measurement line. Times are seconds, sizes bytes.
type benchResult map[string]any

func printResult(w io.Writer, r benchResult) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
