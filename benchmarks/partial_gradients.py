"""The fused backward ops called with each `output_mask`: one gradient asked for runs a loop of
its own (computing and reading only that formula), several the loop of all. actnorm with
per-channel bias and log_scale (whose gradient reads x, which x's does not), to_cartesian
(r's and theta's formulas read different saved outputs); interleaved rounds, median us.

    .venv/bin/python benchmarks/partial_gradients.py            # about half a minute
    .venv/bin/python benchmarks/partial_gradients.py --quick    # CI smoke: one small size, short timings

To compare two builds, run it in each (a clone at the other commit, built there) alternately.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import interleaved_medians, ops  # noqa: E402  (loads the built library)

MASKS = {"first": [True, False], "second": [False, True], "both": [True, True]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one small size, short timings (CI smoke)")
    args = p.parse_args()
    sizes, min_run_time = ((64,), 0.03) if args.quick else ((256, 1024, 4096), 0.6)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median us")
    print(f"{'case':44s}" + "".join(f"{k:>10s}" for k in MASKS))
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        x, b, s = torch.randn(n, 1024, generator=gen), torch.randn(1024, generator=gen), torch.randn(1024, generator=gen) * 0.1
        grad = torch.ones(n, 1024)
        sizes = [list(x.shape), list(b.shape), list(s.shape)]
        # actnorm's x and bias share one formula (one kernel output): "first" is x, "second" log_scale
        actnorm = {k: (lambda m=m: ops.actnorm_backward(grad, x, b, s, *sizes, [m[0], False, m[1]])) for k, m in MASKS.items()}
        r, theta = torch.rand(n, 1024, generator=gen), torch.rand(n, 1024, generator=gen)
        px, py = ops.to_cartesian(r, theta)
        polar = {k: (lambda m=m: ops.to_cartesian_backward(grad, grad, theta, px, py, list(r.shape), list(theta.shape), m))
                 for k, m in MASKS.items()}
        for name, methods in ((f"actnorm x[{n},1024] (x / log_scale)", actnorm),
                              (f"to_cartesian r, theta[{n},1024] (r / theta)", polar)):
            t = interleaved_medians(methods, min_run_time=min_run_time)
            print(f"{name:44s}" + "".join(f"{t[k]:10.1f}" for k in MASKS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
