package main

import (
	"encoding/json"
	"io"

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
	for _, c := range benchCommands {
		cmd.AddCommand(c())
	}
	return cmd
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
