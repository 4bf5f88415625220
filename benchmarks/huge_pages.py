"""Fresh large outputs with and without PyTorch's own huge pages: generated ops vs the eager
composite at 1e7 float32, once as torch allocates by default and once under
THP_MEM_ALLOC_ENABLE=1 (torch then asks for huge pages for every allocation of 2 MiB or more,
what opgen's outputs always do). Each setting runs in a process of its own (torch reads the
variable once); medians of torch.utils.benchmark, as in bench.py.

    .venv/bin/python benchmarks/huge_pages.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import torch
from torch.utils import benchmark
import opgen
ops = opgen.load({root!r})

def median_us(fn):
    t = benchmark.Timer(stmt="fn()", globals={{"fn": fn}}, num_threads=torch.get_num_threads())
    return t.blocked_autorange(min_run_time=1.0).median * 1e6

n = 10 ** 7
a, b = torch.randn(n), torch.randn(n)
x = a.clone().requires_grad_()
grad = torch.ones(n)
gelu = lambda t: 0.5 * t * (1 + torch.tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)))
rows = [
    ("weighted_sum", median_us(lambda: ops.weighted_sum(a, b, weight=0.5)), median_us(lambda: 0.5 * a + b)),
    ("gelu", median_us(lambda: ops.gelu(a)), median_us(lambda: gelu(a))),
    ("gelu fwd+bwd", median_us(lambda: torch.autograd.grad(ops.gelu(x), x, grad)),
     median_us(lambda: torch.autograd.grad(gelu(x), x, grad))),
]
for name, generated, eager in rows:
    print(f"{{name}},{{generated:.0f}},{{eager:.0f}}")
"""


def main() -> int:
    print(f"{'1e7 float32, median us':<24} {'torch allocates':>22} {'generated':>10} {'eager':>10} {'ratio':>6}")
    for label, extra in (("by default", {}), ("THP_MEM_ALLOC_ENABLE=1", {"THP_MEM_ALLOC_ENABLE": "1"})):
        env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | extra
        out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT))], env=env, check=True,
                             capture_output=True, text=True).stdout
        for line in out.strip().splitlines():
            name, generated, eager = line.split(",")
            print(f"{name:<24} {label:>22} {generated:>10} {eager:>10} {float(eager) / float(generated):>5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
