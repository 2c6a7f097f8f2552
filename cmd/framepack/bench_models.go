package main

import (
	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
	"github.com/framepack-go/framepack/randmodel"
)

func newBenchModels() *cobra.Command {
	var o bench.ModelsOptions
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
			return bench.MakeModels(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&o.Out, "out", "o", "", "the model folder to write (created if needed)")
	fl.StringVar(&o.Size, "size", string(randmodel.Released), "released (≈ 42 GB) or tiny")
	fl.Uint64Var(&o.Seed, "seed", 0, "the random seed; the same seed writes the same bytes")
	fl.IntVar(&o.Workers, "workers", 0, "goroutines generating and writing (0: one per core)")
	return cmd
}
