#!/usr/bin/env python3
"""Golden cases generate_magcache and generate_f1_magcache: MagCache4FramePack's
own MagCache (magcache_demo_gradio.py and magcache_demo_gradio_f1.py) in
FramePack's worker loop (framepack_worker.py) on the tiny model, on the CPU,
in float32 with TF32 off.

    PYTHONPATH=/path/to/diffusers/src python3 bench/reference/make_golden_magcache.py \\
        --framepack /path/to/FramePack --magcache /path/to/MagCache4FramePack \\
        --models tinymodel/model --image testdata/images/scene.png --out $OUT/golden

writes $OUT/golden/generate_magcache and $OUT/golden/generate_f1_magcache in
the layout of testdata/golden. Copy both folders into testdata/golden.

MagCache4FramePack's demos are Gradio scripts that load the released models
at import, so they are not imported: their functions nearest_interp,
initialize_magcache and magcache_framepack_forward are taken out of each
file with ast and run in the namespace of FramePack's
diffusers_helper/models/hunyuan_video_packed.py (which the demos' forward
was written in), with numpy as np. Before each section's sampling the
worker does what the demos' worker does with use_magcache: the transformer
class's forward replaced by magcache_framepack_forward and
initialize_magcache(enable_magcache=True, num_steps=steps, magcache_thresh,
K, retention_ratio) called, with the demos' defaults (0.1, 3, 0.2).

Settings: those of make_golden_generate.py's generate_f1 (1.2 s at window 3:
3 sections, 37 frames, resolution 128, seed 31337), with 8 steps for
generate_magcache (FramePack's backward sections, paddings [2, 1, 0]) and 6
for generate_f1_magcache (--variant f1). Both step counts differ from the 25
the ratios were calibrated for, so the cases exercise nearest_interp.
Each section's entry of section_info lists the transformer calls (0-based)
that skipped the blocks (cache_skipped), found by hooks on the transformer
and on its first block. case.json also holds magcache_ratios (the
interpolated ratios initialize_magcache set for the case's steps) and
magcache_schedules: for other step counts and knobs, the ratios
initialize_magcache sets and the calls magcache_framepack_forward skips over
one cycle, run on the tiny transformer with small inputs. The final pixels are
not kept (the decode is generate_i2v's and generate_f1's own).
"""

import argparse
import ast
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import framepack_worker  # noqa: E402
import make_golden_generate as mgg  # noqa: E402

DEMOS = {"framepack": "magcache_demo_gradio.py", "f1": "magcache_demo_gradio_f1.py"}
FUNCTIONS = ("nearest_interp", "initialize_magcache", "magcache_framepack_forward")
DEFAULTS = {"thresh": 0.1, "K": 3, "retention": 0.2}  # the demos' sliders and worker() defaults

# Other step counts and knobs whose schedules the cases record:
# MagCache4FramePack's defaults, its README's E015K4R02, FramePack-Studio's
# defaults (0.1, 2, 0.25) and a strict setting.
SCHEDULE_STEPS = [1, 2, 5, 6, 8, 10, 17, 25, 30, 50]
SCHEDULE_KNOBS = [(0.1, 3, 0.2), (0.15, 4, 0.2), (0.1, 2, 0.25), (0.05, 1, 0.5)]

ALL_CASES = ["generate_magcache", "generate_f1_magcache"]


def load_magcache(magcache_dir, variant, packed_module):
    """The demo's MagCache functions for variant, compiled from its source
    in a copy of the packed transformer module's namespace."""
    import numpy as np

    path = os.path.join(magcache_dir, DEMOS[variant])
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS}
    missing = [n for n in FUNCTIONS if n not in found]
    if missing:
        raise SystemExit("%s: no function %s" % (path, ", ".join(missing)))
    mod = ast.Module(body=[found[n] for n in FUNCTIONS], type_ignores=[])
    ns = dict(vars(packed_module))
    ns["np"] = np
    exec(compile(mod, path, "exec"), ns)
    return {n: ns[n] for n in FUNCTIONS}


class MagCacheRun:
    """Patches framepack_worker.prepare_section to set MagCache up before
    every section as the demos' worker does, and records which transformer
    calls ran the blocks."""

    def __init__(self, funcs, steps, knobs):
        self.funcs, self.steps, self.knobs = funcs, steps, knobs
        self.sections = []  # per section: one bool per call, True = blocks ran
        self.transformer = None
        self.hooked = None

    def prepare_section(self, orig):
        def prepare(g, args):
            orig(g, args)  # TeaCache off (--teacache off), the transformer in place
            tr = g.transformer
            if self.hooked is not tr:
                tr.register_forward_pre_hook(lambda *_: self.sections[-1].append(False))

                def ran(*_):
                    self.sections[-1][-1] = True

                tr.transformer_blocks[0].register_forward_pre_hook(ran)
                self.hooked = tr
            self.transformer = tr
            self.sections.append([])
            # magcache_demo_gradio.py worker(), use_magcache:
            tr.__class__.forward = self.funcs["magcache_framepack_forward"]
            tr.__class__.initialize_magcache = self.funcs["initialize_magcache"]
            th, k, r = self.knobs
            tr.initialize_magcache(enable_magcache=True, num_steps=args.steps, magcache_thresh=th, K=k, retention_ratio=r)
        return prepare

    def skipped(self, section):
        return [i for i, ran in enumerate(self.sections[section]) if not ran]


