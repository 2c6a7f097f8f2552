#!/usr/bin/env python3
"""Golden cases generate_i2v and generate_i2v_teacache: FramePack's own worker
loop (framepack_worker.py, which imports FramePack) on the tiny model, on the
CPU, in float32 with TF32 off; generate_f1 (demo_gradio_f1.py's loop) and
generate_end_image (ComfyUI-FramePackWrapper's end_latent) likewise.

    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_generate.py \\
        --framepack /path/to/FramePack --models tinymodel/model \\
        --image testdata/images/scene.png --out $OUT/golden [--cases generate_f1,generate_end_image]

writes $OUT/golden/generate_i2v/{case.json,io.safetensors} and
$OUT/golden/generate_i2v_teacache/{case.json,io.safetensors} in the layout of
testdata/golden (see internal/testutil/golden). Copy both folders into testdata/golden.

Settings: 2 s at window 3 gives 5 sections (latent paddings [3, 2, 2, 1, 0],
the worker's `> 4` trick), 8 steps each, resolution 128 (scene.png's
256x192 -> bucket 128x96), seed 31337, CFG 1, GS 10, RS 0. The VAE's posterior
sample is torch.randn from the global CPU generator seeded with the seed just
before vae_encode (--seed-vae-sample), which is how framepack's Generate draws
it. For the TeaCache case the threshold starts at FramePack's 0.15 and is
raised until TeaCache skips at least one transformer call, so that skipping is
exercised; the threshold used is in case.json.

generate_f1 and generate_end_image: 1.2 s at window 3 gives 3 sections (37
frames), 6 steps each, otherwise the same settings. generate_f1 runs
--variant f1 (the tiny model's weights stand in for F1's: same architecture).
generate_end_image runs --end-image with scene.png turned 180 degrees (written
beside the work files, recorded as end_image) and embed_interpolation linear.
"""

import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import framepack_worker  # noqa: E402

PROMPT = "The girl dances gracefully, with clear movements, full of charm."

SETTINGS = {
    "seconds": 2.0,
    "latent_window_size": 3,
    "steps": 8,
    "cfg": 1.0,
    "gs": 10.0,
    "rs": 0.0,
    "seed": 31337,
    "resolution": 128,
}

SMALL = dict(SETTINGS, seconds=1.2, steps=6)

ALL_CASES = ["generate_i2v", "generate_i2v_teacache", "generate_f1", "generate_end_image"]

# rel_l2 ceilings. A float32 port lands near 1e-5 on the latents; the
# ceilings leave room for five sections of eight sampler steps compounding.
TOLERANCE = {"rel_l2": 1e-3, "image_cropped_max_abs": 1.0}


def worker_args(a, teacache, thresh, record, settings=SETTINGS, extra=()):
    SETTINGS = settings  # noqa: N806
    argv = [
        "--framepack", a.framepack, "--models", a.models, "--image", a.image,
        "--prompt", PROMPT, "--n-prompt", "",
        "--seconds", str(SETTINGS["seconds"]), "--latent-window-size", str(SETTINGS["latent_window_size"]),
        "--steps", str(SETTINGS["steps"]), "--cfg", str(SETTINGS["cfg"]), "--gs", str(SETTINGS["gs"]),
        "--rs", str(SETTINGS["rs"]), "--seed", str(SETTINGS["seed"]),
        "--teacache", "on" if teacache else "off",
        "--device", "cpu", "--dtype", "float32", "--memory", "high",
        "--resolution", str(SETTINGS["resolution"]), "--seed-vae-sample",
        "--record", record,
    ]
    if thresh is not None:
        argv += ["--teacache-thresh", repr(thresh)]
    return framepack_worker.parse_args(argv + list(extra))


