#!/usr/bin/env python3
"""Golden case `lora`: the tiny packed transformer (testdata/golden/models/transformer) with a random
HunyuanVideo LoRA applied by diffusers (`load_lora_adapter` + `set_adapters`, i.e. PEFT), one forward on
transformer_a's inputs, float32 on the CPU with TF32 off.

    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_lora.py \\
        --golden testdata/golden --out $OUT/golden

writes $OUT/golden/lora/{case.json,io.safetensors} and the same LoRA in three files:

    lora_diffusers.safetensors  diffusers/PEFT keys (transformer.<module>.lora_A/lora_B.weight), no alpha
    lora_musubi.safetensors     kohya/musubi-tuner keys for FramePack (lora_unet_<module with _>.lora_down/
                                lora_up.weight, .alpha)
    lora_hunyuan.safetensors    kohya keys in the original HunyuanVideo names (lora_unet_double_blocks_N_img_attn_qkv,
                                single_blocks_N_linear1: q|k|v(|mlp) fused, one down factor for all), .alpha

Each double block adapts q|k|v and add_q|add_k|add_v (one down factor per triple, as a fused qkv LoRA
has), to_out.0, to_add_out, ff.net.0.proj, ff.net.2, ff_context.net.0.proj, ff_context.net.2,
norm1.linear, norm1_context.linear; each single block q|k|v|proj_mlp (one down factor), proj_out,
norm.linear. Rank 4, alpha 2 in the kohya files; the diffusers file carries alpha/rank = 0.5 in its up
factors (exact in binary), so the three files hold the same update. The case's scale is applied with
set_adapters. The forward without the LoRA is checked against transformer_a's output first (the
reference class is diffusers' HunyuanVideoFramepackTransformer3DModel, whose weight names are the packed
model's). Copy the folder into testdata/golden.
"""

import argparse
import json
import os

import torch
from safetensors.torch import load_file, save_file

RANK, ALPHA, SCALE, SEED = 4, 2.0, 0.75, 1234


