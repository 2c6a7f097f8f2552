package main

import (
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack"
	"github.com/framepack-go/framepack/bench"
)

const benchGenerateLong = `Run the whole job as a user runs it — a fresh process loads the models, encodes the prompt
and the image, samples every section, decodes and writes the video — once per memory mode, model
variant (--model) and step cache (--cache; --teacache on,off is --cache teacache,none), and print
one JSON line per run. Each run is a child process (this program
again), so nothing is warm from an earlier run; its total_s counts from the child's process
start (/proc/self/stat) to the written file.

Modes: nocap (no --vram-limit: the device's default budget), or a --vram-limit value such as
20G or 6G. The stages are disjoint: load_s (framepack.Load and every model's weights, the
transformer's and VAE decoder's reloads included), text_s, image_s (VAE encode and SigLIP),
sample_s (every section's sampling; sample_s_per_step divides by sections × steps), decode_s
(the decodes run in line, and the waits for those run beside the next sampling), write_s;
other_s is the rest of total_s (process start-up, reading the image, unloading); before_load_s,
pipeline_load_s (framepack.Load, model loads included) and generate_s (Generate's wall time) help place it.
decode_overlapped_sections and decode_overlapped_s are the decodes that ran beside a sampling
and the time of the part that did (on a GPU the soft append; the decode itself runs in line and
counts in decode_s); loop_idle_share is the section loop's share of time without sampling (its
decodes, joins and loads). sample_device_idle_s is how long the device's queue stood empty
during the sampling because the host waited on it (GPU: timed by events on the stream; launch
gaps within queued work are bench transformer --profile's "idle"), sample_device_idle_share
its share of sample_s.
compile_s is the GPU kernel compile time the backend logged, summed over modules, part of the
stage that first needed them; kernels are cached on disk, so only a first run compiles
(--cold-cache gives every run an empty cache). device_peak_gib is the engine allocator's peak during the job,
rss_peak_gib the process's peak resident memory (VmHWM). load_gbps is each model's bytes
placed (on the device and in host memory) over its load time, summed over its loads;
load_models has the same per model with its bytes, seconds (s), number of loads and
overlapped_s, the part of a load that ran beside other stages (the transformer loading while
the encoders run): load_s counts only what the job waited for. --cold-files makes the loads
read the disk and adds disk_seq_gbps, the disk's sequential read to compare them with. latents_nonfinite counts NaN
and ±Inf in the generated latents (0 unless the weights or the engine misbehave).

transformer_calls counts the transformer's calls over every section, transformer_computed those
that ran its blocks, cache_skipped_calls the rest (the step cache reused its residual).
With none among --cache, the runs of each mode and model start with it, and every other cache's
line says how far its video is from the uncached one made with the same model and seed:
vs_none_latents_rel_l2 (‖z − z₀‖/‖z₀‖ over the final latents) and vs_none_psnr_db (the PSNR
of the 8-bit frames, all frames together; vs_none_identical_frames instead when they are equal).`

func newBenchGenerate() *cobra.Command {
	var o bench.GenerateOptions
	var child bench.ChildRun
	var isChild bool
	cmd := &cobra.Command{
		Use:   "generate --models DIR [--modes nocap,20G,6G] [--cache none,teacache,magcache] [--model framepack,f1]",
		Short: "Time the whole job, from process start to the written video, per memory mode",
		Long:  benchGenerateLong,
		Example: `  framepack bench make-models --out /tmp/fp
  framepack bench generate --models /tmp/fp --modes nocap,20G,6G --teacache on,off
  framepack bench generate --models /tmp/fp --model framepack,f1 --cache none,teacache,magcache`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !isChild {
				o.Stderr = cmd.ErrOrStderr()
				o.Verbose, _ = cmd.Flags().GetBool("verbose")
				return bench.Generate(cmd.Context(), cmd.OutOrStdout(), o)
			}
			if supervised, err := superviseGPUs(cmd.Context(), cmd, o.GPUs); supervised {
				return err
			}
			return bench.GenerateChild(cmd.Context(), cmd.OutOrStdout(), o, child, rankOptions)
		},
	}
	benchGenerateFlags(cmd, &o)
	fl := cmd.Flags()
	fl.BoolVar(&isChild, "child", false, "run one job in this process (what the parent runs)")
	fl.StringVar(&child.Mode, "mode", "nocap", "the child's memory mode")
	fl.BoolVar(&child.TeaCache, "tc", true, "the child's TeaCache (without --run-cache)")
	fl.StringVar(&child.Cache, "run-cache", "", "the child's step cache")
	fl.StringVar(&child.Model, "run-model", framepack.ModelFramePack, "the child's model variant")
	fl.StringVar(&child.Video, "video", "", "the child's output video")
	fl.StringVar(&child.Dump, "dump", "", "the child writes its final latents and frames to this path + .latents, .frames")
	for _, h := range []string{"child", "mode", "tc", "run-cache", "run-model", "video", "dump"} {
		fl.MarkHidden(h)
	}
	return cmd
}