def write_case(out_dir, name, rec, info, teacache, thresh, models_rel, settings=SETTINGS, component="generate",
               about=None, extra=None):
    SETTINGS = settings  # noqa: N806
    import torch
    from safetensors.torch import save_file

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in sorted(rec.items())}
    for k, v in tensors.items():
        if v.dtype not in (torch.float32, torch.int64, torch.uint8):
            raise SystemExit("tensor %s has dtype %s" % (k, v.dtype))
    save_file(tensors, os.path.join(d, "io.safetensors"))
    dtype_name = {torch.float32: "float32", torch.int64: "int64", torch.uint8: "uint8"}
    secs = info["sections_info"]
    case = {
        "component": component,
        "about": about or ("FramePack demo_gradio.py worker() run headless by bench/reference/framepack_worker.py on the tiny "
                  "model named by model, CPU, float32, TF32 off: encode_prompt_conds, find_nearest_bucket + "
                  "resize_and_center_crop of image (uint8 HxWx3, the original), vae_encode (posterior sample: "
                  "torch.manual_seed(seed) just before), hf_clip_vision_encode, then the sections with "
                  "sample_hunyuan(unipc), history latents, vae_decode with the worker's overlap and "
                  "soft_append_bcthw. history_latents_section_K = real_history_latents after section K (1-based, "
                  "generation order), generated_latents_section_K = that section's latents (start latent first on "
                  "the last), pixels = the final history_pixels (f32, unclamped, as vae_decode returns them)."),
        "model": models_rel,
        "prompt": PROMPT,
        "negative_prompt": "",
        "seconds": SETTINGS["seconds"],
        "latent_window_size": SETTINGS["latent_window_size"],
        "steps": SETTINGS["steps"],
        "cfg": SETTINGS["cfg"],
        "gs": SETTINGS["gs"],
        "rs": SETTINGS["rs"],
        "seed": SETTINGS["seed"],
        "resolution": SETTINGS["resolution"],
        "teacache": teacache,
        "teacache_rel_l1_thresh": (thresh if thresh is not None else 0.15) if teacache else None,
        "posterior": "sample (torch.manual_seed(seed) before vae_encode)",
        "width": info["width"],
        "height": info["height"],
        "frames": info["frames"],
        "sections": len(secs),
        "latent_paddings": info["latent_paddings"],
        "section_info": secs,
        "crop_start": info["tokenizer"]["crop_start"],
        "tokenizer": info["tokenizer"],
        "feature_extractor": info["feature_extractor"],
        "tolerance": TOLERANCE,
        "tensors": {k: {"dtype": dtype_name[v.dtype], "shape": list(v.shape)} for k, v in tensors.items()},
    }
    case.update(extra or {})
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
        f.write("\n")
    size = os.path.getsize(os.path.join(d, "io.safetensors"))
    print("wrote %s (io.safetensors %.1f MiB)" % (d, size / 2 ** 20), file=sys.stderr)
    limit = 16 if component == "generate" else 9
    if size > limit * 2 ** 20:
        raise SystemExit("%s/io.safetensors is %d bytes, over %d MiB" % (d, size, limit))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framepack", required=True)
    ap.add_argument("--models", required=True, help="the tiny model folder (tinymodel/model)")
    ap.add_argument("--image", required=True, help="testdata/images/scene.png")
    ap.add_argument("--out", required=True, help="folder that receives the case folders")
    ap.add_argument("--model-rel", default="../../tinymodel/model",
                    help="case.json's model entry, relative to testdata/golden")
    ap.add_argument("--cases", default=",".join(ALL_CASES[:2]),
                    help="comma-separated, of " + ", ".join(ALL_CASES))
    a = ap.parse_args()
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in ALL_CASES:
            raise SystemExit("unknown case %r (have %s)" % (c, ", ".join(ALL_CASES)))

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "_work")

    if "generate_i2v" in cases:
        i2v(a, work)
    if "generate_i2v_teacache" in cases:
        i2v_teacache(a, work)
    if "generate_f1" in cases:
        f1(a, work)
    if "generate_end_image" in cases:
        end_image(a, work)
    shutil.rmtree(work, ignore_errors=True)