def schedules(run, variant):
    """magcache_framepack_forward over one cycle of each step count and knob
    setting, on the tiny transformer with small inputs: the ratios
    initialize_magcache set and the calls that skipped the blocks."""
    import torch

    tr = run.transformer
    cfg = tr.config
    gen = torch.Generator("cpu").manual_seed(0)
    x = torch.randn(1, cfg["in_channels"], 1, 4, 4, generator=gen)
    text = torch.randn(1, 5, cfg["text_embed_dim"], generator=gen)
    mask = torch.ones(1, 5, dtype=torch.int64)
    pooled = torch.randn(1, cfg["pooled_projection_dim"], generator=gen)
    image = torch.randn(1, 3, cfg["image_proj_dim"], generator=gen)
    out = []
    for steps in SCHEDULE_STEPS:
        for th, k, r in SCHEDULE_KNOBS:
            tr.initialize_magcache(enable_magcache=True, num_steps=steps, magcache_thresh=th, K=k, retention_ratio=r)
            run.sections.append([])
            with torch.no_grad():
                for i in range(steps):
                    tr(hidden_states=x, timestep=torch.tensor([1000.0 * (1 - i / steps)]), encoder_hidden_states=text,
                       encoder_attention_mask=mask, pooled_projections=pooled, guidance=torch.tensor([10000.0]),
                       image_embeddings=image, return_dict=False)
            out.append({"variant": variant, "steps": steps, "threshold": th, "K": k, "retention": r,
                        "ratios": [float(v) for v in tr.mag_ratios], "skipped": run.skipped(len(run.sections) - 1)})
            run.sections.pop()
    return out


def magcache_case(a, work, name, variant, settings, extra_argv, about):
    import numpy as np

    fp = framepack_worker.import_framepack(a.framepack)
    funcs = load_magcache(a.magcache, variant, fp.packed)
    th, k, r = DEFAULTS["thresh"], DEFAULTS["K"], DEFAULTS["retention"]
    run = MagCacheRun(funcs, settings["steps"], (th, k, r))
    orig = framepack_worker.prepare_section
    framepack_worker.prepare_section = run.prepare_section(orig)
    try:
        rec_dir = os.path.join(work, name)
        args = mgg.worker_args(a, False, None, rec_dir, settings, extra_argv)
        _, rec, info = framepack_worker.run(args)
    finally:
        framepack_worker.prepare_section = orig
    secs = info["sections_info"]
    if len(run.sections) != len(secs):
        raise SystemExit("%s: %d sections sampled, %d recorded" % (name, len(run.sections), len(secs)))
    total = 0
    for i, s in enumerate(secs):
        s["cache_skipped"] = run.skipped(i)
        total += len(s["cache_skipped"])
        if s["transformer_calls"] - s["transformer_block_calls"] != len(s["cache_skipped"]):
            raise SystemExit("%s section %d: the hooks disagree" % (name, i + 1))
    print("%s: MagCache skipped %d transformer calls: %s" % (name, total, [s["cache_skipped"] for s in secs]),
          file=sys.stderr)
    if total == 0:
        raise SystemExit("%s: MagCache skipped nothing" % name)
    ratios = [float(v) for v in np.asarray(run.transformer.mag_ratios)]
    sched = schedules(run, variant)
    framepack_worker.save_record(args, rec, info)
    # The decode is generate_i2v's and generate_f1's own; MagCache changes
    # the latents. Without pixels a case is a tenth of the size.
    del rec["pixels"]
    extra = {"cache": "magcache", "magcache_threshold": th, "magcache_k": k, "magcache_retention": r,
             "magcache_ratios": ratios, "magcache_schedules": sched,
             "magcache_reference": "MagCache4FramePack/" + DEMOS[variant]}
    if variant == "f1":
        extra["model_variant"] = "f1"
    mgg.write_case(a.out, name, rec, info, False, None, a.model_rel, settings, component=name, about=about, extra=extra)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--framepack", required=True)
    ap.add_argument("--magcache", required=True, help="MagCache4FramePack folder (the two demo files)")
    ap.add_argument("--models", required=True, help="the tiny model folder (tinymodel/model)")
    ap.add_argument("--image", required=True, help="testdata/images/scene.png")
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
    os.makedirs(a.out, exist_ok=True)
    work = os.path.join(a.out, "_work")

    common = ("CPU, float32, TF32 off; MagCache set up before every section as the demo's worker() does with "
              "use_magcache (forward = magcache_framepack_forward, initialize_magcache(enable_magcache=True, "
              "num_steps=steps, magcache_thresh, K, retention_ratio) with the demo's defaults), the functions taken "
              "from the demo file by bench/reference/make_golden_magcache.py. section_info[k].cache_skipped: the "
              "section's transformer calls (0-based) that reused the residual. magcache_ratios: the ratios "
              "initialize_magcache set for steps; magcache_schedules: ratios and skipped calls over one cycle for "
              "other steps and knobs. Tensors as in ")
    if "generate_magcache" in cases:
        magcache_case(a, work, "generate_magcache", "framepack", dict(mgg.SMALL, steps=8), [],
                      about=("MagCache4FramePack's magcache_demo_gradio.py MagCache in FramePack's demo_gradio.py "
                             "worker() run headless by bench/reference/framepack_worker.py on the tiny model named by "
                             "model, " + common + "generate_i2v, without pixels (the decode is generate_i2v's own; "
                             "the MagCache run differs in the latents)."))
    if "generate_f1_magcache" in cases:
        magcache_case(a, work, "generate_f1_magcache", "f1", mgg.SMALL, ["--variant", "f1"],
                      about=("MagCache4FramePack's magcache_demo_gradio_f1.py MagCache (F1's ratios) in FramePack-F1's "
                             "demo_gradio_f1.py worker() run headless by bench/reference/framepack_worker.py --variant "
                             "f1 on the tiny model named by model (its weights stand in for F1's), " + common +
                             "generate_f1, without pixels (the decode is generate_f1's own; the MagCache run differs "
                             "in the latents)."))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
