"""The flat contiguous loop into a preallocated output, against torch's own: weighted_sum `out=`
vs `torch.add(b, a, alpha=0.5, out=)`, and gelu/softplus `out=` (compute-bound), at 1e3-1e6
float32 on 1 and 2 threads. Interleaved rounds, medians, so a slow spell hits every method alike.
To compare two versions of the kernel template, build each and run this after each build.

    .venv/bin/python benchmarks/contiguous_loop.py [ROUNDS]     # 7 rounds by default, ~1 minute
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import interleaved_medians, ops  # noqa: E402  (loads the built library)


def main(rounds: int = 7) -> int:
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
            med = interleaved_medians(cases, 0.05 * rounds, rounds, threads)
            cells = "  ".join(f"{name} {value:9.2f}" for name, value in med.items())
            print(f"threads {threads}  n {n:>8}  {cells}  (weighted_sum / torch.add {med['weighted_sum'] / med['torch.add']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
