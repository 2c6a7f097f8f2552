#!/usr/bin/env python3
"""Golden case `prompt_schedule`: which prompt FramePack Studio (colinurbs/FramePack-Studio) gives each
section of an "Original" (backward) generation, and where it blends two prompts.

    python3 bench/reference/make_golden_prompt_schedule.py --studio /path/to/FramePack-Studio --out $OUT/golden

Parsing, snapping and reversing are Studio's own modules/prompt_handler.py (parse_timestamped_prompt),
imported from --studio. Per section, the selection follows modules/pipelines/worker.py's loop: the
section count round(seconds·30/(window·4)) (at least 1); section k's time (k·window·4−3)/30 s (0.01 s
when negative); the first parsed section holding it, else the first one; with blend_sections > 0 the
blend between consecutive prompt changes at the section whose index equals a change's index, alpha
1/blend_sections. Needs no torch. Writes $OUT/golden/prompt_schedule/case.json; copy it into
testdata/golden.
"""

import argparse
import importlib.util
import json
import os

CASES = [
    # prompt, seconds, latent_window_size, blend_sections
    ("[0s: a cat sits] [2s: the cat jumps]", 5, 9, 0),
    ("[0s: a cat sits] [2s: the cat jumps]", 5, 9, 4),
    ("[0s: a cat sits] [2s: the cat jumps] [4s: the cat sleeps]", 6, 9, 2),
    ("[0s: The person waves hello] [2s: The person jumps up and down] [4s: The person does a spin]", 10, 9, 4),
    ("[0s: Person looks surprised] [1.1s: Person raises arms above head] [2.2s-3.3s: Person puts hands on hips]", 5, 9, 1),
    ("a dog runs [3s: the dog stops]", 8, 9, 0),
    ("[1s-2s: a flash of light] a quiet street", 4, 5, 3),
    ("[0s: a] [0.5s: b] [1s: c] [1.5s: d]", 3, 3, 2),
    ("[2.5s: late] [0s: early]", 4, 9, 0),
    ("[0s: one] [3s: two]", 1.5, 9, 4),
]


def schedule(handler, prompt, seconds, window, blend):
    sections = handler.parse_timestamped_prompt(prompt, seconds, window, "Original")
    n = int(max(round((seconds * 30) / (window * 4)), 1))
    changes, last = [], None
    for idx, s in enumerate(sections):
        if s.prompt != last:
            changes.append((idx, s.prompt))
            last = s.prompt
    out, generated = [], 0
    for k in range(n):
        t = (generated * 4 - 3) / 30
        if t < 0:
            t = 0.01
        cur = sections[0].prompt
        for s in sections:
            if s.start_time <= t and (s.end_time is None or t < s.end_time):
                cur = s.prompt
                break
        alpha, prev, nxt = None, cur, cur
        if blend > 0 and changes and len(sections) > 1:
            for i, (ci, p) in enumerate(changes):
                if k < ci:
                    break
                if k == ci:
                    if i > 0:
                        prev, nxt, alpha = changes[i - 1][1], p, 1.0 / blend
                    break
        entry = {"time": t, "prompt": cur}
        if alpha is not None and prev != nxt:
            entry.update({"from": prev, "to": nxt, "alpha": alpha})
        out.append(entry)
        generated += window
    return {"prompt": prompt, "seconds": seconds, "window": window, "blend": blend, "sections": out,
            "parsed": [{"prompt": s.prompt, "start": s.start_time, "end": s.end_time} for s in sections]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--studio", required=True, help="FramePack-Studio checkout")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("prompt_handler", os.path.join(a.studio, "modules", "prompt_handler.py"))
    handler = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(handler)
    d = os.path.join(a.out, "prompt_schedule")
    os.makedirs(d, exist_ok=True)
    case = {
        "about": "FramePack Studio's timed-prompt schedule for its Original (backward) model: parse_timestamped_prompt "
                 "and the worker's per-section selection and blending (bench/reference/make_golden_prompt_schedule.py)",
        "component": "prompt_schedule",
        "schedules": [schedule(handler, *c) for c in CASES],
    }
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
    print("wrote", d)


if __name__ == "__main__":
    main()
