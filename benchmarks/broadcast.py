"""Ops on broadcast inputs, the way models call them: a bias of shape [C] added to activations of
shape [N, C] (bias_gelu), polar coordinates from a column of radii and a row of angles
(to_cartesian), a per-channel bias and log-scale (actnorm, of features and of NCHW images).
These loops go through a TensorIterator (the inputs do not share one layout), row by row;
to_cartesian's cos(theta) and sin(theta) and actnorm's exp(log_scale) are computed once per
element of the small input first (hoisted); a backward whose small inputs are rows repeated over
the leading dims sums their gradients row by row (opgen::rows_summed). Forward, and forward +
backward with every gradient and with the first input's only, against eager autograd;
interleaved rounds, medians.

    .venv/bin/python benchmarks/broadcast.py     # about a minute
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import fwd_bwd, interleaved_medians, ops  # noqa: E402  (loads the built library)

SHAPES = [(64, 1024), (1024, 1024), (4096, 1024)]


def gelu_tanh(y):
    return F.gelu(y, approximate="tanh")


def cases(n: int, c: int) -> dict[str, tuple]:
    """name -> (generated, eager, leaves, first leaf only)."""
    gen = torch.Generator().manual_seed(0)
    x, bias = torch.randn(n, c, generator=gen), torch.randn(c, generator=gen)
    r, theta = torch.rand(n, 1, generator=gen), torch.rand(c, generator=gen) * 6.28
    images, channel = torch.randn(n // 16, 64, 16, c // 64, generator=gen), torch.randn(64, 1, 1, generator=gen)
    return {
        f"bias_gelu x[{n},{c}] + bias[{c}]": (ops.bias_gelu, lambda x, b: gelu_tanh(x + b), (x, bias)),
        f"to_cartesian r[{n},1] theta[{c}]": (ops.to_cartesian, lambda r, t: (r * torch.cos(t), r * torch.sin(t)), (r, theta)),
        f"actnorm x[{n},{c}], bias, log_scale[{c}]": (ops.actnorm, lambda x, b, s: (x + b) * torch.exp(s), (x, bias, bias * 0.1)),
        f"actnorm NCHW x{list(images.shape)}, [64,1,1]": (ops.actnorm, lambda x, b, s: (x + b) * torch.exp(s),
                                                          (images, channel, channel * 0.1)),
    }


def main() -> int:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median us")
    print(f"{'case':44} {'fwd':>9} {'eager':>9} {'fwd+bwd':>9} {'eager':>9} {'1st only':>9} {'eager':>9}")
    for n, c in SHAPES:
        for name, (generated, eager, inputs) in cases(n, c).items():
            leaves = [t.clone().requires_grad_() for t in inputs]
            first = [leaves[0], *[t.detach() for t in leaves[1:]]]
            out = generated(*inputs)
            grad = torch.ones_like(out if isinstance(out, torch.Tensor) else out[0])

            def first_only(fn):
                return lambda: torch.autograd.grad(_outs(fn(*first)), [first[0]], (grad,) * len(_outs(out)))

            t = interleaved_medians({
                "fwd": lambda: generated(*inputs), "eager": lambda: eager(*inputs),
                "fwd_bwd": lambda: fwd_bwd(generated, leaves, grad), "eager_fwd_bwd": lambda: fwd_bwd(eager, leaves, grad),
                "first": first_only(generated), "eager_first": first_only(eager),
            }, min_run_time=0.3)
            print(f"{name:44} {t['fwd']:9.1f} {t['eager']:9.1f} {t['fwd_bwd']:9.1f} {t['eager_fwd_bwd']:9.1f} "
                  f"{t['first']:9.1f} {t['eager_first']:9.1f}")
    return 0


def _outs(value) -> tuple:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


if __name__ == "__main__":
    sys.exit(main())
