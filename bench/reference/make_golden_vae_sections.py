"""Golden cases: diffusers' AutoencoderKLHunyuanVideo on the decodes FramePack's loops run at their real
window (9) that the first cases do not reach, on the tiny model testdata/golden/models/vae.

vae_decode_a/_b cover frame-wise decoding at 3 and 7 latent frames (window 3's decodes). At window 9
FramePack decodes 10 latent frames (one section: the start latent and 9), 18 (F1, and FramePack's middle
sections: 2·9) and 19 (its last section: 2·9+1): four, six and seven temporal tiles, the last ones short
(z[9:10] decodes to a frame that is dropped). Its low-VRAM mode (enable_tiling) also tiles each temporal
tile spatially, and encodes the start image in spatial tiles. Cases, in the layout of testdata/golden:

    <out>/vae_decode_sections/     decode(z).sample for z of 10, 18 and 19 frames (z_10, sample_10, …)
    <out>/vae_decode_tiled_framewise/  enable_tiling(32, 32, 24, 24), decode of 10 frames at 6×8:
                                   spatial tiles inside the temporal tiles; sample_untiled without tiling
    <out>/vae_encode_tiled/        enable_tiling(32, 32, 24, 24), encode(x) of one 48×64 image (tiled_encode)

Float32 on the CPU, TF32 off. Needs torch, safetensors and diffusers' source:
    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_vae_sections.py \\
        --vae testdata/golden/models/vae --out /tmp/g
then copy the three folders into testdata/golden/.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

import golden_setup

TILE = dict(tile_sample_min_height=32, tile_sample_min_width=32,
            tile_sample_stride_height=24, tile_sample_stride_width=24)


def write_case(out, name, about, component, io, params=None):
    cdir = os.path.join(out, name)
    os.makedirs(cdir, exist_ok=True)
    io = {k: v.detach().float().cpu().contiguous() for k, v in io.items()}
    save_file(io, os.path.join(cdir, "io.safetensors"))
    case = {
        "about": about,
        "component": component,
        "model": "models/vae",
        "tensors": {k: {"dtype": "float32", "shape": list(v.shape)} for k, v in io.items()},
        "tolerance": {"rel_l2": 1e-4},
    }
    case.update(params or {})
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
    print("wrote", cdir, {k: list(v.shape) for k, v in io.items()}, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vae", required=True, help="the tiny VAE (testdata/golden/models/vae)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=31)
    args = ap.parse_args()
    golden_setup.exact_float32(all_cores=True)

    import diffusers
    from diffusers import AutoencoderKLHunyuanVideo

    vae = AutoencoderKLHunyuanVideo.from_pretrained(args.vae, torch_dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(args.seed)
    common = {"diffusers_version": diffusers.__version__}

    def run(tiled, f):
        vae.disable_tiling()
        if tiled:
            vae.enable_tiling(**TILE)
        with torch.no_grad():
            out = f()
        vae.disable_tiling()
        return out

    io = {}
    for t in (10, 18, 19):
        z = torch.randn(1, 16, t, 4, 6, generator=g)
        io[f"z_{t}"], io[f"sample_{t}"] = z, run(False, lambda: vae.decode(z).sample)
    write_case(args.out, "vae_decode_sections",
               "AutoencoderKLHunyuanVideo.decode(z_T).sample with diffusers' defaults (frame-wise decoding: temporal "
               "tiles of 5 latent frames every 3, the first output frame of every tile but the first dropped, blend_t "
               "over 4 frames) for T = 10, 18 and 19, the decodes of FramePack's loops at window 9; z is already "
               "divided by scaling_factor", "vae.decode_sections", io, dict(common, frames=[10, 18, 19]))

    z = torch.randn(1, 16, 10, 6, 8, generator=g)
    write_case(args.out, "vae_decode_tiled_framewise",
               "decode with enable_tiling(**tiling) of 10 latent frames: each temporal tile decoded in spatial tiles "
               "(tiled_decode inside _temporal_tiled_decode, FramePack's low-VRAM mode); sample_untiled is the same z "
               "without tiling", "vae.decode_tiled",
               {"z": z, "sample": run(True, lambda: vae.decode(z).sample),
                "sample_untiled": run(False, lambda: vae.decode(z).sample)}, dict(common, tiling=TILE))

    x = torch.rand(1, 3, 1, 48, 64, generator=g) * 2 - 1
    dist = run(True, lambda: vae.encode(x).latent_dist)
    write_case(args.out, "vae_encode_tiled",
               "encode(x).latent_dist mean and logvar (clamped to [-30, 20]) with enable_tiling(**tiling): one image "
               "in spatial tiles (tiled_encode), as FramePack's low-VRAM mode encodes the start image",
               "vae.encode_tiled", {"x": x, "mean": dist.mean, "logvar": dist.logvar}, dict(common, tiling=TILE))


if __name__ == "__main__":
    main()
