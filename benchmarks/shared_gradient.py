"""bias_gelu's x and bias share one gradient buffer (their derived formulas are the same): forward
+ backward with both gradients against eager autograd, and `bias_gelu(x)` (bias None, one
gradient) against `gelu(x)`, whose backward stores as much; interleaved rounds, medians in us.

    .venv/bin/python benchmarks/shared_gradient.py     # about half a minute
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import fwd_bwd, interleaved_medians, ops  # noqa: E402  (loads the built library)


def main() -> int:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median us")
    gen = torch.Generator().manual_seed(0)
    for n in (1024, 4096):
        x, b = torch.randn(n, 1024, generator=gen), torch.randn(1024, generator=gen)
        xs, bs = x.clone().requires_grad_(), b.clone().requires_grad_()
        grad = torch.ones(n, 1024)
        t = interleaved_medians({
            "both": lambda: fwd_bwd(ops.bias_gelu, [xs, bs], grad),
            "eager": lambda: fwd_bwd(lambda x, b: F.gelu(x + b, approximate="tanh"), [xs, bs], grad),
            "bias None": lambda: torch.autograd.grad(ops.bias_gelu(xs), [xs], grad),
            "gelu": lambda: torch.autograd.grad(ops.gelu(xs), [xs], grad),
        }, min_run_time=0.4)
        print(f"x[{n},1024] + bias[1024]: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
