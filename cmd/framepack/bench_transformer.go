package main

import (
	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

const benchTransformerLong = `Run FramePack's packed HunyuanVideo transformer at the released config with random
weights on one section at 544x704 (noisy latents 9x68x88, clean 2 + 2 + 16 frames, 729 SigLIP
tokens, 100 valid text tokens) and print one JSON line per measurement: seconds per forward
(median of --iters after --warmup), peak device memory (the budget's accounting and the GPU
pool's), the FLOPs of the blocks' GEMMs and attention and the overall rate.

--mode resident keeps every weight on the device; streamed keeps the blocks in pinned host
memory under the --vram-limit budget (default 6G) and copies each block ahead of its use,
keeping resident what the budget allows beside --preserve.

--profile times every kernel class with device events in one more forward per mode and
prints one line per class (calls, seconds, share of the forward, TFLOP/s where it counts
FLOPs); "idle" is the forward's time not covered by a kernel (launch gaps, waits for
streamed weights). --check compares the streamed output with the resident one.

--gpus runs one process per GPU sharing each forward (sequence parallel over
NCCL or RCCL, as generate --gpus); rank 0 prints, the profile's "exchange" is
the time of the all-to-alls, and --check holds the shared output against the
same forward on one GPU.`

func newBenchTransformer() *cobra.Command {
	o := bench.TransformerOptions{VRAMLimit: mustSize("6G"), Preserve: mustSize("3.5G")}
	var gpus string
	cmd := &cobra.Command{
		Use:   "transformer",
		Short: "Time one forward of FramePack's transformer at the real config (random weights made in process)",
		Long:  benchTransformerLong,
		Example: `  framepack bench transformer
  framepack bench transformer --mode streamed --vram-limit 6G --profile
  framepack bench transformer --mode resident,streamed --check
  framepack bench transformer --mode resident --gpus 2 --profile`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if supervised, err := superviseGPUs(cmd.Context(), cmd, gpus); supervised {
				return err
			}
			var err error
			if o.Rank, err = thisRank(); err != nil {
				return err
			}
			return bench.Transformer(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Modes, "mode", "resident,streamed", "resident, streamed, or both comma-separated")
	fl.StringVar(&o.DType, "dtype", "bf16", "compute dtype: bf16, f16 or f32")
	fl.StringVar(&o.Weights, "weights", "", "block weights: empty for the compute dtype, or fp8 (FP8 E4M3, per-channel scales)")
	fl.StringVar(&o.FP8Compute, "fp8-compute", "auto", "with --weights fp8: on (inputs quantized per token, FP8 products), off (weight-only) or auto (on where the GPU has FP8 tensor cores)")
	fl.BoolVar(&o.FP8Attention, "fp8-attention", false, "the attention in FP8 where the GPU has an engine for it (as generate --fp8-attention)")
	fl.StringVar(&o.Device, "device", "auto", "auto, gpu or cpu")
	vramLimitVar(fl, &o.VRAMLimit, "the streamed mode's device memory budget")
	preserveVar(fl, &o.Preserve, "the streamed mode's memory kept free for activations and streamed blocks")
	fl.IntVar(&o.Iters, "iters", 5, "timed forwards per mode")
	fl.IntVar(&o.Warmup, "warmup", 1, "untimed forwards first")
	fl.IntVar(&o.Layers, "layers", -1, "double blocks (default: the config's 20)")
	fl.IntVar(&o.SingleLayers, "single-layers", -1, "single blocks (default: the config's 40)")
	fl.IntVar(&o.LatentH, "latent-height", 68, "latent height (pixels / 8)")
	fl.IntVar(&o.LatentW, "latent-width", 88, "latent width (pixels / 8)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the weights and inputs")
	fl.BoolVar(&o.Profile, "profile", false, "time every kernel class with device events (one more forward per mode)")
	fl.BoolVar(&o.Check, "check", false, "compare the streamed output with the resident one (with --gpus: the shared output with one GPU's)")
	fl.BoolVar(&o.OpByOp, "op-by-op", false, "run the elementwise work op by op (no fused kernels), for comparison")
	fl.StringVar(&gpus, "gpus", "", gpusUsage)
	fl.StringVar(&o.Save, "save", "", "write the last forward's output to this file (f32, little-endian), for --against")
	fl.StringVar(&o.Against, "against", "", "report the output's relative L2 against a file --save wrote (another dtype, device or --gpus)")
	return cmd
}