def module_groups(cfg):
    """(original HunyuanVideo name or None, [diffusers modules sharing one down factor]) pairs."""
    groups = []
    for i in range(cfg["num_layers"]):
        d, o = "transformer_blocks.%d." % i, "double_blocks.%d." % i
        groups += [
            (o + "img_attn_qkv", [d + "attn.to_q", d + "attn.to_k", d + "attn.to_v"]),
            (o + "txt_attn_qkv", [d + "attn.add_q_proj", d + "attn.add_k_proj", d + "attn.add_v_proj"]),
            (o + "img_attn_proj", [d + "attn.to_out.0"]),
            (o + "txt_attn_proj", [d + "attn.to_add_out"]),
            (o + "img_mlp.fc1", [d + "ff.net.0.proj"]),
            (o + "img_mlp.fc2", [d + "ff.net.2"]),
            (o + "txt_mlp.fc1", [d + "ff_context.net.0.proj"]),
            (o + "txt_mlp.fc2", [d + "ff_context.net.2"]),
            (o + "img_mod.linear", [d + "norm1.linear"]),
            (o + "txt_mod.linear", [d + "norm1_context.linear"]),
        ]
    for i in range(cfg["num_single_layers"]):
        d, o = "single_transformer_blocks.%d." % i, "single_blocks.%d." % i
        groups += [
            (o + "linear1", [d + "attn.to_q", d + "attn.to_k", d + "attn.to_v", d + "proj_mlp"]),
            (o + "linear2", [d + "proj_out"]),
            (o + "modulation.linear", [d + "norm.linear"]),
        ]
    return groups


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", required=True, help="testdata/golden (models/transformer, transformer_a)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(SEED)
    from diffusers import HunyuanVideoFramepackTransformer3DModel

    model_dir = os.path.join(a.golden, "models", "transformer")
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    # Built from the config's keys that the class takes, the weights loaded strictly: the folder's
    # _class_name is FramePack's packed class, whose weight names these are.
    import inspect
    params = inspect.signature(HunyuanVideoFramepackTransformer3DModel.__init__).parameters
    model = HunyuanVideoFramepackTransformer3DModel(**{k: v for k, v in cfg.items() if k in params}).float()
    model.load_state_dict(load_file(os.path.join(model_dir, "diffusion_pytorch_model.safetensors")), strict=True)
    model.eval()
    sd = model.state_dict()

    io = load_file(os.path.join(a.golden, "transformer_a", "io.safetensors"))
    inputs = {k: v for k, v in io.items() if k != "output"}

    # diffusers' rope takes one row of frame indices (torch.meshgrid wants 1-D); the case is batch 1.
    def idx(k):
        t = io[k]
        if t.dim() > 1:
            if t.shape[0] != 1:
                raise SystemExit("%s has %d rows; the reference class takes one" % (k, t.shape[0]))
            t = t[0]
        return t

    def forward():
        with torch.no_grad():
            return model(
                hidden_states=io["hidden_states"], timestep=io["timestep"],
                encoder_hidden_states=io["encoder_hidden_states"],
                encoder_attention_mask=io["encoder_attention_mask"].bool(),
                pooled_projections=io["pooled_projections"], image_embeds=io["image_embeddings"],
                indices_latents=idx("latent_indices"), guidance=io["guidance"],
                latents_clean=io["clean_latents"], indices_latents_clean=idx("clean_latent_indices"),
                latents_history_2x=io["clean_latents_2x"], indices_latents_history_2x=idx("clean_latent_2x_indices"),
                latents_history_4x=io["clean_latents_4x"], indices_latents_history_4x=idx("clean_latent_4x_indices"),
                return_dict=False,
            )[0].float()

    def rel(x, y):
        return ((x - y).norm() / y.norm()).item()

    base = forward()
    r = rel(base, io["output"])
    print("base forward vs transformer_a: rel_l2 %.3g" % r)
    if r > 1e-4:
        raise SystemExit("the reference class does not reproduce transformer_a (rel_l2 %g)" % r)

    diff, musubi, hunyuan = {}, {}, {}
    for orig, mods in module_groups(cfg):
        shapes = [sd[m + ".weight"].shape for m in mods]
        fin = shapes[0][1]
        down = torch.randn(RANK, fin) * 0.5
        up = torch.randn(sum(s[0] for s in shapes), RANK) * 0.5
        hunyuan["lora_unet_" + orig.replace(".", "_") + ".lora_down.weight"] = down
        hunyuan["lora_unet_" + orig.replace(".", "_") + ".lora_up.weight"] = up
        hunyuan["lora_unet_" + orig.replace(".", "_") + ".alpha"] = torch.tensor(ALPHA)
        row = 0
        for m, s in zip(mods, shapes):
            u = up[row:row + s[0]].contiguous()
            row += s[0]
            k = "lora_unet_" + m.replace(".", "_")
            musubi[k + ".lora_down.weight"] = down.clone()
            musubi[k + ".lora_up.weight"] = u.clone()
            musubi[k + ".alpha"] = torch.tensor(ALPHA)
            diff["transformer." + m + ".lora_A.weight"] = down.clone()
            diff["transformer." + m + ".lora_B.weight"] = u * (ALPHA / RANK)

    model.load_lora_adapter(dict(diff), prefix="transformer", adapter_name="golden")
    model.set_adapters(["golden"], weights=[SCALE])
    out = forward()
    change = rel(out, base)
    print("LoRA changes the output by rel_l2 %.3g" % change)
    if change < 1e-2:
        raise SystemExit("the LoRA barely changes the output (%g)" % change)

    d = os.path.join(a.out, "lora")
    os.makedirs(d, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["output"] = out.contiguous()
    save_file(tensors, os.path.join(d, "io.safetensors"))
    save_file({k: v.contiguous() for k, v in diff.items()}, os.path.join(d, "lora_diffusers.safetensors"))
    save_file({k: v.contiguous() for k, v in musubi.items()}, os.path.join(d, "lora_musubi.safetensors"))
    save_file({k: v.contiguous() for k, v in hunyuan.items()}, os.path.join(d, "lora_hunyuan.safetensors"))
    case = {
        "about": "the packed transformer's forward on transformer_a's inputs with a random rank-%d LoRA applied by "
                 "diffusers (load_lora_adapter, set_adapters scale %g), fp32 on the CPU; the same LoRA in "
                 "diffusers/PEFT, musubi-tuner (FramePack names) and kohya original-HunyuanVideo keys "
                 "(bench/reference/make_golden_lora.py)" % (RANK, SCALE),
        "component": "transformer_lora",
        "model": "models/transformer",
        "lora_files": ["lora_diffusers.safetensors", "lora_musubi.safetensors", "lora_hunyuan.safetensors"],
        "lora_scale": SCALE,
        "tolerance": {"rel_l2": 1e-4},
        "tensors": {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
                    for k, v in sorted(tensors.items())},
    }
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
    print("wrote", d)


if __name__ == "__main__":
    main()
