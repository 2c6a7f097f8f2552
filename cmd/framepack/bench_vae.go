package main

import (
	"github.com/spf13/cobra"

	"github.com/framepack-go/framepack/bench"
)

const benchVAELong = `Decode one latent with HunyuanVideo's VAE (--vae-class wan: Wan 2.1's, by default at
81 frames of 480x832, latent 1x16x21x60x104) and print one JSON line per measurement:
seconds (median of --iters after a warm-up decode), peak device memory (the budget's
accounting, weights included, and the GPU pool's), the planned activation peak
(vae.DecodePeak) against the measured one, the tiles, and the conv3d chain's work per tier.

--tiling framewise is diffusers' default decode (frame-wise temporal tiles, no spatial
tiles), spatial:TILE:STRIDE adds enable_tiling's spatial tiles (spatial:256:192 is its
default), none decodes in one piece, and auto lets the planner choose from the budget
(--vram-limit, weights and conv scratch taken off first).

--reference FILE.safetensors (tensors z and sample, as bench/reference/bench_ref.py --save
writes them) decodes that z instead of a random one and reports the relative L2 error
against sample, for the whole video and frame by frame (frame_rel_l2, and frame_psnr of the
frames converted to 8 bits as FramePack writes them); use it with --vae pointing at the same
weights.`

func newBenchVAE() *cobra.Command {
	var o bench.VAEOptions
	cmd := &cobra.Command{
		Use:   "vae",
		Short: "Time the VAE decode at the released configuration (random weights unless --vae)",
		Long:  benchVAELong,
		Example: `  framepack bench vae --dtype f16 --tiling framewise
  framepack bench vae --tiling auto --vram-limit 4.2G
  framepack bench vae --vae /tmp/ref/vae --reference /tmp/ref/decode_framewise.safetensors
  framepack bench vae --vae-class wan --latent 1x16x5x40x40`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return bench.VAE(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	fl := cmd.Flags()
	fl.StringVar(&o.VAE, "vae", "", "VAE folder (config.json + diffusion_pytorch_model.safetensors); default: random weights at the released config")
	fl.StringVar(&o.Latent, "latent", "", "latent shape BxCxTxHxW (default "+bench.HunyuanLatent+", one FramePack section at 544x704; with --vae-class wan: "+bench.WanLatent+")")
	fl.StringVar(&o.Class, "vae-class", "hunyuan", "hunyuan (AutoencoderKLHunyuanVideo) or wan (AutoencoderKLWan, Wan 2.1); framewise and none are the same for wan, whose decode is always frame by frame")
	fl.StringVar(&o.DType, "dtype", "f16", "compute dtype: f16, bf16 or f32")
	fl.StringVar(&o.Tiling, "tiling", "framewise", "framewise, spatial:TILE:STRIDE, none or auto")
	vramLimitVar(fl, &o.VRAMLimit, `device memory budget ("4.2G", "50%"); default: the device's`)
	fl.StringVar(&o.Reference, "reference", "", "safetensors file with z and sample to decode and compare against")
	fl.StringVar(&o.Device, "device", "auto", "auto, gpu or cpu")
	fl.StringVar(&o.Layout, "conv-layout", "auto", "conv3d layout of the vendor library tiers (optimized, conv2d): auto, ndhwc or ncdhw")
	fl.StringVar(&o.Search, "conv-search", "auto", "benchmark the vendor library's conv3d algorithms for each new shape (in a child process, remembered): auto (on AMD), on or off")
	fl.IntVar(&o.Iters, "iters", 3, "timed decodes (after one warm-up)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the random weights and latent")
	fl.BoolVar(&o.Profile, "profile", false, "also time every kernel class (waits for the device after each; slower) and print one line per class")
	return cmd
}
