"""Golden case: transformers' SiglipVisionModel with an image size that is not
a multiple of the patch size (the released flux_redux_bfl encoder has 384 and
14: floor(384/14) = 27 patches a side, the last 6 pixels unread).

A tiny random model (image_size 30, patch_size 4: 7 x 7 = 49 tokens, the last
2 pixel rows and columns unread) is saved with save_pretrained, and its
last_hidden_state for seeded random pixel values is written in the layout of
testdata/golden (see its README.md):

    <out>/models/siglip_nonmultiple/          config.json + model.safetensors
    <out>/siglip_vision_nonmultiple/case.json
    <out>/siglip_vision_nonmultiple/io.safetensors   pixel_values, last_hidden_state

Float32 on the CPU, TF32 off. Needs torch, transformers and safetensors:
    python3 bench/reference/make_golden_siglip.py --out /tmp/g
then copy both folders into testdata/golden/.
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import SiglipVisionConfig, SiglipVisionModel

import golden_setup

CASE = "siglip_vision_nonmultiple"
MODEL = "siglip_nonmultiple"


def main():
    args = golden_setup.parse_args(11, "folder to write models/ and the case folder into")
    golden_setup.exact_float32(all_cores=True)

    cfg = SiglipVisionConfig(
        image_size=30, patch_size=4, num_channels=3,
        hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
        hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
    )
    cfg._attn_implementation = "eager"
    assert cfg.image_size % cfg.patch_size != 0
    side = cfg.image_size // cfg.patch_size

    torch.manual_seed(args.seed)
    model = SiglipVisionModel(cfg).float().eval()
    # Every parameter random (the default init leaves biases at 0 and norms
    # at 1, which would hide a mix-up between them).
    g = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            else:
                p.copy_(r / max(1, p[0].numel()) ** 0.5)

    mdir = os.path.join(args.out, "models", MODEL)
    model.save_pretrained(mdir)

    px = torch.randn(1, 3, cfg.image_size, cfg.image_size, generator=g)
    with torch.no_grad():
        out = model(pixel_values=px).last_hidden_state.float().contiguous()
        # The pixels past side*patch_size are never read.
        px2 = px.clone()
        px2[:, :, side * cfg.patch_size:, :] = 7.0
        px2[:, :, :, side * cfg.patch_size:] = -7.0
        out2 = model(pixel_values=px2).last_hidden_state
    assert out.shape == (1, side * side, cfg.hidden_size), out.shape
    assert torch.allclose(out, out2, rtol=0, atol=1e-6), "the unread pixels changed the output"

    cdir = os.path.join(args.out, CASE)
    os.makedirs(cdir, exist_ok=True)
    io = {"pixel_values": px.contiguous(), "last_hidden_state": out}
    save_file(io, os.path.join(cdir, "io.safetensors"))
    case = {
        "about": "transformers SiglipVisionModel last_hidden_state with image_size %d not a multiple of "
                 "patch_size %d (%d x %d tokens; the last %d pixel rows and columns are not read)"
                 % (cfg.image_size, cfg.patch_size, side, side, cfg.image_size - side * cfg.patch_size),
        "component": "image_encoder.siglip",
        "model": "models/" + MODEL,
        "tensors": {k: {"dtype": "float32", "shape": list(v.shape)} for k, v in io.items()},
        "tolerance": {"rel_l2": 1e-4},
    }
    with open(os.path.join(cdir, "case.json"), "w") as f:
        json.dump(case, f, indent=2, sort_keys=True)
    print("wrote", mdir, "and", cdir)


if __name__ == "__main__":
    main()
