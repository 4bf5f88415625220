"""The shipped hand-written kernels against torch's own: layer_norm vs `F.layer_norm`, rms_norm
vs `F.rms_norm` (forward, and forward+backward), add_n of 4 vs eager's `x0 + x1 + x2 + x3`, at
shapes from tiny to a large activation, in one floating dtype, on every thread torch uses.
Interleaved rounds, medians, so a slow spell hits every method alike. To compare two versions of
a kernel, build each and run this after each build.

    .venv/bin/python benchmarks/handwritten.py [--rounds 5] [--dtype float32]   # ~1 minute
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import interleaved_medians, ops  # noqa: E402  (loads the built library)
SHAPES = ((8, 64), (64, 512), (512, 768), (4096, 1024), (1000, 10000))


DTYPES = ("float32", "float64", "float16", "bfloat16")


def cases(ops, rows: int, cols: int, dtype: torch.dtype) -> dict:
    gen = torch.Generator().manual_seed(0)
    x, w, b, g = (torch.randn(*s, generator=gen).to(dtype) for s in ((rows, cols), (cols,), (cols,), (rows, cols)))
    xs = [torch.randn(rows, cols, generator=gen).to(dtype) for _ in range(4)]
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    return {
        "layer_norm": lambda: ops.layer_norm(x, w, b),
        "F.layer_norm": lambda: F.layer_norm(x, (cols,), w, b),
        "rms_norm": lambda: ops.rms_norm(x, w),
        "F.rms_norm": lambda: F.rms_norm(x, (cols,), w, 1e-6),
        "rms_norm fwd+bwd": lambda: torch.autograd.grad(ops.rms_norm(xg, wg), (xg, wg), g),
        "F.rms_norm fwd+bwd": lambda: torch.autograd.grad(F.rms_norm(xg, (cols,), wg, 1e-6), (xg, wg), g),
        "add_n of 4": lambda: ops.add_n(xs),
        "eager add_n of 4": lambda: xs[0] + xs[1] + xs[2] + xs[3],
    }


def main(rounds: int, dtype_name: str) -> int:
    dtype = getattr(torch, dtype_name)
    print(f"median us of {rounds} interleaved rounds, {dtype_name}, {torch.get_num_threads()} threads")
    for rows, cols in SHAPES:
        m = interleaved_medians(cases(ops, rows, cols, dtype), 0.1 * rounds, rounds)
        print(f"  {rows}x{cols}:")
        for ours in ("layer_norm", "rms_norm", "rms_norm fwd+bwd", "add_n of 4"):
            theirs = f"eager {ours}" if ours.startswith("add_n") else f"F.{ours}"
            print(f"    {ours:18} {m[ours]:10.1f}   {theirs:20} {m[theirs]:10.1f}   ({m[theirs] / m[ours]:.2f}x)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    args = parser.parse_args()
    sys.exit(main(args.rounds, args.dtype))
