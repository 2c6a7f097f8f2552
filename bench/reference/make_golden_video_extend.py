#!/usr/bin/env python3
"""Golden cases generate_video_extend and generate_video_extend_f1: extending a
short video with FramePack Studio's own "Video" and "Video F1" generators
(modules/generators/video_generator.py, video_f1_generator.py and
video_base_generator.py) in its worker's section loop, on the tiny model, on
the CPU, in float32 with TF32 off.

    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_video_extend.py \\
        --studio /path/to/FramePack-Studio --models tinymodel/model \\
        --image testdata/images/scene.png --out $OUT/golden

writes $OUT/golden/generate_video_extend and $OUT/golden/generate_video_extend_f1
in the layout of testdata/golden. Copy both folders into testdata/golden.

How it runs Studio's code: framepack_worker.py loads the models exactly as for
the other generate cases, but imports diffusers_helper from Studio's checkout
(--framepack is set to it), and its worker() is replaced by the video part of
Studio's modules/pipelines/worker.py, ported here the way framepack_worker.py
ports FramePack's demo: the generator's video_encode (frames cropped to the
bucket, VAE-encoded 16 at a time), SigLIP of the first encoded frame, history
= the video's latents, then for every section of get_latent_paddings the
generator's own video_prepare_clean_latents_and_indices (Video) or
video_f1_prepare_clean_latents_and_indices (Video F1), sample_hunyuan,
update_history_latents, get_real_history_latents, and the decode with
get_section_latent_frames, get_current_pixels and update_history_pixels.

Departures, and why:
  * decord (Studio's video reader) is replaced by a stand-in module whose
    VideoReader hands over the case's frames: the input is the frames
    themselves (shipped in the case as the uint8 tensor "video"), so no video
    decoder's colour conversion enters the comparison;
  * the frames are 128x96, and Studio's own 128 bucket list (which has no
    128x96) is replaced by FramePack's 640 list scaled to 128 (as
    framepack_worker.py does for resolutions FramePack lacks, and as
    framepack's section.Buckets has them), so that both sides keep the frames
    as they are;
  * diffusers_helper.lora_utils, which base_generator.py imports for LoRAs,
    is a stand-in module: these cases load none, and it imports private
    diffusers names that other diffusers versions lack;
  * the posterior samples of video_encode come from torch's global CPU
    generator seeded with the seed just before it (--seed-vae-sample), batch
    after batch, as framepack's Generate draws them.

The input: 40 frames panning across scene.png (crops of 200x150 moving 1 px
right and 0.5 px down per frame, LANCZOS-resized to 128x96). Settings: 1.2 s at
window 3 (3 sections), 6 steps, resolution 128, seed 31337, CFG 1, GS 10, RS 0,
num_cleaned_frames 5. Each section's entry of section_info also holds the
indices Studio's layout gave it (clean_latent_indices, latent_indices,
clean_latent_2x_indices, clean_latent_4x_indices).
"""

import argparse
import os
import shutil
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import framepack_worker  # noqa: E402
import make_golden_generate as mgg  # noqa: E402

SETTINGS = dict(mgg.SMALL)  # 1.2 s, window 3, 6 steps, resolution 128, seed 31337
NUM_CLEANED_FRAMES = 5
FRAMES = 40
ALL_CASES = {"generate_video_extend": "framepack", "generate_video_extend_f1": "f1"}


