"""Golden cases: diffusers' AutoencoderKLWan (Wan 2.1's VAE) on a tiny random model.

The model keeps the released layout at a tiny size (base_dim 8, z_dim 4, dim_mult [1, 2, 2, 2],
num_res_blocks 1, temperal_downsample [False, True, True]): spatial ×8 and temporal ×4 down/up
sampling, downsample2d and downsample3d (time_conv), upsample3d and upsample2d (channels halved),
conv shortcuts, the mid block's attention, the feature cache across chunks. It is saved with
save_pretrained, and these cases are written in the layout of testdata/golden (see its README.md):

    <out>/models/wan_vae/                  config.json + diffusion_pytorch_model.safetensors
    <out>/wan_vae_decode/                  decode(z).sample, 3 latent frames -> 9 frames
    <out>/wan_vae_decode_b/                decode(z).sample, 5 latent frames -> 17 frames
    <out>/wan_vae_decode_tiled/            enable_tiling(32, 32, 16, 24), then decode(z).sample
    <out>/wan_vae_encode/                  encode(x).latent_dist mean and logvar, 9 frames
    <out>/wan_vae_encode_b/                the same for 6 frames (the last partial chunk is not read)
    <out>/wan_vae_encode_tiled/            enable_tiling(32, 32, 16, 24), then encode(x)

Float32 on the CPU, TF32 off. Needs torch, safetensors and diffusers' source:
    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_wan_vae.py --out /tmp/g
then copy models/wan_vae and the wan_vae_* folders into testdata/golden/.
"""
import json
import os

import torch
from safetensors.torch import save_file

import golden_setup

MODEL = "wan_vae"
TILE = dict(tile_sample_min_height=32, tile_sample_min_width=32,
            tile_sample_stride_height=16, tile_sample_stride_width=24)


def write_case(out, name, about, component, io, params=None):
    cdir = os.path.join(out, name)
    os.makedirs(cdir, exist_ok=True)
    io = {k: v.detach().float().cpu().contiguous() for k, v in io.items()}
    save_file(io, os.path.join(cdir, "io.safetensors"))
    case = {
        "about": about,
        "component": component,
        "model": "models/" + MODEL,
        "tensors": {k: {"dtype": "float32", "shape": list(v.shape)} for k, v in io.items()},
        "tolerance": {"rel_l2": 1e-4},
    }
    case.update(params or {})
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
    print("wrote", cdir, {k: list(v.shape) for k, v in io.items()}, flush=True)


def main():
    args = golden_setup.parse_args(5)
    golden_setup.exact_float32(all_cores=True)

    import diffusers
    from diffusers import AutoencoderKLWan

    z_dim = 4
    vae = AutoencoderKLWan(
        base_dim=8, z_dim=z_dim, dim_mult=[1, 2, 2, 2], num_res_blocks=1, attn_scales=[],
        temperal_downsample=[False, True, True],
        latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[2.0, 1.0, 0.5, 1.5],
    ).float().eval()
    # Every parameter random: the default init leaves biases at 0 and the
    # norms' gamma at 1, which would hide a mix-up between them.
    g = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, p in vae.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            else:
                p.copy_(r / max(1, p[0].numel()) ** 0.5)
        # Keep most pixels inside decode's clamp to [-1, 1], so the cases
        # see the decoder's values rather than the clamp.
        vae.decoder.conv_out.weight.mul_(0.3)
        vae.decoder.conv_out.bias.mul_(0.3)

    mdir = os.path.join(args.out, "models", MODEL)
    vae.save_pretrained(mdir)
    print("wrote", mdir, sum(p.numel() for p in vae.parameters()), "parameters", flush=True)
    common = {"diffusers_version": diffusers.__version__}

    def run(tiled, f):
        """f() without gradients, after enable_tiling(**TILE) when tiled; the
        case's params."""
        vae.disable_tiling()
        if tiled:
            vae.enable_tiling(**TILE)
        with torch.no_grad():
            out = f()
        vae.disable_tiling()
        return out, dict(common, tiling=TILE) if tiled else dict(common)

    def decode(name, shape, tiled, about):
        z = torch.randn(shape, generator=g)
        sample, params = run(tiled, lambda: vae.decode(z).sample)
        io = {"z": z, "sample": sample}
        if tiled:
            io["sample_untiled"], _ = run(False, lambda: vae.decode(z).sample)
        clamped = (sample.abs() >= 1).float().mean().item()
        print(f"{name}: {clamped:.1%} of the pixels at the clamp", flush=True)
        write_case(args.out, name, about, "wan_vae.decode_tiled" if tiled else "wan_vae.decode", io, params)

    decode("wan_vae_decode", (1, z_dim, 3, 4, 6), False,
           "AutoencoderKLWan.decode(z).sample: z as the VAE takes it (not normalized), decoded one latent "
           "frame at a time with the feature cache, clamped to [-1, 1]")
    decode("wan_vae_decode_b", (1, z_dim, 5, 2, 4), False,
           "AutoencoderKLWan.decode(z).sample with 5 latent frames (the cache in its steady state)")
    decode("wan_vae_decode_tiled", (1, z_dim, 2, 6, 8), True,
           "AutoencoderKLWan.decode(z).sample after enable_tiling with the sizes in 'tiling' (sample pixels): "
           "tiled_decode with blend_v/blend_h; sample_untiled is the same z without tiling")

    def encode(name, shape, tiled, about):
        x = torch.rand(shape, generator=g) * 2 - 1
        dist, params = run(tiled, lambda: vae.encode(x).latent_dist)
        write_case(args.out, name, about, "wan_vae.encode_tiled" if tiled else "wan_vae.encode",
                   {"x": x, "mean": dist.mean, "logvar": dist.logvar}, params)

    encode("wan_vae_encode", (1, 3, 9, 32, 48), False,
           "AutoencoderKLWan.encode(x).latent_dist mean and logvar (logvar clamped to [-30, 20]): frame 0, then "
           "chunks of 4 frames with the feature cache")
    encode("wan_vae_encode_b", (1, 3, 6, 16, 24), False,
           "AutoencoderKLWan.encode(x) of 6 frames: frame 0 and one chunk of 4; the 6th frame is not read")
    encode("wan_vae_encode_tiled", (1, 3, 5, 48, 64), True,
           "AutoencoderKLWan.encode(x) after enable_tiling with the sizes in 'tiling' (sample pixels): tiled_encode")

    total = 0
    for root, _, files in os.walk(args.out):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"output: {total} bytes ({total / 2**20:.2f} MiB) under {args.out}", flush=True)


if __name__ == "__main__":
    main()