def i2v(a, work):
    # TeaCache off.
    rec_dir = os.path.join(work, "generate_i2v")
    args = worker_args(a, False, None, rec_dir)
    _, rec, info = framepack_worker.run(args)
    framepack_worker.save_record(args, rec, info)
    write_case(a.out, "generate_i2v", rec, info, False, None, a.model_rel)


def i2v_teacache(a, work):
    # TeaCache on: FramePack's threshold first, raised until a step is skipped.
    for thresh in (None, 0.3, 0.6, 1.0, 2.0):
        rec_dir = os.path.join(work, "generate_i2v_teacache")
        args = worker_args(a, True, thresh, rec_dir)
        _, rec, info = framepack_worker.run(args)
        skipped = sum(s["teacache_skipped"] for s in info["sections_info"])
        print("teacache threshold %s: %d transformer calls skipped" % (thresh if thresh is not None else 0.15, skipped),
              file=sys.stderr)
        if skipped > 0:
            break
    else:
        raise SystemExit("TeaCache skipped nothing even at threshold 2.0")
    framepack_worker.save_record(args, rec, info)
    write_case(a.out, "generate_i2v_teacache", rec, info, True, thresh, a.model_rel)


def small_case(a, work, name, argv, about, extra):
    """The case name (its component too): the worker at SMALL with argv."""
    rec_dir = os.path.join(work, name)
    args = worker_args(a, False, None, rec_dir, SMALL, argv)
    _, rec, info = framepack_worker.run(args)
    framepack_worker.save_record(args, rec, info)
    write_case(a.out, name, rec, info, False, None, a.model_rel, SMALL, component=name, about=about, extra=extra)


def f1(a, work):
    small_case(a, work, "generate_f1", ["--variant", "f1"],
               about=("FramePack-F1 demo_gradio_f1.py worker() run headless by bench/reference/framepack_worker.py "
                      "--variant f1 on the tiny model named by model (its weights stand in for F1's), CPU, float32, "
                      "TF32 off: the same stages as generate_i2v, then F1's sections: history = 19 zero frames + "
                      "start latent, context from its end with indices [start, 4x, 2x, 1x, window], latents "
                      "appended, the last 2*lws decoded and soft-appended after the video. "
                      "history_latents_section_K = real_history_latents (the last total_generated_latent_frames, "
                      "start latent first) after section K; pixels = the final history_pixels (f32, unclamped)."),
               extra={"model_variant": "f1"})


def end_image(a, work):
    import numpy as np
    from PIL import Image

    os.makedirs(work, exist_ok=True)
    end_path = os.path.join(work, "end.png")
    img = np.array(Image.open(a.image).convert("RGB"))
    Image.fromarray(np.ascontiguousarray(img[::-1, ::-1])).save(end_path)
    small_case(a, work, "generate_end_image",
               ["--end-image", end_path, "--embed-interpolation", "linear", "--start-embed-strength", "1.0"],
               about=("FramePack demo_gradio.py worker() with kijai/ComfyUI-FramePackWrapper's end frame "
                      "(FramePackSampler.process: end_latent as the first section's clean_latents_post, "
                      "embed_interpolation linear: start*frac + (1-frac)*end, frac = 1 - i/(S-1)), its loop logic "
                      "ported into bench/reference/framepack_worker.py --end-image, tiny model, CPU, float32, TF32 "
                      "off. end_image = the image turned 180 degrees (the original), cropped to the start image's "
                      "bucket and VAE-encoded right after the start image (one seeded global generator). Tensors as "
                      "in generate_i2v, plus end_image, end_image_cropped, end_latent, end_image_embeddings."),
               extra={"end_image": True, "embed_interpolation": "linear", "start_embed_strength": 1.0})


if __name__ == "__main__":
    main()