// benchGenerateFlags defines bench generate's flags (the parent's, which
// it passes on to each child).
func benchGenerateFlags(cmd *cobra.Command, o *bench.GenerateOptions) {
	def := framepack.DefaultRequest()
	fl := cmd.Flags()
	fl.StringVar(&o.Models, "models", "", "model folder (required; e.g. one bench make-models wrote)")
	fl.StringVar(&o.Image, "image", filepath.Join("testdata", "images", "scene.png"), "start image")
	fl.StringVar(&o.Prompt, "prompt", "The girl dances gracefully, with clear movements, full of charm.", "prompt")
	fl.Float64Var(&o.Seconds, "seconds", def.Seconds, "video length in seconds")
	fl.IntVar(&o.Resolution, "resolution", def.Resolution, "bucket resolution (640: the test image's bucket is 544×704)")
	fl.IntVar(&o.Steps, "steps", def.Steps, "sampler steps per section")
	fl.IntVar(&o.Window, "window", def.LatentWindowSize, "latent window size")
	fl.Uint64Var(&o.Seed, "seed", def.Seed, "seed")
	fl.StringVar(&o.Modes, "modes", "nocap", "comma-separated memory modes: nocap, or --vram-limit values such as 20G, 6G")
	fl.StringVar(&o.TeaCache, "teacache", "on", "comma-separated TeaCache settings: on, off (--cache teacache, none)")
	fl.StringVar(&o.Caches, "cache", "", "comma-separated step caches: none, teacache, magcache (default: as --teacache says)")
	fl.StringVar(&o.Variants, "model", framepack.ModelFramePack, "comma-separated model variants: framepack, f1 (random weights stand in for either)")
	fl.Float64Var(&o.CacheThreshold, "cache-threshold", 0, "the step caches' threshold (as generate --cache-threshold; 0: each cache's default)")
	fl.IntVar(&o.MagCacheK, "magcache-k", def.MagCacheK, "MagCache's K (as generate --magcache-k)")
	fl.Float64Var(&o.MagCacheRetention, "magcache-retention", def.MagCacheRetention, "MagCache's retention ratio (as generate --magcache-retention)")
	fl.StringVar(&o.Device, "device", framepack.DeviceAuto, "auto, cpu or gpu")
	preserveVar(fl, &o.Preserve, "--preserve for every run (default: the engine's)")
	fl.StringVarP(&o.Out, "out", "o", "", "folder for the videos (default: a temporary folder, removed after)")
	fl.StringVar(&o.GPUs, "gpus", "", gpusUsage)
	fl.Float64Var(&o.CFG, "cfg", def.CFG, "real classifier-free guidance scale (> 1 runs the negative prompt too)")
	fl.StringVar(&o.Weights, "weights", "", "transformer block weights: empty for the compute dtype, or fp8 (as generate --weights)")
	fl.StringVar(&o.FP8Compute, "fp8-compute", "auto", "with --weights fp8: auto, on or off (as generate --fp8-compute)")
	fl.BoolVar(&o.FP8Attention, "fp8-attention", false, "the transformer's attention in FP8 where the GPU has an engine for it (as generate --fp8-attention)")
	fl.BoolVar(&o.ColdFiles, "cold-files", false, "drop the model's weight files from the page cache before each run (posix_fadvise, no root needed), so that its loads read the disk; the lines then carry disk_seq_gbps, one reader's sequential read of the largest weight file from the disk, the reference for the loads' rates")
	fl.BoolVar(&o.ColdCache, "cold-cache", false, "give each run empty cache folders (XDG_CACHE_HOME, and CUDA_CACHE_PATH for the NVIDIA driver's compiled PTX): GPU kernels compiled and conv3d algorithms chosen afresh, as on a machine's first run")
}
