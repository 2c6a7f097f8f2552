#!/usr/bin/env python3
"""FramePack's demo_gradio.py worker(), headless (or demo_gradio_f1.py's with
--variant f1; or with --end-image, ComfyUI-FramePackWrapper's end_latent).

The same stages, in the same order, through the same diffusers_helper calls as
FramePack's Gradio demo: encode_prompt_conds, crop_or_pad_yield_mask,
find_nearest_bucket + resize_and_center_crop, vae_encode,
hf_clip_vision_encode, then the sections (latent_paddings with the `> 4`
trick) each sampled by sample_hunyuan with the demo's arguments, prepended to
history_latents and decoded with the demo's overlap logic and
soft_append_bcthw. FramePack's modules are imported from --framepack PATH; no
FramePack code is copied here.

Two uses:
  * the real-size benchmark: one JSON line at the end with the stage times,
    measured from process start;
  * the golden case (see make_golden_generate.py): --record DIR saves the
    history latents after every section, the final pixels and every input
    the Go side needs.

What differs from the demo, and why:
  * no Gradio, threads or stream queue; progress goes to stderr;
  * --memory high|low picks the demo's high-VRAM or low-VRAM branch instead
    of measuring free memory (free_mem_gb > 60);
  * in low-VRAM mode the LLaMA's hidden states are recorded by hooks of our
    own (HiddenStatesByHooks): under transformers 5 the DynamicSwap classes
    make the model return none;
  * --dtype float32 runs every model and the sampler in float32 (the golden
    run); --dtype released is the demo's dtypes;
  * --seed-vae-sample seeds torch before vae_encode and draws the
    posterior's noise from the CPU generator on any device (the demo draws
    it unseeded, on CUDA from the device's generator), so that a port can
    draw the same;
  * the MP4 is written with ffmpeg (rgb24 pipe, libx264, yuv420p, the
    demo's CRF): torchvision.io.write_video, which save_bcthw_as_mp4 calls,
    was removed from recent torchvision. The frames are converted exactly as
    save_bcthw_as_mp4 converts them. Like the demo, the video is written
    after every section;
  * resolutions other than 640 (FramePack only has the 640 list) use the
    640 buckets scaled by resolution/640, each side rounded to a multiple of
    32 (at least 32), as framepack's section.Buckets does;
  * a model folder without feature_extractor/ (the tiny model) gets a
    SiglipImageProcessor config like flux_redux_bfl's with the image
    encoder's image_size (or --feature-extractor-size);
  * a tokenizer/ folder without tokenizer_config.json (the tiny model) gets
    the real tokenizer's special tokens (bos <|begin_of_text|>,
    eos <|end_of_text|>, pad <pad>, right padding).

--variant f1 runs the section loop of demo_gradio_f1.py's worker() (the
stages before it are the same in both demos): history starts as 19 zero
frames and the start latent, each section reads its 4x/2x/1x context from
the end of the history with the indices [start, 4x, 2x, 1x, window], appends
its latents, decodes the last 2*lws and soft-appends them after the video.
Load --models/transformer with the F1 weights for a real run.

--end-image PATH is the end frame as kijai/ComfyUI-FramePackWrapper's
FramePackSampler.process (nodes.py, end_latent, end_image_embeds,
embed_interpolation, start_embed_strength) uses it, its sampling-loop logic
ported into this worker's loop (ComfyUI is not needed): the end image is
resized and center-cropped to the start image's bucket, VAE-encoded right
after the start image (the same global generator, not reseeded) and
SigLIP-encoded; in the first section generated its latent replaces
clean_latents_post; every section's image embedding is
start*frac + (1-frac)*end with frac = 1 - i/(S-1) (linear), start_embed_strength
(weighted_average), or start*start_embed_strength (disabled). The wrapper
returns latents only; decoding here stays the demo's per-section decode and
soft append. The wrapper also ignores history_latents' seed path differences
(none here): its noise is the same torch.Generator("cpu").manual_seed(seed).
"""

import argparse
import json
import os
import sys
import time


