"""What the make_golden_* scripts share: the command line of a script that
writes a tiny model and its cases (--out, --seed), and torch set to compute
float32 as written (TF32 off).

The scripts import it from their own folder (Python puts a script's folder
first on sys.path).
"""
import argparse
import os


def parse_args(seed, out_help="folder to write models/ and the case folders into"):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help=out_help)
    ap.add_argument("--seed", type=int, default=seed)
    return ap.parse_args()


def exact_float32(all_cores=False):
    """TF32 off for matmuls and convolutions; all_cores: torch's CPU kernels
    on every core."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if all_cores:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
