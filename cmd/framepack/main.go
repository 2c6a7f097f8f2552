// Command framepack turns one image and a prompt into a video the way
// FramePack does, on AMD and NVIDIA GPUs or the CPU.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/convchain"
)

func main() {
	// A conv3d algorithm search runs in a child copy of this program, so a
	// search that hangs can be killed at its deadline; that child stops here.
	convchain.MaybeRunChild()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "framepack:", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var verbose bool
	root := &cobra.Command{
		Use:           "framepack",
		Short:         "Image-to-video with FramePack's HunyuanVideo model, natively on AMD, NVIDIA or the CPU",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, args []string) {
			level := slog.LevelInfo
			if verbose {
				level = slog.LevelDebug
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
		},
	}
	root.PersistentFlags().BoolVarP(&verbose, "verbose", "v", false, "debug logging")
	root.AddCommand(newDoctor())
	root.AddCommand(newBench())
	root.AddCommand(newGenerate())
	root.AddCommand(newVAE())
	return root
}