def make_frames(image_path):
    """The input video: FRAMES frames of 128x96 panning across the image."""
    import numpy as np
    from PIL import Image

    img = Image.open(image_path).convert("RGB")
    out = []
    for i in range(FRAMES):
        crop = img.crop((i, i // 2, i + 200, i // 2 + 150)).resize((128, 96), Image.LANCZOS)
        out.append(np.array(crop))
    return np.stack(out)


def install_stand_ins(frames):
    """decord, and Studio's diffusers_helper.lora_utils: base_generator.py
    imports it for LoRAs (which these cases do not use), and it imports
    private diffusers names that other diffusers versions lack."""
    install_decord(frames)
    m = types.ModuleType("diffusers_helper.lora_utils")
    m.__doc__ = "stand-in: the golden cases load no LoRA"
    sys.modules["diffusers_helper.lora_utils"] = m


def install_decord(frames):
    """A stand-in for decord whose VideoReader serves frames (T, H, W, 3)."""

    class Batch:
        def __init__(self, a):
            self.a = a

        def asnumpy(self):
            return self.a

    class VideoReader:
        def __init__(self, path, *args, **kwargs):
            self.frames = frames

        def __len__(self):
            return len(self.frames)

        def get_avg_fps(self):
            return 30.0

        def get_batch(self, indices):
            return Batch(self.frames[list(indices)])

    m = types.ModuleType("decord")
    m.__doc__ = "stand-in for decord: serves the golden case's frames"
    m.VideoReader = VideoReader
    sys.modules["decord"] = m


STATE = {}


def video_worker(g, input_image, args, rec, info, end_image=None):
    """The video part of Studio's worker(), for STATE's variant."""
    import numpy as np
    import torch

    variant, frames = STATE["variant"], STATE["frames"]
    from modules.generators.video_f1_generator import VideoF1ModelGenerator
    from modules.generators.video_generator import VideoModelGenerator

    prompt, n_prompt, seed = args.prompt, args.n_prompt, args.seed
    lws, steps, cfg = args.latent_window_size, args.steps, args.cfg
    total_latent_sections = int(max(round((args.seconds * 30) / (lws * 4)), 1))

    llama_vec, clip_l_pooler = g.encode_prompt_conds(prompt, g.text_encoder, g.text_encoder_2, g.tokenizer, g.tokenizer_2)
    if cfg == 1:
        llama_vec_n, clip_l_pooler_n = torch.zeros_like(llama_vec), torch.zeros_like(clip_l_pooler)
    else:
        llama_vec_n, clip_l_pooler_n = g.encode_prompt_conds(n_prompt, g.text_encoder, g.text_encoder_2, g.tokenizer,
                                                             g.tokenizer_2)
    rec["llama_vec"] = llama_vec.float().cpu()
    rec["clip_l_pooler"] = clip_l_pooler.float().cpu()
    llama_vec, llama_attention_mask = g.crop_or_pad_yield_mask(llama_vec, length=512)
    llama_vec_n, llama_attention_mask_n = g.crop_or_pad_yield_mask(llama_vec_n, length=512)

    cls = VideoF1ModelGenerator if variant == "f1" else VideoModelGenerator
    gen = cls(text_encoder=g.text_encoder, text_encoder_2=g.text_encoder_2, tokenizer=g.tokenizer,
              tokenizer_2=g.tokenizer_2, vae=g.vae, image_encoder=g.image_encoder,
              feature_extractor=g.feature_extractor, high_vram=True, settings=None)
    gen.transformer = g.transformer

    torch.manual_seed(seed)  # the posterior samples (--seed-vae-sample)
    (start_latent, input_image_np, video_latents, fps, height, width, input_video_pixels,
     end_of_input_video_image_np, input_frames_resized_np) = gen.video_encode(
        video_path="golden-input.mp4", resolution=args.resolution, no_resize=False, vae_batch_size=16,
        device=torch.device("cpu"))
    image_encoder_last_hidden_state = g.hf_clip_vision_encode(input_image_np, g.feature_extractor,
                                                              g.image_encoder).last_hidden_state
    rec["video"] = torch.from_numpy(np.ascontiguousarray(frames)).to(torch.uint8)
    if not np.array_equal(input_frames_resized_np, frames[len(frames) - input_frames_resized_np.shape[0]:]):
        raise SystemExit("video_encode changed the frames: they should be at their bucket's size already")
    rec["video_latents"] = video_latents.float().cpu()
    rec["image_embeddings"] = image_encoder_last_hidden_state.float().cpu()
    info.update(width=width, height=height, sections=total_latent_sections, video_frames=int(frames.shape[0]),
                encoded_frames=int(input_frames_resized_np.shape[0]), video_latent_frames=int(video_latents.shape[2]))

    history_latents = video_latents.cpu()
    dt = g.transformer.dtype
    llama_vec, llama_vec_n = llama_vec.to(dt), llama_vec_n.to(dt)
    clip_l_pooler, clip_l_pooler_n = clip_l_pooler.to(dt), clip_l_pooler_n.to(dt)
    image_encoder_last_hidden_state = image_encoder_last_hidden_state.to(dt)

    rnd = torch.Generator("cpu").manual_seed(seed)
    sample_kwargs = dict(
        transformer=g.transformer, sampler='unipc', width=width, height=height, frames=lws * 4 - 3,
        real_guidance_scale=cfg, distilled_guidance_scale=args.gs, guidance_rescale=args.rs, num_inference_steps=steps,
        generator=rnd, prompt_embeds=llama_vec, prompt_embeds_mask=llama_attention_mask, prompt_poolers=clip_l_pooler,
        negative_prompt_embeds=llama_vec_n, negative_prompt_embeds_mask=llama_attention_mask_n,
        negative_prompt_poolers=clip_l_pooler_n, device=g.gpu, dtype=torch.float32)

    latent_paddings = gen.get_latent_paddings(total_latent_sections)
    total_generated_latent_frames = 0
    history_pixels = None
    sections = framepack_worker.Sections(g, args, rec)
    layouts = []
    for i, latent_padding in enumerate(latent_paddings):
        is_last_section = latent_padding == 0
        latent_padding_size = latent_padding * lws
        if variant == "f1":
            (clean_latent_indices, latent_indices, clean_latent_2x_indices, clean_latent_4x_indices, clean_latents,
             clean_latents_2x, clean_latents_4x) = gen.video_f1_prepare_clean_latents_and_indices(
                lws, video_latents, history_latents, NUM_CLEANED_FRAMES)
        else:
            (clean_latent_indices, latent_indices, clean_latent_2x_indices, clean_latent_4x_indices, clean_latents,
             clean_latents_2x, clean_latents_4x) = gen.video_prepare_clean_latents_and_indices(
                None, 1.0, None, None, latent_paddings, latent_padding, latent_padding_size, lws, video_latents,
                history_latents, NUM_CLEANED_FRAMES)
        layouts.append({k: [int(x) for x in v.flatten().tolist()] for k, v in (
            ("clean_latent_indices", clean_latent_indices), ("latent_indices", latent_indices),
            ("clean_latent_2x_indices", clean_latent_2x_indices), ("clean_latent_4x_indices", clean_latent_4x_indices))})

        framepack_worker.prepare_section(g, args)
        generated_latents, calls, blocks = framepack_worker.sample_section(
            g, sample_kwargs, i + 1, total_latent_sections, image_encoder_last_hidden_state, latent_indices,
            clean_latents, clean_latent_indices, clean_latents_2x, clean_latent_2x_indices, clean_latents_4x,
            clean_latent_4x_indices)

        total_generated_latent_frames += int(generated_latents.shape[2])
        history_latents = gen.update_history_latents(history_latents, generated_latents)
        real_history_latents = gen.get_real_history_latents(history_latents, total_generated_latent_frames)

        def decode(history_pixels):
            if history_pixels is None:
                return g.vae_decode(real_history_latents, g.vae).cpu()
            section_latent_frames = gen.get_section_latent_frames(lws, is_last_section)
            current_pixels = gen.get_current_pixels(real_history_latents, section_latent_frames, g.vae)
            return gen.update_history_pixels(history_pixels, current_pixels, lws * 4 - 3)

        history_pixels = framepack_worker.decode_section(g, decode, history_pixels)
        sections.done(i + 1, latent_padding, is_last_section, generated_latents, real_history_latents,
                      total_generated_latent_frames, history_pixels, calls, blocks)
        if is_last_section:
            break
    out = sections.finish(info, history_pixels)
    for s, lay in zip(info["sections_info"], layouts):
        s.update(lay)
    return out


def video_case(a, work, name, variant, frames):
    import numpy as np
    from PIL import Image

    STATE.update(variant=variant, frames=frames)
    os.makedirs(work, exist_ok=True)
    first = os.path.join(work, "first.png")
    Image.fromarray(np.ascontiguousarray(frames[0])).save(first)
    a.image = first  # worker_args passes it to run(), which loads it; the video worker does not use it
    orig_worker = framepack_worker.worker
    framepack_worker.worker = video_worker
    try:
        rec_dir = os.path.join(work, name)
        args = mgg.worker_args(a, False, None, rec_dir, SETTINGS)
        _, rec, info = framepack_worker.run(args)
    finally:
        framepack_worker.worker = orig_worker
    framepack_worker.save_record(args, rec, info)
    about = ("FramePack Studio's \"%s\" generator (modules/generators/%s) in the video part of its worker() "
             "(modules/pipelines/worker.py), run by bench/reference/make_golden_video_extend.py through "
             "framepack_worker.py's model loading, on the tiny model named by model, CPU, float32, TF32 off: video "
             "(uint8 T×H×W×3, the input at its bucket's size, served by a stand-in for decord), video_latents (video_encode: 16 frames a "
             "vae_encode, posterior sampled from torch's global generator seeded with seed just before), "
             "image_embeddings (SigLIP of the first encoded frame), then the sections with the generator's own "
             "layout (indices in section_info), history_latents_section_K = real_history_latents after section K "
             "(the new latents only), generated_latents_section_K, pixels = the final history_pixels (the new "
             "frames only, f32, unclamped).") % (("Video F1", "video_f1_generator.py") if variant == "f1" else
                                                  ("Video", "video_generator.py"))
    extra = {"video_context_frames": NUM_CLEANED_FRAMES, "video_frames": info["video_frames"],
             "encoded_frames": info["encoded_frames"], "video_latent_frames": info["video_latent_frames"],
             "video_new_only": True,
             # No image_cropped here: the rel_l2 ceiling alone.
             "tolerance": {"rel_l2": mgg.TOLERANCE["rel_l2"]}}
    if variant == "f1":
        extra["model_variant"] = "f1"
    mgg.write_case(a.out, name, rec, info, False, None, a.model_rel, SETTINGS, component=name, about=about, extra=extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studio", required=True, help="FramePack-Studio checkout")
    ap.add_argument("--models", required=True, help="the tiny model folder (tinymodel/model)")
    ap.add_argument("--image", required=True, help="testdata/images/scene.png (the video pans across it)")
    ap.add_argument("--out", required=True, help="folder that receives the case folders")
    ap.add_argument("--model-rel", default="../../tinymodel/model",
                    help="case.json's model entry, relative to testdata/golden")
    ap.add_argument("--cases", default=",".join(ALL_CASES), help="comma-separated, of " + ", ".join(ALL_CASES))
    a = ap.parse_args()
    cases = [c for c in a.cases.split(",") if c]
    for c in cases:
        if c not in ALL_CASES:
            raise SystemExit("unknown case %r (have %s)" % (c, ", ".join(ALL_CASES)))

    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    frames = make_frames(a.image)
    a.framepack = os.path.abspath(a.studio)  # framepack_worker imports diffusers_helper from here

    # FramePack's 640 buckets scaled to 128 replace Studio's own 128 list.
    fp = framepack_worker.import_framepack(a.framepack)
    install_stand_ins(frames)
    opts = fp.bucket_tools.bucket_options
    opts[SETTINGS["resolution"]] = framepack_worker.scaled_buckets(SETTINGS["resolution"], opts[640])

    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "_work")
    for name in cases:
        video_case(a, work, name, ALL_CASES[name], frames)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
