"""The flat contiguous loop into a preallocated output, against torch's own: weighted_sum `out=`
vs `torch.add(b, a, alpha=0.5, out=)`, and gelu/softplus `out=` (compute-bound), at 1e3-1e6
float32 on 1 and 2 threads. Interleaved rounds, medians, so a slow spell hits every method alike.
To compare two versions of the kernel template, build each and run this after each build.

    .venv/bin/python benchmarks/contiguous_loop.py [ROUNDS]     # 7 rounds by default, ~1 minute
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
from torch.utils import benchmark

import opgen

ROOT = Path(__file__).resolve().parent.parent


def _us(fn, threads: int) -> float:
    # Timer runs on one thread unless told otherwise
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=0.05).median * 1e6


def main(rounds: int = 7) -> int:
    ops = opgen.load(ROOT)
    print(f"median us of {rounds} interleaved rounds, float32, out= into a reused buffer")
    for threads in (1, 2):
        for n in (10**3, 10**4, 10**5, 10**6):
            a, b, out = torch.randn(n), torch.randn(n), torch.empty(n)
            cases = {
                "weighted_sum": lambda: ops.weighted_sum.out(a, b, weight=0.5, out=out),
                "torch.add": lambda: torch.add(b, a, alpha=0.5, out=out),
                "gelu": lambda: ops.gelu.out(a, out=out),
                "softplus": lambda: ops.softplus.out(a, beta=2.0, out=out),
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(rounds):
                for name, fn in cases.items():
                    times[name].append(_us(fn, threads))
            med = {name: statistics.median(v) for name, v in times.items()}
            cells = "  ".join(f"{name} {value:9.2f}" for name, value in med.items())
            print(f"threads {threads}  n {n:>8}  {cells}  (weighted_sum / torch.add {med['weighted_sum'] / med['torch.add']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
