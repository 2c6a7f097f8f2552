"""Check that FramePack's own loaders read a model folder that
`framepack bench make-models` wrote.

Loads every component of DIR the way FramePack's demo_gradio.py does
(LlamaModel, CLIPTextModel, LlamaTokenizerFast, CLIPTokenizer,
AutoencoderKLHunyuanVideo, SiglipImageProcessor, SiglipVisionModel,
HunyuanVideoTransformer3DModelPacked), with output_loading_info so that a
missing, unexpected or misshapen key fails, checks the dtypes on disk and,
with --forward, runs each model once on the GPU and checks the output is
finite. Prints one line per component and exits 1 if any check failed.

    PYTHONPATH=/path/to/diffusers/src python3 check_from_pretrained.py \
        --models /tmp/fp --framepack /path/to/FramePack [--forward]
"""
import argparse
import gc
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

FAILED = []


def report(name, ok, detail):
    print(f"{name:18s} {'ok  ' if ok else 'FAIL'} {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def disk_dtypes(folder):
    """How many tensors of each dtype the folder's safetensors files hold
    (read from the headers, as written)."""
    import struct

    seen = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                hdr = json.loads(fh.read(n))
            for k, v in hdr.items():
                if k != "__metadata__":
                    seen[v["dtype"]] = seen.get(v["dtype"], 0) + 1
    return seen


def loading_problems(info):
    """The non-empty lists of a from_pretrained loading-info dict (the first
    five entries of each and their count)."""
    out = {}
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = list(info.get(k) or []) if isinstance(info, dict) else []
        if v:
            out[k] = [str(x) for x in sorted(v, key=str)[:5]]
            out[k + "_count"] = len(v)
    return out


def load(name, folder, want_dtype, loader, forward, args):
    t0 = time.perf_counter()
    try:
        model, info = loader()
    except Exception as e:
        traceback.print_exc()
        report(name, False, f"from_pretrained failed: {type(e).__name__}: {e}")
        return
    secs = time.perf_counter() - t0
    problems = loading_problems(info)
    dtypes = disk_dtypes(folder)
    ok = not problems and set(dtypes) == {want_dtype}
    n = sum(p.numel() for p in model.parameters())
    detail = f"{n / 1e9:.3f} B params, on disk {dtypes}, loaded in {secs:.1f} s"
    if problems:
        detail += f", loading problems {json.dumps(problems)}"
    if set(dtypes) != {want_dtype}:
        detail += f", want every tensor {want_dtype}"
    if ok and args.forward:
        try:
            with torch.no_grad():
                detail += ", forward: " + forward(model)
        except Exception as e:
            traceback.print_exc()
            ok = False
            detail += f", forward failed: {type(e).__name__}: {e}"
    report(name, ok, detail)
    del model
    gc.collect()
    torch.cuda.empty_cache()


def finite(name, t):
    t = t.float()
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} has {int((~torch.isfinite(t)).sum())} non-finite values")
    return f"{name} {tuple(t.shape)} finite, std {t.std().item():.3g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="the folder bench make-models wrote")
    ap.add_argument("--framepack", required=True, help="a FramePack checkout (for diffusers_helper)")
    ap.add_argument("--forward", action="store_true", help="also run each model once on the GPU")
    args = ap.parse_args()
    sys.path.insert(0, args.framepack)

    import transformers
    import diffusers
    from diffusers import AutoencoderKLHunyuanVideo
    from transformers import (CLIPTextModel, CLIPTokenizer, LlamaModel, LlamaTokenizerFast,
                              SiglipImageProcessor, SiglipVisionModel)
    from diffusers_helper.models.hunyuan_video_packed import HunyuanVideoTransformer3DModelPacked
    from diffusers_helper.hunyuan import encode_prompt_conds
    from diffusers_helper.clip_vision import hf_clip_vision_encode
    from diffusers_helper.utils import crop_or_pad_yield_mask

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, diffusers {diffusers.__version__}", flush=True)
    d = args.models
    dev = "cuda"
    sub = lambda s: os.path.join(d, s)

    # Tokenizers: the template prefix must be FramePack's crop_start (95)
    # tokens, starting with <|begin_of_text|> 128000, <|start_header_id|> 128006.
    # tokenizer.json as written (PreTrainedTokenizerFast) decides ok; FramePack's
    # LlamaTokenizerFast is reported beside it, because some transformers 5.x
    # releases rebuild it with a Metaspace pre-tokenizer whatever tokenizer.json
    # says, which changes the ids of any byte-level (LLaMA-3) tokenizer, the real
    # one included.
    from diffusers_helper.hunyuan import DEFAULT_PROMPT_TEMPLATE
    from transformers import PreTrainedTokenizerFast
    prefix = DEFAULT_PROMPT_TEMPLATE["template"].split("{}")[0]
    want = {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|start_header_id|>": 128006,
            "<|end_header_id|>": 128007, "<|eot_id|>": 128009}

    def check_llama(cls):
        t = cls.from_pretrained(d, subfolder="tokenizer")
        ids = t(prefix).input_ids
        full = t(DEFAULT_PROMPT_TEMPLATE["template"].format("The girl dances gracefully."), padding="max_length",
                 max_length=256 + 95, truncation=True).input_ids
        got = {k: t.convert_tokens_to_ids(k) for k in want}
        ok = len(ids) == DEFAULT_PROMPT_TEMPLATE["crop_start"] and ids[:2] == [128000, 128006] and got == want \
            and max(full) < 128320 and len(full) == 351
        return t, ok, (f"{type(t).__name__}: template prefix {len(ids)} tokens (crop_start "
                       f"{DEFAULT_PROMPT_TEMPLATE['crop_start']}), first {ids[:4]}, specials {got}, padded prompt {len(full)} ids, max {max(full)}")

    tok = None
    try:
        tok, ok, detail = check_llama(PreTrainedTokenizerFast)
        try:
            _, ok2, detail2 = check_llama(LlamaTokenizerFast)
            detail += "; " + detail2 + ("" if ok2 else " (differs: this transformers' LlamaTokenizerFast does not follow tokenizer.json)")
        except Exception as e:
            detail += f"; LlamaTokenizerFast failed: {type(e).__name__}: {e}"
        report("tokenizer", ok, detail)
    except Exception as e:
        traceback.print_exc()
        report("tokenizer", False, f"{type(e).__name__}: {e}")
    try:
        tok2 = CLIPTokenizer.from_pretrained(d, subfolder="tokenizer_2")
        ids = tok2("The girl dances gracefully.", padding="max_length", max_length=77, truncation=True).input_ids
        ok = ids[0] == 49406 and 49407 in ids and max(ids) == 49407 and len(ids) == 77
        report("tokenizer_2", ok, f"{type(tok2).__name__}, {len(ids)} ids, first {ids[:8]}")
    except Exception as e:
        traceback.print_exc()
        report("tokenizer_2", False, f"{type(e).__name__}: {e}")
        tok2 = None
    try:
        fe = SiglipImageProcessor.from_pretrained(d, subfolder="feature_extractor")
        px = fe.preprocess(images=np.zeros((480, 640, 3), np.uint8), return_tensors="pt").pixel_values
        report("feature_extractor", tuple(px.shape) == (1, 3, 384, 384), f"{type(fe).__name__}, pixel_values {tuple(px.shape)}")
    except Exception as e:
        traceback.print_exc()
        report("feature_extractor", False, f"{type(e).__name__}: {e}")
        fe = None

    # The text encoders together, as encode_prompt_conds runs them.
    text_encoder_2 = None

    def clip_forward(m):
        nonlocal text_encoder_2
        text_encoder_2 = m.to(dev)
        ids = torch.tensor([tok2("a cat", padding="max_length", max_length=77).input_ids], device=dev)
        return finite("pooler_output", m(ids).pooler_output)

    load("text_encoder_2", sub("text_encoder_2"), "F16",
         lambda: CLIPTextModel.from_pretrained(d, subfolder="text_encoder_2", torch_dtype=torch.float16, output_loading_info=True),
         clip_forward, args)

    def llama_forward(m):
        m = m.to(dev)
        if tok is None or tok2 is None or text_encoder_2 is None:
            ids = torch.arange(1, 120, device=dev)[None]
            out = m(input_ids=ids, output_hidden_states=True).hidden_states[-3]
            return finite("hidden_states[-3]", out)
        llama_vec, clip_pooler = encode_prompt_conds("The girl dances gracefully.", m, text_encoder_2, tok, tok2)
        llama_vec, mask = crop_or_pad_yield_mask(llama_vec, length=512)
        return finite("llama_vec", llama_vec) + "; " + finite("clip_l_pooler", clip_pooler)

    load("text_encoder", sub("text_encoder"), "F16",
         lambda: LlamaModel.from_pretrained(d, subfolder="text_encoder", torch_dtype=torch.float16, output_loading_info=True),
         llama_forward, args)
    text_encoder_2 = None
    gc.collect()
    torch.cuda.empty_cache()

    def vae_forward(m):
        m = m.to(dev)
        x = torch.rand(1, 3, 1, 64, 64, device=dev, dtype=torch.float16) * 2 - 1
        z = m.encode(x).latent_dist.mode()
        y = m.decode(torch.randn(1, 16, 3, 16, 16, device=dev, dtype=torch.float16)).sample
        return finite("latent", z) + "; " + finite("decoded", y)

    load("vae", sub("vae"), "F16",
         lambda: AutoencoderKLHunyuanVideo.from_pretrained(d, subfolder="vae", torch_dtype=torch.float16, output_loading_info=True),
         vae_forward, args)

    image_embeddings = None

    def siglip_forward(m):
        nonlocal image_embeddings
        m = m.to(dev)
        img = (np.random.default_rng(0).random((544, 704, 3)) * 255).astype(np.uint8)
        out = hf_clip_vision_encode(img, fe, m).last_hidden_state
        image_embeddings = out
        return finite("last_hidden_state", out)

    load("image_encoder", sub("image_encoder"), "BF16",
         lambda: SiglipVisionModel.from_pretrained(d, subfolder="image_encoder", torch_dtype=torch.float16, output_loading_info=True),
         siglip_forward, args)

    def transformer_forward(m):
        m = m.to(dev)
        m.high_quality_fp32_output_for_inference = True
        bf = dict(device=dev, dtype=torch.bfloat16)
        emb = image_embeddings if image_embeddings is not None else torch.randn(1, 729, 1152, **bf)
        out = m(hidden_states=torch.randn(1, 16, 3, 32, 32, **bf), timestep=torch.tensor([999.0], device=dev),
                encoder_hidden_states=torch.randn(1, 512, 4096, **bf) * 0.1,
                encoder_attention_mask=torch.cat([torch.ones(1, 20), torch.zeros(1, 492)], 1).to(dev, torch.bool),
                pooled_projections=torch.randn(1, 768, **bf), guidance=torch.tensor([10000.0], **bf),
                image_embeddings=emb.to(torch.bfloat16), return_dict=False)[0]
        return finite("sample", out)

    # demo_gradio.py loads the transformer folder itself (the model's repo
    # root); here that is DIR/transformer.
    load("transformer", sub("transformer"), "BF16",
         lambda: HunyuanVideoTransformer3DModelPacked.from_pretrained(sub("transformer"), torch_dtype=torch.bfloat16, output_loading_info=True),
         transformer_forward, args)

    print(("all components load" if not FAILED else f"FAILED: {', '.join(FAILED)}"), flush=True)
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
