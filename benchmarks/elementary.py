"""Shipped ops whose kernels are mostly exp, erf, tanh and log1p(exp) (opgen_math.h's own float
versions): gelu's exact and tanh forms, forward and forward + backward, sigmoid, softplus and
bias_gelu, beside torch's F.gelu (exact) and F.softplus, in float32 and bfloat16; interleaved
rounds, median us.

    .venv/bin/python benchmarks/elementary.py            # about two minutes
    .venv/bin/python benchmarks/elementary.py --quick    # CI smoke: one small size, short timings

To compare two builds, run it in each (a clone at the other commit, built there, with this file
copied in) alternately.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import interleaved_medians, ops  # noqa: E402  (loads the built library)


def methods(x: torch.Tensor, bias: torch.Tensor) -> dict:
    leaf = x.clone().requires_grad_()
    grad = torch.ones_like(x)
    return {
        "gelu, exact": lambda: ops.gelu(x, approximate="none"),
        "gelu, exact, fwd+bwd": lambda: torch.autograd.grad(ops.gelu(leaf, approximate="none"), leaf, grad),
        "gelu, tanh": lambda: ops.gelu(x),
        "gelu, tanh, fwd+bwd": lambda: torch.autograd.grad(ops.gelu(leaf), leaf, grad),
        "sigmoid": lambda: ops.sigmoid(x),
        "softplus": lambda: ops.softplus(x),
        "bias_gelu": lambda: ops.bias_gelu(x, bias),
        "F.gelu (torch, exact)": lambda: F.gelu(x),
        "F.softplus (torch)": lambda: F.softplus(x),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small size, short timings (CI smoke)")
    args = p.parse_args()
    sizes, min_run_time = ((1_000,), 0.03) if args.quick else ((100_000, 1_000_000), 0.9)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; median us")
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for n in sizes:
            x = (torch.randn(n, generator=gen) * 2).to(dtype)
            bias = torch.randn(n, generator=gen).to(dtype)
            for name, t in interleaved_medians(methods(x, bias), min_run_time=min_run_time).items():
                print(f"{str(dtype).removeprefix('torch.'):9s} {n:>9,d}  {name:24s}{t:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