def process_start_time():
    """Wall-clock time at which this process started."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:
        pass
    with open("/proc/self/stat") as f:
        s = f.read()
    # Fields after "(comm)": index 0 is field 3 (state); starttime is field 22.
    start_ticks = int(s[s.rindex(")") + 2:].split()[19])
    btime = None
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime"):
                btime = int(line.split()[1])
                break
    return btime + start_ticks / os.sysconf("SC_CLK_TCK")


T_PROCESS = process_start_time()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framepack", required=True, help="FramePack checkout (its diffusers_helper is imported)")
    ap.add_argument("--models", required=True,
                    help="folder with transformer/ vae/ text_encoder/ text_encoder_2/ tokenizer/ tokenizer_2/ image_encoder/ [feature_extractor/]")
    ap.add_argument("--image", required=True)
    ap.add_argument("--prompt", default="")
    ap.add_argument("--n-prompt", default="")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--latent-window-size", type=int, default=9)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--steps-each", type=lambda v: [int(x) for x in v.split(",")], default=None,
                    help="run the job once for each of these step counts (comma-separated) with the models loaded once; "
                         "--record DIR then gets one folder steps_N per run, and stdout one JSON line per run")
    ap.add_argument("--cfg", type=float, default=1.0)
    ap.add_argument("--gs", type=float, default=10.0)
    ap.add_argument("--rs", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=31337)
    ap.add_argument("--teacache", choices=["on", "off"], default="on")
    ap.add_argument("--teacache-thresh", type=float, default=None,
                    help="TeaCache rel_l1_thresh (default: initialize_teacache's own, 0.15)")
    ap.add_argument("--gpu-memory-preservation", type=float, default=6.0, help="GB, the demo's slider (6)")
    ap.add_argument("--mp4-crf", type=int, default=16)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--dtype", choices=["float32", "released"], default="released")
    ap.add_argument("--memory", choices=["high", "low"], default="high")
    ap.add_argument("--resolution", type=int, default=640)
    ap.add_argument("--feature-extractor-size", type=int, default=0,
                    help="SigLIP input size when --models has no feature_extractor/ (default: image_encoder's image_size)")
    ap.add_argument("--seed-vae-sample", action="store_true",
                    help="seed torch's global generator with --seed right before vae_encode, so that the posterior sample "
                         "is torch.randn from a CPU generator seeded with the seed, on any device (the golden run and "
                         "bench compare; framepack's Generate draws it that way)")
    ap.add_argument("--variant", choices=["framepack", "f1"], default="framepack",
                    help="section loop: demo_gradio.py's (framepack) or demo_gradio_f1.py's (f1)")
    ap.add_argument("--end-image", default="", help="end frame (ComfyUI-FramePackWrapper's end_latent); framepack only")
    ap.add_argument("--embed-interpolation", choices=["disabled", "weighted_average", "linear"], default="disabled",
                    help="with --end-image: the wrapper's embed_interpolation")
    ap.add_argument("--start-embed-strength", type=float, default=1.0,
                    help="with --end-image: the wrapper's start_embed_strength")
    ap.add_argument("--record", default="", help="folder for record.safetensors + record.json (golden)")
    ap.add_argument("--out", default="", help="video.mp4 (none when empty)")
    ap.add_argument("--work", default="", help="folder for generated configs (default: --record, else a temporary folder)")
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------
# Imports of torch, transformers, diffusers and FramePack (after argparse, so
# that --help is instant).


def import_framepack(fp_path):
    """Imports FramePack's diffusers_helper from fp_path and returns a
    namespace of what the worker uses.

    diffusers_helper/utils.py imports cv2 and torchvision at module level but
    the worker only needs its pure-torch/PIL helpers; when either package is
    missing or fails to import, a placeholder module stands in for the import only and is taken
    out of sys.modules right after, so that transformers' and diffusers'
    availability checks never see it. diffusers_helper/memory.py asks CUDA for
    the current device at import, so it is imported only when CUDA exists.
    """
    import importlib
    import types

    fp_path = os.path.abspath(fp_path)
    if fp_path not in sys.path:
        sys.path.insert(0, fp_path)

    import torch  # noqa: F401
    # transformers and diffusers first, so that nothing of theirs is
    # imported while the placeholders are in sys.modules.
    from diffusers import AutoencoderKLHunyuanVideo  # noqa: F401
    transformers_classes()
    import diffusers.pipelines.hunyuan_video.pipeline_hunyuan_video  # noqa: F401  (hunyuan.py's import)

    placeholders = []
    for name in ("cv2", "torchvision"):
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            found = True
        except Exception:  # missing, or present but unusable (cv2 without libGL, a torchvision for another torch)
            sys.modules.pop(name, None)
            found = False
        if not found:
            m = types.ModuleType(name)
            m.__doc__ = "placeholder: %s is not installed; the worker does not call what needs it" % name
            if name == "torchvision":
                m.io = types.ModuleType("torchvision.io")
            sys.modules[name] = m
            placeholders.append(name)
    try:
        utils = importlib.import_module("diffusers_helper.utils")
    finally:
        for name in placeholders:
            sys.modules.pop(name, None)
    if placeholders:
        print("framepack_worker: %s not installed; placeholder used while importing diffusers_helper.utils"
              % ", ".join(placeholders), file=sys.stderr)

    ns = types.SimpleNamespace()
    ns.utils = utils
    ns.hunyuan = importlib.import_module("diffusers_helper.hunyuan")
    ns.packed = importlib.import_module("diffusers_helper.models.hunyuan_video_packed")
    ns.k_hunyuan = importlib.import_module("diffusers_helper.pipelines.k_diffusion_hunyuan")
    ns.clip_vision = importlib.import_module("diffusers_helper.clip_vision")
    ns.bucket_tools = importlib.import_module("diffusers_helper.bucket_tools")
    ns.memory = importlib.import_module("diffusers_helper.memory") if torch.cuda.is_available() else None
    return ns


def transformers_classes():
    """The transformers classes demo_gradio.py loads. transformers 5 keeps
    LlamaTokenizerFast as an alias of LlamaTokenizer; should an install lack
    the alias (or SiglipImageProcessor), the class it stands for is used."""
    import transformers

    from transformers import LlamaModel, CLIPTextModel, CLIPTokenizer, SiglipVisionModel

    tok = getattr(transformers, "LlamaTokenizerFast", None) or getattr(transformers, "LlamaTokenizer")
    proc = getattr(transformers, "SiglipImageProcessor", None) or getattr(transformers, "AutoImageProcessor")
    return LlamaModel, CLIPTextModel, tok, CLIPTokenizer, proc, SiglipVisionModel


def scaled_buckets(resolution, base):
    """framepack's section.Buckets: the 640 list scaled by resolution/640,
    each side rounded (half away from zero) to a multiple of 32, at least 32."""
    import math

    out = []
    for (h, w) in base:
        hh = max(int(math.floor(h * resolution / 640 / 32 + 0.5)) * 32, 32)
        ww = max(int(math.floor(w * resolution / 640 / 32 + 0.5)) * 32, 32)
        out.append((hh, ww))
    return out


FLUX_REDUX_PREPROCESSOR = {
    # lllyasviel/flux_redux_bfl feature_extractor/preprocessor_config.json,
    # the size set per model.
    "do_convert_rgb": None,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "SiglipImageProcessor",
    "image_std": [0.5, 0.5, 0.5],
    "processor_class": "SiglipProcessor",
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 384, "width": 384},
}

LLAMA_TOKENIZER_CONFIG = {
    # The special tokens of hunyuanvideo-community/HunyuanVideo tokenizer/.
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|end_of_text|>",
    "pad_token": "<pad>",
    "padding_side": "right",
    "add_bos_token": True,
    "add_eos_token": False,
    "clean_up_tokenization_spaces": False,
    "model_max_length": 131072,
    "tokenizer_class": "LlamaTokenizerFast",
}


def from_pretrained_dtype(cls, path, dtype):
    """from_pretrained with the dtype keyword of the installed library:
    transformers 5 renamed torch_dtype to dtype (an unknown keyword would be
    taken as a config override and silently ignored)."""
    import transformers

    if cls.__module__.startswith("transformers") and int(transformers.__version__.split(".")[0]) >= 5:
        return cls.from_pretrained(path, dtype=dtype)
    return cls.from_pretrained(path, torch_dtype=dtype)


# ----------------------------------------------------------------------------


class Timer:
    def __init__(self, device):
        import torch

        self.cuda = device.type == "cuda"
        self.torch = torch
        self.t = {}

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self):
        self.sync()
        return time.time()

    def add(self, key, t0):
        self.sync()
        self.t[key] = self.t.get(key, 0.0) + (time.time() - t0)

    def get(self, key):
        return self.t.get(key, 0.0)


def write_mp4(pixels_bcthw, path, fps, crf):
    """save_bcthw_as_mp4's frame conversion (clamp, ·127.5 + 127.5, to
    uint8, 't h w c' for one video), encoded by ffmpeg with libx264 at the
    given CRF. Returns False when ffmpeg is missing."""
    import shutil
    import subprocess

    import torch

    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        return False
    x = torch.clamp(pixels_bcthw.float(), -1.0, 1.0) * 127.5 + 127.5
    x = x.detach().cpu().to(torch.uint8)
    b, c, t, h, w = x.shape
    x = x[0].permute(1, 2, 3, 0).contiguous().numpy()  # t h w c
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp.mp4"
    cmd = [ffmpeg, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "%dx%d" % (w, h),
           "-r", str(fps), "-i", "-", "-c:v", "libx264", "-crf", str(int(crf)), "-pix_fmt", "yuv420p", tmp]
    r = subprocess.run(cmd, input=x.tobytes(), stderr=subprocess.PIPE)
    if r.returncode != 0:
        print("framepack_worker: ffmpeg failed (%d): %s" % (r.returncode, r.stderr.decode(errors="replace")[-500:]),
              file=sys.stderr)
        return False
    os.replace(tmp, path)
    return True


def run(args):
    """Loads the models and runs the worker. Returns (pixels, record dict of
    tensors or None, summary dict)."""
    return run_all(args)[0]


def run_all(args):
    """run() for each of --steps-each (or --steps alone), the models loaded
    once: a list of (pixels, record, summary)."""
    import numpy as np
    import torch
    from PIL import Image

    fp = import_framepack(args.framepack)
    from diffusers import AutoencoderKLHunyuanVideo
    LlamaModel, CLIPTextModel, LlamaTokenizerFast, CLIPTokenizer, SiglipImageProcessor, SiglipVisionModel = transformers_classes()

    encode_prompt_conds = fp.hunyuan.encode_prompt_conds
    vae_decode, vae_encode = fp.hunyuan.vae_decode, fp.hunyuan.vae_encode
    crop_or_pad_yield_mask = fp.utils.crop_or_pad_yield_mask
    soft_append_bcthw = fp.utils.soft_append_bcthw
    resize_and_center_crop = fp.utils.resize_and_center_crop
    HunyuanVideoTransformer3DModelPacked = fp.packed.HunyuanVideoTransformer3DModelPacked
    sample_hunyuan = fp.k_hunyuan.sample_hunyuan
    hf_clip_vision_encode = fp.clip_vision.hf_clip_vision_encode
    find_nearest_bucket = fp.bucket_tools.find_nearest_bucket

    golden = args.dtype == "float32"
    if golden:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    high_vram = args.memory == "high"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("framepack_worker: --device cuda but torch sees no CUDA device")
    if not high_vram and args.device != "cuda":
        raise SystemExit("framepack_worker: --memory low is FramePack's low-VRAM mode and needs --device cuda")
    gpu = torch.device("cuda:%d" % torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    cpu = torch.device("cpu")
    if gpu.type == "cuda":
        torch.cuda.reset_peak_memory_stats(gpu)
    tm = Timer(gpu)

    work = args.work or args.record
    if not work:
        import tempfile

        work = tempfile.mkdtemp(prefix="framepack-worker-")
    os.makedirs(work, exist_ok=True)

    models = os.path.abspath(args.models)
    sub = lambda name: os.path.join(models, name)  # noqa: E731

    # FramePack's buckets exist for 640 only; other resolutions as
    # framepack's section.Buckets scales them.
    if args.resolution not in fp.bucket_tools.bucket_options:
        fp.bucket_tools.bucket_options[args.resolution] = scaled_buckets(args.resolution, fp.bucket_tools.bucket_options[640])

    # ---- Loading, as demo_gradio.py does at module level.
    t0 = tm.start()
    tm.t["startup"] = t0 - T_PROCESS  # interpreter start and imports
    if golden:
        dt_te = dt_te2 = dt_vae = dt_img = dt_tr = torch.float32
    else:
        dt_te, dt_te2, dt_vae, dt_img, dt_tr = torch.float16, torch.float16, torch.float16, torch.float16, torch.bfloat16

    text_encoder = from_pretrained_dtype(LlamaModel, sub("text_encoder"), dt_te).cpu()
    text_encoder_2 = from_pretrained_dtype(CLIPTextModel, sub("text_encoder_2"), dt_te2).cpu()

    tok_dir = sub("tokenizer")
    tok_note = "tokenizer/ as given"
    if not os.path.exists(os.path.join(tok_dir, "tokenizer_config.json")):
        import shutil

        tok_dir = os.path.join(work, "tokenizer")
        os.makedirs(tok_dir, exist_ok=True)
        shutil.copyfile(os.path.join(sub("tokenizer"), "tokenizer.json"), os.path.join(tok_dir, "tokenizer.json"))
        with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
            json.dump(LLAMA_TOKENIZER_CONFIG, f, indent=2)
        tok_note = "tokenizer.json with a tokenizer_config.json giving the real tokenizer's special tokens"
    try:
        tokenizer = LlamaTokenizerFast.from_pretrained(tok_dir)
    except Exception as e:  # checked against tokenizer.json below, which stands in if need be
        print("framepack_worker: LlamaTokenizerFast.from_pretrained(%s) failed: %r" % (tok_dir, e), file=sys.stderr)
        tokenizer = None
    tokenizer_2 = CLIPTokenizer.from_pretrained(sub("tokenizer_2"))
    tokenizer, tok_info = check_llama_tokenizer(fp, tokenizer, tok_dir, args.prompt, count_crop_start=tok_dir != sub("tokenizer"))
    tok_info["tokenizer"] = tok_note
    vae = AutoencoderKLHunyuanVideo.from_pretrained(sub("vae"), torch_dtype=dt_vae).cpu()

    fe_dir = sub("feature_extractor")
    fe_note = "feature_extractor/ as given"
    if not os.path.isdir(fe_dir):
        size = args.feature_extractor_size
        if size <= 0:
            with open(os.path.join(sub("image_encoder"), "config.json")) as f:
                size = int(json.load(f)["image_size"])
        fe_dir = os.path.join(work, "feature_extractor")
        os.makedirs(fe_dir, exist_ok=True)
        cfg = dict(FLUX_REDUX_PREPROCESSOR)
        cfg["size"] = {"height": size, "width": size}
        with open(os.path.join(fe_dir, "preprocessor_config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        fe_note = "flux_redux_bfl's preprocessor_config.json at size %d" % size
    feature_extractor = SiglipImageProcessor.from_pretrained(fe_dir)
    image_encoder = from_pretrained_dtype(SiglipVisionModel, sub("image_encoder"), dt_img).cpu()
    transformer = HunyuanVideoTransformer3DModelPacked.from_pretrained(sub("transformer"), torch_dtype=dt_tr).cpu()

    vae.eval()
    text_encoder.eval()
    text_encoder_2.eval()
    image_encoder.eval()
    transformer.eval()

    if not high_vram:
        vae.enable_slicing()
        vae.enable_tiling()

    transformer.high_quality_fp32_output_for_inference = True

    transformer.to(dtype=dt_tr)
    vae.to(dtype=dt_vae)
    image_encoder.to(dtype=dt_img)
    text_encoder.to(dtype=dt_te)
    text_encoder_2.to(dtype=dt_te2)

    vae.requires_grad_(False)
    text_encoder.requires_grad_(False)
    text_encoder_2.requires_grad_(False)
    image_encoder.requires_grad_(False)
    transformer.requires_grad_(False)

    mem = fp.memory
    if not high_vram:
        # DynamicSwapInstaller is same as huggingface's enable_sequential_offload but 3x faster
        mem.DynamicSwapInstaller.install_model(transformer, device=gpu)
        mem.DynamicSwapInstaller.install_model(text_encoder, device=gpu)
    else:
        text_encoder.to(gpu)
        text_encoder_2.to(gpu)
        image_encoder.to(gpu)
        vae.to(gpu)
        transformer.to(gpu)
    tm.add("load", t0)

    # TeaCache accounting: transformer calls, and calls that ran the blocks
    # (the first double-stream block runs only when the step is computed).
    counts = {"calls": 0, "blocks": 0}

    def count_call(*_):
        counts["calls"] += 1

    def count_blocks(*_):
        counts["blocks"] += 1

    transformer.register_forward_pre_hook(count_call)
    transformer.transformer_blocks[0].register_forward_pre_hook(count_blocks)

    input_image = np.array(Image.open(args.image).convert("RGB"))
    if args.end_image and args.variant != "framepack":
        raise SystemExit("framepack_worker: --end-image is for --variant framepack")
    end_image = np.array(Image.open(args.end_image).convert("RGB")) if args.end_image else None
    results = []
    for i, steps in enumerate(args.steps_each or [args.steps]):
        # --steps-each: the same job again with other steps, the models
        # loaded once; each run's times are its own (the first's include
        # the start-up and the load).
        args.steps = steps
        if i > 0:
            tm.t = {}
        t_run = time.time()
        rec = {} if args.record else None
        info = {}

        info["tokenizer"] = tok_info
        info["feature_extractor"] = fe_note
        if rec is not None:
            rec.update(token_ids(fp, tokenizer, tokenizer_2, args.prompt))

        with torch.no_grad():
            out = worker(locals_ns(), input_image, args, rec, info, end_image)
        info["times"] = dict(tm.t)
        info["run_s"] = time.time() - (T_PROCESS if i == 0 else t_run)
        info["steps"] = steps
        results.append((out, rec, info))
    return results


def check_llama_tokenizer(fp, tokenizer, tok_dir, prompt, count_crop_start):
    """Checks the LLaMA tokenizer against the plain tokenizer.json pipeline
    (what the fast tokenizer ran in transformers 4.x, and what framepack
    implements), and the template's crop_start against the tokenizer.

    crop_start: diffusers' DEFAULT_PROMPT_TEMPLATE hard-codes 95, the number
    of tokens (BOS included) the template puts before the prompt under the
    real tokenizer; encode_prompt_conds slices hidden_states[-3] there and
    pads to 256 + crop_start. Under another tokenizer (the tiny model's) the
    prefix has another length: with count_crop_start, it is counted (as
    framepack counts it) and set in the template encode_prompt_conds reads.

    Shim: a tokenizer that disagrees with tokenizer.json is replaced by a
    PreTrainedTokenizerFast over that tokenizer.json with the same special
    tokens, and the substitution is reported. transformers 5 turned
    LlamaTokenizerFast into LlamaTokenizer, whose class defines its own
    pipeline (SentencePiece-style Metaspace), where transformers 4.46 (which
    FramePack pins) ran the tokenizer.json of the Llama-3-based text encoder
    as written."""
    from tokenizers import Tokenizer

    info = {}
    tmpl = fp.hunyuan.DEFAULT_PROMPT_TEMPLATE
    text = tmpl["template"].format(prompt)
    raw = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    got = list(tokenizer(text)["input_ids"]) if tokenizer is not None else []
    want = list(raw.encode(text).ids)
    info["matches_tokenizer_json"] = got == want
    if got != want:
        msg = ("framepack_worker: LlamaTokenizerFast gives %d ids for the templated prompt, tokenizer.json's own "
               "pipeline %d (first difference at %s)" % (len(got), len(want),
                                                          next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))))
        print(msg, file=sys.stderr)
        from transformers import PreTrainedTokenizerFast

        tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token=LLAMA_TOKENIZER_CONFIG["bos_token"],
                                            eos_token=LLAMA_TOKENIZER_CONFIG["eos_token"],
                                            pad_token=LLAMA_TOKENIZER_CONFIG["pad_token"], padding_side="right")
        again = list(tokenizer(text)["input_ids"])
        if again != want:
            raise SystemExit(msg + "; PreTrainedTokenizerFast over tokenizer.json does not match either")
        info["substituted"] = "PreTrainedTokenizerFast(tokenizer_object=tokenizer.json)"
        print("framepack_worker: using PreTrainedTokenizerFast over tokenizer.json instead", file=sys.stderr)
    prefix = tmpl["template"].split("{}")[0]
    n = len(tokenizer(prefix)["input_ids"])
    info["template_crop_start"] = tmpl["crop_start"]
    info["prefix_tokens"] = n
    info["crop_start"] = tmpl["crop_start"]
    if n != tmpl["crop_start"]:
        print("framepack_worker: the template's prefix is %d tokens under this tokenizer; DEFAULT_PROMPT_TEMPLATE "
              "says crop_start %d%s" % (n, tmpl["crop_start"], " (using %d)" % n if count_crop_start else ""), file=sys.stderr)
        if count_crop_start:
            fp.hunyuan.DEFAULT_PROMPT_TEMPLATE = dict(tmpl, crop_start=n)
            info["crop_start"] = n
    return tokenizer, info


def token_ids(fp, tokenizer, tokenizer_2, prompt):
    """The ids encode_prompt_conds feeds the two text encoders (same
    tokenizer calls): the LLaMA ids up to the attention length, and CLIP's 77."""
    import torch

    tmpl = fp.hunyuan.DEFAULT_PROMPT_TEMPLATE
    crop_start = tmpl["crop_start"]
    li = tokenizer([tmpl["template"].format(prompt)], padding="max_length", max_length=256 + crop_start,
                   truncation=True, return_tensors="pt", return_length=False, return_overflowing_tokens=False,
                   return_attention_mask=True)
    n = int(li.attention_mask.sum())
    ci = tokenizer_2([prompt], padding="max_length", max_length=77, truncation=True, return_overflowing_tokens=False,
                     return_length=False, return_tensors="pt").input_ids
    return {"llama_input_ids": li.input_ids[:, :n].to(torch.int64).contiguous(),
            "clip_input_ids": ci.to(torch.int64).contiguous()}


def locals_ns():
    """The caller's locals as a namespace (the worker reads the models and
    helpers the way demo_gradio.py's worker reads its module globals)."""
    import inspect
    import types

    return types.SimpleNamespace(**inspect.currentframe().f_back.f_locals)


def worker(g, input_image, args, rec, info, end_image=None):
    import numpy as np
    import torch

    prompt, n_prompt, seed = args.prompt, args.n_prompt, args.seed
    total_second_length, latent_window_size, steps = args.seconds, args.latent_window_size, args.steps
    cfg, gs, rs = args.cfg, args.gs, args.rs
    high_vram, gpu, tm, mem = g.high_vram, g.gpu, g.tm, g.mem
    text_encoder, text_encoder_2, tokenizer, tokenizer_2 = g.text_encoder, g.text_encoder_2, g.tokenizer, g.tokenizer_2
    vae, feature_extractor, image_encoder, transformer = g.vae, g.feature_extractor, g.image_encoder, g.transformer
    sample_dtype = torch.float32 if g.golden else torch.bfloat16

    total_latent_sections = (total_second_length * 30) / (latent_window_size * 4)
    total_latent_sections = int(max(round(total_latent_sections), 1))

    # Clean GPU
    if not high_vram:
        mem.unload_complete_models(text_encoder, text_encoder_2, image_encoder, vae, transformer)

    # Text encoding
    t0 = tm.start()
    if not high_vram:
        mem.fake_diffusers_current_device(text_encoder, gpu)  # since we only encode one text - that is one model move and one encode, offload is same time consumption since it is also one load and one encode.
        mem.load_model_as_complete(text_encoder_2, target_device=gpu)

    te = text_encoder if high_vram else HiddenStatesByHooks(text_encoder)
    llama_vec, clip_l_pooler = g.encode_prompt_conds(prompt, te, text_encoder_2, tokenizer, tokenizer_2)

    if cfg == 1:
        llama_vec_n, clip_l_pooler_n = torch.zeros_like(llama_vec), torch.zeros_like(clip_l_pooler)
    else:
        llama_vec_n, clip_l_pooler_n = g.encode_prompt_conds(n_prompt, te, text_encoder_2, tokenizer, tokenizer_2)

    if rec is not None:
        rec["llama_vec"] = llama_vec.float().cpu()
        rec["clip_l_pooler"] = clip_l_pooler.float().cpu()

    llama_vec, llama_attention_mask = g.crop_or_pad_yield_mask(llama_vec, length=512)
    llama_vec_n, llama_attention_mask_n = g.crop_or_pad_yield_mask(llama_vec_n, length=512)
    tm.add("text", t0)

    # Processing input image
    t0 = tm.start()
    H, W, C = input_image.shape
    height, width = g.find_nearest_bucket(H, W, resolution=args.resolution)
    input_image_np = g.resize_and_center_crop(input_image, target_width=width, target_height=height)

    input_image_pt = torch.from_numpy(input_image_np).float() / 127.5 - 1
    input_image_pt = input_image_pt.permute(2, 0, 1)[None, :, None]

    # VAE encoding
    if not high_vram:
        mem.load_model_as_complete(vae, target_device=gpu)

    import contextlib

    noise = contextlib.nullcontext()
    if args.seed_vae_sample:
        # latent_dist.sample() draws torch.randn from the global generator
        # of the VAE's device; seeded here so a port can reproduce it. On
        # CUDA that is the device's own generator, which no port draws
        # alike: the noise is drawn from the seeded CPU generator instead
        # (in f32, then cast), as the CPU run draws it.
        torch.manual_seed(seed)
        noise = cpu_posterior_noise()
    with noise:
        start_latent = g.vae_encode(input_image_pt, vae)
    has_end_image = end_image is not None
    if has_end_image:
        # The end frame at the start image's bucket, encoded right after it.
        end_image_np = g.resize_and_center_crop(end_image, target_width=width, target_height=height)
        end_image_pt = (torch.from_numpy(end_image_np).float() / 127.5 - 1).permute(2, 0, 1)[None, :, None]
        with noise:
            end_latent = g.vae_encode(end_image_pt, vae)

    # CLIP Vision
    if not high_vram:
        mem.load_model_as_complete(image_encoder, target_device=gpu)

    image_encoder_output = g.hf_clip_vision_encode(input_image_np, feature_extractor, image_encoder)
    image_encoder_last_hidden_state = image_encoder_output.last_hidden_state
    if has_end_image:
        end_image_encoder_last_hidden_state = g.hf_clip_vision_encode(end_image_np, feature_extractor, image_encoder).last_hidden_state
    tm.add("image", t0)

    if rec is not None:
        rec["image"] = torch.from_numpy(np.ascontiguousarray(input_image)).to(torch.uint8)
        rec["image_cropped"] = torch.from_numpy(np.ascontiguousarray(input_image_np)).to(torch.uint8)
        rec["start_latent"] = start_latent.float().cpu()
        rec["image_embeddings"] = image_encoder_last_hidden_state.float().cpu()
        if has_end_image:
            rec["end_image"] = torch.from_numpy(np.ascontiguousarray(end_image)).to(torch.uint8)
            rec["end_image_cropped"] = torch.from_numpy(np.ascontiguousarray(end_image_np)).to(torch.uint8)
            rec["end_latent"] = end_latent.float().cpu()
            rec["end_image_embeddings"] = end_image_encoder_last_hidden_state.float().cpu()
    info.update(width=width, height=height, sections=total_latent_sections)

    # Dtype
    llama_vec = llama_vec.to(transformer.dtype)
    llama_vec_n = llama_vec_n.to(transformer.dtype)
    clip_l_pooler = clip_l_pooler.to(transformer.dtype)
    clip_l_pooler_n = clip_l_pooler_n.to(transformer.dtype)
    image_encoder_last_hidden_state = image_encoder_last_hidden_state.to(transformer.dtype)
    start_image_encoder_last_hidden_state = image_encoder_last_hidden_state
    if has_end_image:
        end_image_encoder_last_hidden_state = end_image_encoder_last_hidden_state.to(transformer.dtype)

    # Sampling
    rnd = torch.Generator("cpu").manual_seed(seed)

    sample_kwargs = dict(
        transformer=transformer, sampler='unipc', width=width, height=height, frames=latent_window_size * 4 - 3,
        real_guidance_scale=cfg, distilled_guidance_scale=gs, guidance_rescale=rs, num_inference_steps=steps,
        generator=rnd, prompt_embeds=llama_vec, prompt_embeds_mask=llama_attention_mask, prompt_poolers=clip_l_pooler,
        negative_prompt_embeds=llama_vec_n, negative_prompt_embeds_mask=llama_attention_mask_n,
        negative_prompt_poolers=clip_l_pooler_n, device=gpu, dtype=sample_dtype)
    if args.variant == "f1":
        return worker_f1_sections(g, args, rec, info, start_latent, image_encoder_last_hidden_state, sample_kwargs,
                                  total_latent_sections, height, width)

    history_latents = torch.zeros(size=(1, 16, 1 + 2 + 16, height // 8, width // 8), dtype=torch.float32).cpu()
    history_pixels = None
    total_generated_latent_frames = 0

    latent_paddings = reversed(range(total_latent_sections))

    if total_latent_sections > 4:
        # In theory the latent_paddings should follow the above sequence, but it seems that duplicating some
        # items looks better than expanding it when total_latent_sections > 4
        latent_paddings = [3] + [2] * (total_latent_sections - 3) + [1, 0]

    section = 0
    sections = Sections(g, args, rec)
    latent_paddings = list(latent_paddings)
    for i, latent_padding in enumerate(latent_paddings):
        section += 1
        is_last_section = latent_padding == 0
        latent_padding_size = latent_padding * latent_window_size
        is_first_section = latent_padding == latent_paddings[0]

        if has_end_image:
            # ComfyUI-FramePackWrapper's embed_interpolation.
            if args.embed_interpolation != "disabled":
                if args.embed_interpolation == "linear":
                    if total_latent_sections <= 1:
                        frac = 1.0
                    else:
                        frac = 1 - i / (total_latent_sections - 1)
                else:
                    frac = args.start_embed_strength
                image_encoder_last_hidden_state = start_image_encoder_last_hidden_state * frac + (1 - frac) * end_image_encoder_last_hidden_state
            else:
                image_encoder_last_hidden_state = start_image_encoder_last_hidden_state * args.start_embed_strength

        print(f'latent_padding_size = {latent_padding_size}, is_last_section = {is_last_section}', file=sys.stderr)

        indices = torch.arange(0, sum([1, latent_padding_size, latent_window_size, 1, 2, 16])).unsqueeze(0)
        clean_latent_indices_pre, blank_indices, latent_indices, clean_latent_indices_post, clean_latent_2x_indices, clean_latent_4x_indices = indices.split([1, latent_padding_size, latent_window_size, 1, 2, 16], dim=1)
        clean_latent_indices = torch.cat([clean_latent_indices_pre, clean_latent_indices_post], dim=1)

        clean_latents_pre = start_latent.to(history_latents)
        clean_latents_post, clean_latents_2x, clean_latents_4x = history_latents[:, :, :1 + 2 + 16, :, :].split([1, 2, 16], dim=2)
        clean_latents = torch.cat([clean_latents_pre, clean_latents_post], dim=2)

        if has_end_image and is_first_section:
            # The wrapper: the end latent is the first section's clean_latents_post.
            clean_latents_post = end_latent.to(history_latents)
            clean_latents = torch.cat([clean_latents_pre, clean_latents_post], dim=2)

        prepare_section(g, args)
        generated_latents, calls, blocks = sample_section(
            g, sample_kwargs, section, total_latent_sections, image_encoder_last_hidden_state, latent_indices,
            clean_latents, clean_latent_indices, clean_latents_2x, clean_latent_2x_indices, clean_latents_4x,
            clean_latent_4x_indices)

        if is_last_section:
            generated_latents = torch.cat([start_latent.to(generated_latents), generated_latents], dim=2)

        total_generated_latent_frames += int(generated_latents.shape[2])
        history_latents = torch.cat([generated_latents.to(history_latents), history_latents], dim=2)

        real_history_latents = history_latents[:, :, :total_generated_latent_frames, :, :]

        def decode(history_pixels):
            if history_pixels is None:
                return g.vae_decode(real_history_latents, vae).cpu()
            section_latent_frames = (latent_window_size * 2 + 1) if is_last_section else (latent_window_size * 2)
            overlapped_frames = latent_window_size * 4 - 3

            current_pixels = g.vae_decode(real_history_latents[:, :, :section_latent_frames], vae).cpu()
            return g.soft_append_bcthw(current_pixels, history_pixels, overlapped_frames)

        history_pixels = decode_section(g, decode, history_pixels)
        sections.done(section, latent_padding, is_last_section, generated_latents, real_history_latents,
                      total_generated_latent_frames, history_pixels, calls, blocks)

        if is_last_section:
            break

    return sections.finish(info, history_pixels)


class cpu_posterior_noise:
    """While active, DiagonalGaussianDistribution.sample() without a
    generator draws its noise from torch's global CPU generator in float32
    and moves it to the VAE's device and dtype: on the CPU in float32 the
    same numbers as without it, on CUDA the numbers a CPU run draws (the
    CUDA generator's stream is the device's own)."""

    def __enter__(self):
        import torch
        from diffusers.models.autoencoders import vae as vae_module

        self.module, self.orig = vae_module, vae_module.randn_tensor

        def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
            if generator is not None:
                return self.orig(shape, generator=generator, device=device, dtype=dtype, layout=layout)
            return torch.randn(shape, dtype=torch.float32).to(device=device, dtype=dtype)

        vae_module.randn_tensor = randn_tensor
        return self

    def __exit__(self, *exc):
        self.module.randn_tensor = self.orig
        return False


class HiddenStatesByHooks:
    """The LLaMA text encoder as encode_prompt_conds calls it, its
    hidden_states recorded by forward hooks of our own. transformers 5 records
    hidden states with hooks chosen by layer class; the low-VRAM mode's
    DynamicSwapInstaller swaps every module's class for a subclass of its own,
    and the model then returns hidden_states=None. The tuple is LlamaModel's
    order: the embeddings, each layer's output but the last, the final norm's
    output. Nothing else changes: the same weights, swapped the same way."""

    def __init__(self, model):
        self.model = model

    @property
    def device(self):
        return self.model.device

    def __call__(self, **kw):
        outs = []

        def keep(_module, _inputs, out):
            outs.append(out[0] if isinstance(out, tuple) else out)

        hooks = [self.model.embed_tokens.register_forward_hook(keep)]
        hooks += [layer.register_forward_hook(keep) for layer in self.model.layers]
        try:
            r = self.model(**kw)
        finally:
            for h in hooks:
                h.remove()
        if r.hidden_states is None:
            r.hidden_states = tuple(outs[:-1]) + (r.last_hidden_state,)
        return r


def main(argv=None):
    args = parse_args(argv)
    runs = run_all(args)
    lines = []
    for _, rec, info in runs:
        lines.append(report(args, rec, info))
    return lines[-1]


def report(args, rec, info):
    """Prints one run's JSON line (and saves its record with --record)."""
    import resource

    import torch

    args.steps = info["steps"]
    g = info
    dev = "cpu"
    peak = None
    peak_reserved = None
    if args.device == "cuda":
        dev = torch.cuda.get_device_name()
        peak = torch.cuda.max_memory_allocated() / 2 ** 30
        peak_reserved = torch.cuda.max_memory_reserved() / 2 ** 30
    times = info["times"]
    steps_total = args.steps * len(g["sections_info"])
    line = {
        "bench": "generate", "impl": "framepack-ref",
        "mode": "highvram" if args.memory == "high" else "lowvram",
        "teacache": args.teacache == "on", "dtype": args.dtype,
        "seconds": args.seconds, "width": g["width"], "height": g["height"], "frames": g["frames"],
        "sections": len(g["sections_info"]), "steps": args.steps,
        "total_s": info["run_s"],
        "startup_s": times.get("startup", 0.0), "load_s": times.get("load", 0.0), "text_s": times.get("text", 0.0), "image_s": times.get("image", 0.0),
        "sample_s": times.get("sample", 0.0),
        "sample_s_per_step": times.get("sample", 0.0) / max(steps_total, 1),
        "transformer_move_s": times.get("transformer_move", 0.0),
        "decode_s": times.get("decode", 0.0), "write_s": times.get("write", 0.0), "writes": g["writes"],
        "teacache_skipped": sum(s["teacache_skipped"] for s in g["sections_info"]),
        "device_peak_gib": peak, "device_peak_kind": "torch.cuda.max_memory_allocated",
        "device_peak_reserved_gib": peak_reserved,
        "rss_peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20,
        "device": dev,
    }
    if args.record:
        record = args.record
        if args.steps_each:
            args.record = os.path.join(record, "steps_%d" % args.steps)
        save_record(args, rec, info)
        args.record = record
    print(json.dumps(line), flush=True)
    return line


def save_record(args, rec, info):
    """record.safetensors (the tensors) and record.json (the settings and
    per-section facts) in args.record."""
    from safetensors.torch import save_file

    os.makedirs(args.record, exist_ok=True)
    # Own copies: safetensors refuses tensors that share memory (an image
    # already at its bucket size is its own crop).
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in rec.items()}, os.path.join(args.record, "record.safetensors"))
    meta = {
        "prompt": args.prompt, "n_prompt": args.n_prompt, "seed": args.seed, "seconds": args.seconds,
        "latent_window_size": args.latent_window_size, "steps": args.steps, "cfg": args.cfg, "gs": args.gs,
        "rs": args.rs, "teacache": args.teacache == "on", "teacache_rel_l1_thresh": args.teacache_thresh,
        "resolution": args.resolution, "dtype": args.dtype, "device": args.device, "memory": args.memory,
        "seed_vae_sample": args.seed_vae_sample,
    }
    meta.update({k: v for k, v in info.items() if k not in ("times", "run_s")})
    with open(os.path.join(args.record, "record.json"), "w") as f:
        json.dump(meta, f, indent=2)




def worker_f1_sections(g, args, rec, info, start_latent, image_encoder_last_hidden_state, sample_kwargs,
                       total_latent_sections, height, width):
    """demo_gradio_f1.py's section loop (after the same stages as demo_gradio.py)."""
    import torch

    latent_window_size = args.latent_window_size
    vae = g.vae

    history_latents = torch.zeros(size=(1, 16, 16 + 2 + 1, height // 8, width // 8), dtype=torch.float32).cpu()
    history_pixels = None

    history_latents = torch.cat([history_latents, start_latent.to(history_latents)], dim=2)
    total_generated_latent_frames = 1

    sections = Sections(g, args, rec)
    for section_index in range(total_latent_sections):
        section = section_index + 1
        print(f'section_index = {section_index}, total_latent_sections = {total_latent_sections}', file=sys.stderr)

        prepare_section(g, args)

        indices = torch.arange(0, sum([1, 16, 2, 1, latent_window_size])).unsqueeze(0)
        clean_latent_indices_start, clean_latent_4x_indices, clean_latent_2x_indices, clean_latent_1x_indices, latent_indices = indices.split([1, 16, 2, 1, latent_window_size], dim=1)
        clean_latent_indices = torch.cat([clean_latent_indices_start, clean_latent_1x_indices], dim=1)

        clean_latents_4x, clean_latents_2x, clean_latents_1x = history_latents[:, :, -sum([16, 2, 1]):, :, :].split([16, 2, 1], dim=2)
        clean_latents = torch.cat([start_latent.to(history_latents), clean_latents_1x], dim=2)

        generated_latents, calls, blocks = sample_section(
            g, sample_kwargs, section, total_latent_sections, image_encoder_last_hidden_state, latent_indices,
            clean_latents, clean_latent_indices, clean_latents_2x, clean_latent_2x_indices, clean_latents_4x,
            clean_latent_4x_indices)

        total_generated_latent_frames += int(generated_latents.shape[2])
        history_latents = torch.cat([history_latents, generated_latents.to(history_latents)], dim=2)

        real_history_latents = history_latents[:, :, -total_generated_latent_frames:, :, :]

        def decode(history_pixels):
            if history_pixels is None:
                return g.vae_decode(real_history_latents, vae).cpu()
            section_latent_frames = latent_window_size * 2
            overlapped_frames = latent_window_size * 4 - 3

            current_pixels = g.vae_decode(real_history_latents[:, :, -section_latent_frames:], vae).cpu()
            return g.soft_append_bcthw(history_pixels, current_pixels, overlapped_frames)

        history_pixels = decode_section(g, decode, history_pixels)
        sections.done(section, 0, section == total_latent_sections, generated_latents, real_history_latents,
                      total_generated_latent_frames, history_pixels, calls, blocks)

    return sections.finish(info, history_pixels)


def prepare_section(g, args):
    """What both demos do before a section's sampling: the transformer moved
    onto the GPU (low-VRAM mode) and TeaCache set up for the section."""
    t0 = g.tm.start()
    if not g.high_vram:
        g.mem.unload_complete_models()
        g.mem.move_model_to_device_with_memory_preservation(g.transformer, target_device=g.gpu, preserved_memory_gb=args.gpu_memory_preservation)
    g.tm.add("transformer_move", t0)

    if args.teacache == "on":
        if args.teacache_thresh is None:
            g.transformer.initialize_teacache(enable_teacache=True, num_steps=args.steps)
        else:
            g.transformer.initialize_teacache(enable_teacache=True, num_steps=args.steps, rel_l1_thresh=args.teacache_thresh)
    else:
        g.transformer.initialize_teacache(enable_teacache=False)


def sample_section(g, sample_kwargs, section, total_latent_sections, image_embeddings, latent_indices,
                   clean_latents, clean_latent_indices, clean_latents_2x, clean_latent_2x_indices, clean_latents_4x,
                   clean_latent_4x_indices):
    """A section's sample_hunyuan call, timed, with the transformer's calls
    and block runs (the difference is what TeaCache skipped)."""
    steps = sample_kwargs["num_inference_steps"]

    def callback(d):
        print(f'section {section}/{total_latent_sections} step {d["i"] + 1}/{steps}', file=sys.stderr)

    g.counts["calls"] = g.counts["blocks"] = 0
    t0 = g.tm.start()
    generated_latents = g.sample_hunyuan(
        **sample_kwargs,
        image_embeddings=image_embeddings,
        latent_indices=latent_indices,
        clean_latents=clean_latents,
        clean_latent_indices=clean_latent_indices,
        clean_latents_2x=clean_latents_2x,
        clean_latent_2x_indices=clean_latent_2x_indices,
        clean_latents_4x=clean_latents_4x,
        clean_latent_4x_indices=clean_latent_4x_indices,
        callback=callback,
    )
    g.tm.add("sample", t0)
    return generated_latents, g.counts["calls"], g.counts["blocks"]


def decode_section(g, decode, history_pixels):
    """decode(history_pixels) with the VAE on the GPU as both demos have it
    (low-VRAM mode: the transformer offloaded first, everything unloaded
    after), timed as "decode"."""
    t0 = g.tm.start()
    if not g.high_vram:
        g.mem.offload_model_from_device_for_memory_preservation(g.transformer, target_device=g.gpu, preserved_memory_gb=8)
        g.mem.load_model_as_complete(g.vae, target_device=g.gpu)
    history_pixels = decode(history_pixels)
    if not g.high_vram:
        g.mem.unload_complete_models()
    g.tm.add("decode", t0)
    return history_pixels


class Sections:
    """What the section loops keep: each section's latents in the record,
    its line of sections_info, and the video so far written after it."""

    def __init__(self, g, args, rec):
        self.g, self.args, self.rec = g, args, rec
        self.info, self.writes = [], 0

    def done(self, section, latent_padding, is_last_section, generated_latents, real_history_latents,
             total_generated_latent_frames, history_pixels, calls, blocks):
        args, rec, use_teacache = self.args, self.rec, self.args.teacache == "on"
        if rec is not None:
            rec[f"generated_latents_section_{section}"] = generated_latents.float().cpu().contiguous()
            rec[f"history_latents_section_{section}"] = real_history_latents.float().cpu().contiguous()
        self.info.append({
            "section": section, "latent_padding": latent_padding, "is_last_section": is_last_section,
            "latent_frames": int(generated_latents.shape[2]), "total_generated_latent_frames": total_generated_latent_frames,
            "pixel_frames": int(history_pixels.shape[2]),
            "transformer_calls": calls, "transformer_block_calls": blocks,
            "teacache_computed": blocks if use_teacache else 0,
            "teacache_skipped": (calls - blocks) if use_teacache else 0,
        })

        if args.out:
            t0 = self.g.tm.start()
            if write_mp4(history_pixels, args.out, fps=30, crf=args.mp4_crf):
                self.writes += 1
            self.g.tm.add("write", t0)

        print(f'Decoded. Current latent shape {real_history_latents.shape}; pixel shape {history_pixels.shape}', file=sys.stderr)

    def finish(self, info, history_pixels):
        """The record's pixels and the summary's sections; the video."""
        if self.rec is not None:
            self.rec["pixels"] = history_pixels.float().cpu().contiguous()
        info.update(frames=int(history_pixels.shape[2]), sections_info=self.info, writes=self.writes,
                    latent_paddings=[s["latent_padding"] for s in self.info])
        return history_pixels


if __name__ == "__main__":
    main()
