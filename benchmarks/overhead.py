"""Call overhead at 8 floats in interleaved rounds: every method once per round, medians over
the rounds, so that a slow spell of the machine hits all methods alike (bench.py measures each
method once).

    .venv/bin/python benchmarks/overhead.py [ROUNDS]     # 11 rounds by default, about a minute
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.utils import benchmark

import opgen

ROOT = Path(__file__).resolve().parent.parent


def main(rounds: int = 11) -> int:
    ops = opgen.load(ROOT)
    sys.path.insert(0, str(ROOT / "generated" / "python"))
    import opgen_ops

    a, b = torch.randn(8), torch.randn(8)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()

    @torch.library.custom_op("opgen_overhead::weighted_sum", mutates_args=())
    def py_weighted_sum(a: torch.Tensor, b: torch.Tensor, weight: float) -> torch.Tensor:
        return torch.add(b, a, alpha=weight)

    @py_weighted_sum.register_fake
    def _(a, b, weight):
        return torch.empty_like(a)

    def backward(ctx, grad):
        return grad * ctx.weight, grad, None

    def setup_context(ctx, inputs, output):
        ctx.weight = inputs[2]

    py_weighted_sum.register_autograd(backward, setup_context=setup_context)
    cases = {
        "torch.add(b, a, alpha=w)": (lambda: torch.add(b, a, alpha=0.5), lambda: torch.add(bg, ag, alpha=0.5)),
        "torch.ops (generated)": (lambda: ops.weighted_sum(a, b, weight=0.5), lambda: ops.weighted_sum(ag, bg, weight=0.5)),
        "typed API (generated)": (lambda: opgen_ops.weighted_sum(a, b, weight=0.5),
                                  lambda: opgen_ops.weighted_sum(ag, bg, weight=0.5)),
        "Python custom_op": (lambda: py_weighted_sum(a, b, 0.5), lambda: py_weighted_sum(ag, bg, 0.5)),
    }
    times: dict[tuple[str, bool], list[float]] = {(name, grad): [] for name in cases for grad in (False, True)}
    for _ in range(rounds):
        for name, fns in cases.items():
            for grad in (False, True):
                calls = 5000 if "custom_op" in name else 20000
                timer = benchmark.Timer(stmt="fn()", globals={"fn": fns[grad]})
                times[(name, grad)].append(timer.timeit(calls).median * 1e6)
    median = {key: sorted(v)[len(v) // 2] for key, v in times.items()}
    base = next(iter(cases))
    print(f"call overhead, 8 floats, median of {rounds} interleaved rounds (us; ratio to {base}):")
    for name in cases:
        plain, grad = median[(name, False)], median[(name, True)]
        print(f"  {name:26} {plain:7.2f} ({plain / median[(base, False)]:.2f}x)   with grad {grad:7.2f} "
              f"({grad / median[(base, True)]:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 11))
