package main

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/randmodel"
)

func init() { benchCommands = append(benchCommands, newBenchModels) }

func newBenchModels() *cobra.Command {
	var out, size string
	var seed uint64
	var workers int
	cmd := &cobra.Command{
		Use:   "make-models --out DIR [--size released|tiny] [--seed N]",
		Short: "Write a FramePack model folder with random weights in the released layout",
		Long: `Write a whole FramePack model folder with random weights: the released checkpoints' tensor
names, shapes, dtypes, sharding and configs (transformer/ bf16 in 3 shards with its index,
text_encoder/ fp16 in 4 shards with its index, text_encoder_2/, vae/, image_encoder/), and
byte-level BPE tokenizers with LLaMA-3's and CLIP's special-token ids — a folder that
framepack and FramePack's own code (from_pretrained) both load, for timing the whole job
at real size without the real weights. The values are seeded (--seed), initialised as
Hugging Face initialises these models, so every stage computes finite numbers; the video
is noise.

--size released is ≈ 42 GB, written in parallel at disk speed; --size tiny has the
embedded tiny model's dimensions in the same layout. Every file is written under a
temporary name and renamed, so an interrupted run leaves no partial file. Prints one
JSON line: files, bytes, parameters, seconds, GB/s.`,
		Example: `  framepack bench make-models --out /tmp/fp
  framepack bench make-models --out /tmp/fp-tiny --size tiny --seed 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("bench make-models: --out DIR is required")
			}
			var mu sync.Mutex
			last := time.Now()
			start := last
			progress := func(done, total int64) {
				mu.Lock()
				defer mu.Unlock()
				if time.Since(last) < 5*time.Second && done < total {
					return
				}
				last = time.Now()
				slog.Info(fmt.Sprintf("make-models: %.1f of %.1f GB (%.0f%%), %.2f GB/s", float64(done)/1e9, float64(total)/1e9,
					100*float64(done)/float64(total), float64(done)/1e9/time.Since(start).Seconds()))
			}
			sum, err := randmodel.Write(cmd.Context(), out, randmodel.Options{Size: randmodel.Size(size), Seed: seed, Workers: workers, Progress: progress})
			if err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			return printResult(cmd.OutOrStdout(), benchResult{
				"bench": "make-models", "size": size, "dir": out, "files": sum.Files, "bytes": sum.WeightBytes,
				"params": sum.Params, "seconds": secs, "gb_per_s": float64(sum.WeightBytes) / 1e9 / secs,
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&out, "out", "o", "", "the model folder to write (created if needed)")
	fl.StringVar(&size, "size", string(randmodel.Released), "released (≈ 42 GB) or tiny")
	fl.Uint64Var(&seed, "seed", 0, "the random seed; the same seed writes the same bytes")
	fl.IntVar(&workers, "workers", 0, "goroutines generating and writing (0: one per core)")
	return cmd
}
