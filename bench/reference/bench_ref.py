"""The PyTorch reference timings framepack's benchmarks compare against.

Runs diffusers' AutoencoderKLHunyuanVideo decode, AutoencoderKLWan (Wan 2.1) decode
and the FramePack transformer (HunyuanVideoFramepackTransformer3DModel) at the real
configurations with random weights on one CUDA GPU, and prints one JSON line per
measurement.
With --save DIR it also writes the random VAE (save_pretrained), the latent and
the decoded sample, so framepack can decode the same latent with the same
weights and compare outputs.

Needs torch and diffusers' source on PYTHONPATH:
    PYTHONPATH=/path/to/diffusers/src python3 bench_ref.py vae --save /tmp/ref
    PYTHONPATH=/path/to/diffusers/src python3 bench_ref.py wan_vae --latent 1x16x5x40x40
"""
import argparse
import json
import time

import torch


def timed(fn, iters):
    torch.cuda.synchronize()
    fn()  # warm-up (and cuDNN/cuBLAS heuristics)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return out, times, torch.cuda.max_memory_allocated()


def decode_modes(args, vae, z, model):
    """Times vae.decode(z) in each of --modes (framewise: diffusers' default;
    tiled: enable_tiling()), yielding (mode, times, peak); with --save
    the model goes to DIR/<model> and each z and sample to
    DIR/<prefix>decode_<mode>.safetensors (prefix "wan_" for wan_vae)."""
    if args.save:
        import os
        os.makedirs(args.save, exist_ok=True)
        vae.save_pretrained(os.path.join(args.save, model))
    prefix = "" if model == "vae" else "wan_"
    for mode in args.modes.split(","):
        vae.disable_tiling()
        if mode == "tiled":
            vae.enable_tiling()
        with torch.no_grad():
            out, times, peak = timed(lambda: vae.decode(z).sample, args.iters)
        yield mode, times, peak
        if args.save:
            from safetensors.torch import save_file
            save_file({"z": z.float().cpu().contiguous(), "sample": out.float().cpu().contiguous()},
                      f"{args.save}/{prefix}decode_{mode}.safetensors")
        del out
        torch.cuda.empty_cache()


