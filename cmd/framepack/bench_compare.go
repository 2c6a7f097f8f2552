package main

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

const benchCompareLong = `Run the same job through FramePack's worker (bench/reference/framepack_worker.py, FramePack's
demo loop headless, TeaCache off, its posterior sample seeded as framepack draws it) and through
framepack generate, on one model folder (e.g. one bench make-models wrote), for each variant,
dtype and step count, and print one JSON line per comparison:

  what "latents": each section's generated latents and history latents, relative L2 of
                  framepack's against FramePack's (per history frame too);
  what "frames":  PSNR of every frame of framepack's video against FramePack's (its pixels
                  converted to 8 bits as save_bcthw_as_mp4 does), with mean, min and where;
  what "time":    both sides' stage times.

Each dtype runs as one worker process (--steps-each: the models load once) and one
framepack generate --jobs process, one after the other, so only one holds the GPU.
f32 is FramePack's float32 golden path (TF32 off) against --dtype f32; bf16 is the released
dtypes on both sides (bf16 transformer, f16 VAE and encoders). Few steps keep the random
model's chaos small: at f32 and 1-2 steps the two should agree to about 1e-4 in the latents
and 45 dB or more in every frame.

--bin runs another framepack binary for framepack's side (e.g. a build before a fix), and
--reuse-reference with --work reads FramePack's records a previous run left there instead of
running the worker again: a before/after comparison runs FramePack once.`

func newBenchCompare() *cobra.Command {
	var o bench.CompareOptions
	cmd := &cobra.Command{
		Use:   "compare --models DIR --framepack PATH [--diffusers PATH]",
		Short: "Run FramePack's own worker and framepack on the same job and compare latents and frames",
		Long:  benchCompareLong,
		Example: `  framepack bench make-models --out /tmp/fp
  framepack bench compare --models /tmp/fp --framepack ~/FramePack --diffusers ~/diffusers/src
  framepack bench compare --models /tmp/fp --framepack ~/FramePack --dtypes f32 --steps 1,2 --work /tmp/cmp --keep`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Stderr = cmd.ErrOrStderr()
			return bench.Compare(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Models, "models", "", "model folder, read by both sides (required)")
	fl.StringVar(&o.FramePack, "framepack", "", "FramePack checkout (lllyasviel/FramePack), whose diffusers_helper the worker imports (required unless --reuse-reference)")
	fl.StringVar(&o.Diffusers, "diffusers", "", "diffusers' src folder, put first on the worker's PYTHONPATH (default: the installed diffusers)")
	fl.StringVar(&o.Python, "python", "python3", "the Python that runs the worker (torch, transformers, safetensors)")
	fl.StringVar(&o.Worker, "worker", filepath.Join("bench", "reference", "framepack_worker.py"), "FramePack's worker script")
	fl.StringVar(&o.Image, "image", filepath.Join("testdata", "images", "scene.png"), "start image")
	fl.StringVar(&o.Prompt, "prompt", "The girl dances gracefully, with clear movements, full of charm.", "prompt")
	fl.Float64Var(&o.Seconds, "seconds", 1.1, "video length (1.1: one section of 37 frames at window 9)")
	fl.IntVar(&o.Window, "window", 9, "latent window size")
	fl.IntVar(&o.Resolution, "resolution", 640, "bucket resolution")
	fl.Uint64Var(&o.Seed, "seed", 31337, "seed")
	fl.StringVar(&o.Variants, "model", "framepack", "transformer variants, comma-separated: framepack, f1")
	fl.StringVar(&o.DTypes, "dtypes", "f32,bf16", "dtypes, comma-separated: f32 (float32 everywhere, TF32 off) and bf16 (the released dtypes)")
	fl.StringVar(&o.Steps, "steps", "1,2,8", "sampler steps, comma-separated")
	fl.StringVar(&o.WorkerMemory, "worker-memory", "high", "the worker's memory mode: high (every model on the GPU) or low (FramePack's low-VRAM mode)")
	fl.StringVar(&o.Bin, "bin", "", "framepack binary for framepack's side (default: this one)")
	fl.StringVar(&o.Work, "work", "", "folder for both sides' outputs (default: a temporary folder, removed unless --keep)")
	fl.BoolVar(&o.ReuseReference, "reuse-reference", false, "read FramePack's records from --work (a previous run's) instead of running the worker")
	fl.BoolVar(&o.Keep, "keep", false, "keep the outputs in --work")
	return cmd
}