def bench_vae(args):
    from diffusers import AutoencoderKLHunyuanVideo

    torch.manual_seed(0)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    vae = AutoencoderKLHunyuanVideo().to("cuda", dtype).eval()
    shape = [int(x) for x in args.latent.split("x")]
    z = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(1)).to("cuda", dtype)
    for mode, times, peak in decode_modes(args, vae, z, "vae"):
        print(json.dumps({"bench": "vae_decode", "impl": "pytorch", "mode": mode, "latent": shape,
                          "dtype": args.dtype, "seconds": sorted(times)[len(times) // 2], "all": times,
                          "peak_bytes": peak, "device": torch.cuda.get_device_name()}), flush=True)
        if args.profile:
            vae.disable_tiling()
            if mode == "tiled":
                vae.enable_tiling()
            with torch.no_grad():
                profile_kernels(lambda: vae.decode(z).sample, args.dtype, "vae", mode)


def bench_wan_vae(args):
    """AutoencoderKLWan.decode at the released Wan 2.1 config (random weights: torch's default
    init, the norms' gamma 1), framewise = diffusers' default (one latent frame at a time with
    the feature cache), tiled = enable_tiling() (256/192)."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[args.dtype]
    vae = AutoencoderKLWan().to("cuda", dtype).eval()
    shape = [int(x) for x in args.latent.split("x")]
    z = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(1)).to("cuda", dtype)
    frames = 1 + (shape[2] - 1) * 4
    for mode, times, peak in decode_modes(args, vae, z, "wan_vae"):
        print(json.dumps({"bench": "vae_decode", "impl": "pytorch", "model": "wan2.1", "mode": mode,
                          "latent": shape, "frames": frames, "height": shape[3] * 8, "width": shape[4] * 8,
                          "dtype": args.dtype, "seconds": sorted(times)[len(times) // 2], "all": times,
                          "peak_bytes": peak, "weights_bytes": sum(p.numel() * p.element_size() for p in vae.parameters()),
                          "device": torch.cuda.get_device_name()}), flush=True)


def bench_transformer(args):
    from diffusers import HunyuanVideoFramepackTransformer3DModel

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = HunyuanVideoFramepackTransformer3DModel(has_image_proj=True, has_clean_x_embedder=True)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    model = model.to(dt).eval()
    t, h, w = 9, 68, 88
    g = torch.Generator("cpu").manual_seed(1)
    r = lambda *s: torch.randn(*s, generator=g).to("cuda", dt)
    text_len, valid = 512, 100
    mask = torch.zeros(1, text_len, dtype=torch.bool, device="cuda")
    mask[:, :valid] = True
    lws, pad = 9, 0
    idx = torch.arange(0, 1 + pad + lws + 1 + 2 + 16, device="cuda").unsqueeze(0)
    # diffusers takes one row of frame indices for the batch.
    pre, _, lat, post, x2, x4 = idx.split([1, pad, lws, 1, 2, 16], dim=1)
    kwargs = dict(
        hidden_states=r(1, 16, t, h, w), timestep=torch.tensor([1000.0], device="cuda", dtype=dt),
        encoder_hidden_states=r(1, text_len, 4096), encoder_attention_mask=mask,
        pooled_projections=r(1, 768), image_embeds=r(1, 729, 1152), indices_latents=lat[0],
        guidance=torch.tensor([10000.0], device="cuda", dtype=dt),
        latents_clean=r(1, 16, 2, h, w), indices_latents_clean=torch.cat([pre, post], dim=1)[0],
        latents_history_2x=r(1, 16, 2, h, w), indices_latents_history_2x=x2[0],
        latents_history_4x=r(1, 16, 16, h, w), indices_latents_history_4x=x4[0],
        return_dict=False)
    import contextlib
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[args.sdpa]
    with torch.no_grad(), (sdpa_kernel(backend) if backend else contextlib.nullcontext()):
        _, times, peak = timed(lambda: model(**kwargs)[0], args.iters)
    print(json.dumps({"bench": "transformer_forward", "impl": "pytorch", "sdpa": args.sdpa, "dtype": args.dtype,
                      "latent": [1, 16, t, h, w], "valid_text": valid, "seconds": sorted(times)[len(times) // 2],
                      "all": times, "peak_bytes": peak, "device": torch.cuda.get_device_name()}), flush=True)
    if args.profile:
        with torch.no_grad(), (sdpa_kernel(backend) if backend else contextlib.nullcontext()):
            profile_kernels(lambda: model(**kwargs)[0], args.dtype)


def profile_kernels(fn, dtype, what="transformer", mode=None):
    """One more call under torch.profiler: the CUDA kernels' time by class
    (attention, GEMM, convolution, the rest) and the ten longest kernels, one
    JSON line each, as framepack's --profile lines (bench "<what>_profile"
    and "<what>_kernel")."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = e.cuda_time_total
        if t > 0 and e.count > 0 and not e.key.startswith("aten::"):
            kernels[e.key] = (kernels.get(e.key, (0, 0))[0] + t / 1e6, kernels.get(e.key, (0, 0))[1] + e.count)

    def cls(name):
        n = name.lower()
        if any(k in n for k in ("fmha", "attention", "flash", "attn")):
            return "attention"
        if any(k in n for k in ("conv", "fprop", "wgrad", "dgrad", "implicit", "winograd", "fft")):
            return "conv"
        if any(k in n for k in ("gemm", "cutlass", "sm90_xmma", "ampere_", "sm80_xmma", "cublas")):
            return "gemm"
        return "other"

    classes = {}
    for name, (sec, n) in kernels.items():
        c = classes.setdefault(cls(name), [0.0, 0])
        c[0] += sec
        c[1] += n
    extra = {"mode": mode} if mode else {}
    for c, (sec, n) in sorted(classes.items()):
        print(json.dumps({"bench": what + "_profile", "impl": "pytorch", "dtype": dtype, "class": c,
                          "seconds": sec, "calls": n, **extra}), flush=True)
    for name, (sec, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:10]:
        print(json.dumps({"bench": what + "_kernel", "impl": "pytorch", "dtype": dtype, "kernel": name[:160],
                          "seconds": sec, "calls": n, **extra}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["vae", "wan_vae", "transformer"])
    p.add_argument("--latent", default=None,
                   help="BxCxTxHxW (vae: 1x16x18x68x88, a FramePack section; wan_vae: 1x16x21x60x104, 81 frames of 480x832)")
    p.add_argument("--modes", default="framewise,tiled")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--save", default="")
    p.add_argument("--profile", action="store_true",
                   help="transformer, vae: also time the CUDA kernels by class (one more forward or decode per mode)")
    p.add_argument("--dtype", choices=["f16", "bf16", "f32"], default=None,
                   help="the VAEs' dtype (default f16) or the transformer's (default bf16); f32 runs with TF32 off")
    p.add_argument("--sdpa", choices=["default", "flash", "cudnn"], default="default",
                   help="torch's attention backend for the transformer (default: torch's own choice)")
    a = p.parse_args()
    if a.latent is None:
        a.latent = "1x16x21x60x104" if a.what == "wan_vae" else "1x16x18x68x88"
    if a.dtype is None:
        a.dtype = "bf16" if a.what == "transformer" else "f16"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    {"vae": bench_vae, "wan_vae": bench_wan_vae, "transformer": bench_transformer}[a.what](a)
