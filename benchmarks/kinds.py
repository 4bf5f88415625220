"""Reductions and hand-written kernels against PyTorch, side by side in one run.

    .venv/bin/python benchmarks/kinds.py            # full: prints a table, writes results/kinds.csv
    .venv/bin/python benchmarks/kinds.py --quick    # CI smoke: small sizes, short timings

Each row: the generated op, the same computation as eager ATen ops (the composite a user would
write), and torch's own fused op where one exists; medians of repeated timings in microseconds,
float32, warm-up excluded. Ratios > 1 mean the generated op is faster.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import torch

from bench import ROOT, median_us, ops, write_csv

F = torch.nn.functional


def cases(rows: int, cols: int):
    x = torch.randn(rows, cols)
    w, b = torch.randn(cols), torch.randn(cols)
    lin_w = torch.randn(256, cols)
    xs = [torch.randn(rows, cols) for _ in range(4)]
    return [
        # name, shape label, generated, eager composite, torch's fused op (or None)
        ("sum_squares last dim", lambda: ops.sum_squares(x, [-1]), lambda: (x * x).sum(-1), None),
        ("sum_squares all", lambda: ops.sum_squares(x, []), lambda: (x * x).sum(), None),
        ("sum_squares dim 0", lambda: ops.sum_squares(x, [0]), lambda: (x * x).sum(0), None),
        ("logsumexp dim 0", lambda: ops.logsumexp(x, [0]),
         lambda: (lambda m: (x - m).exp().sum(0, keepdim=True).log() + m)(x.amax(0, keepdim=True)).squeeze(0),
         lambda: torch.logsumexp(x, 0)),
        ("l2_norm last dim", lambda: ops.l2_norm(x, [-1]), lambda: (x * x).sum(-1).sqrt(), lambda: torch.linalg.vector_norm(x, dim=-1)),
        ("logsumexp last dim", lambda: ops.logsumexp(x, [-1]),
         lambda: (lambda m: (x - m).exp().sum(-1, keepdim=True).log() + m)(x.amax(-1, keepdim=True)).squeeze(-1),
         lambda: torch.logsumexp(x, -1)),
        ("rms all", lambda: ops.rms(x, []), lambda: (x * x).mean().sqrt(), None),
        ("abs_max last dim", lambda: ops.abs_max(x, [-1]), lambda: x.abs().amax(-1), None),
        ("max dim 1 (+indices)", lambda: ops.max(x, 1), lambda: x.max(1), None),
        ("rms_norm", lambda: ops.rms_norm(x, w), lambda: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
         lambda: F.rms_norm(x, (cols,), w, 1e-6)),
        ("layer_norm", lambda: ops.layer_norm(x, w, b)[0], lambda: (x - x.mean(-1, keepdim=True)) * torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5) * w + b,
         lambda: F.layer_norm(x, (cols,), w, b)),
        ("linear (256 out)", lambda: ops.linear(x, lin_w, None), lambda: x @ lin_w.T, lambda: F.linear(x, lin_w)),
        ("add_n of 4", lambda: ops.add_n(xs), lambda: xs[0] + xs[1] + xs[2] + xs[3], lambda: torch.stack(xs).sum(0)),
    ]


def middle_cases(batches: int, rows: int, cols: int):
    """Reductions over the middle dim of [batch, sequence, features]-shaped inputs (and one over
    the outer two), where the kept features are the contiguous dim."""
    x = torch.randn(batches, rows, cols)
    return [
        ("sum_squares dim 1", lambda: ops.sum_squares(x, [1]), lambda: (x * x).sum(1), None),
        ("l2_norm dim 1", lambda: ops.l2_norm(x, [1]), lambda: (x * x).sum(1).sqrt(), lambda: torch.linalg.vector_norm(x, dim=1)),
        ("rms dim 1", lambda: ops.rms(x, [1]), lambda: (x * x).mean(1).sqrt(), None),
        ("abs_max dim 1", lambda: ops.abs_max(x, [1]), lambda: x.abs().amax(1), None),
        ("max dim 1 (+indices)", lambda: ops.max(x, 1), lambda: x.max(1), None),
        ("logsumexp dim 1", lambda: ops.logsumexp(x, [1]),
         lambda: (lambda m: (x - m).exp().sum(1, keepdim=True).log() + m)(x.amax(1, keepdim=True)).squeeze(1),
         lambda: torch.logsumexp(x, 1)),
        ("sum_squares dims 0, 2", lambda: ops.sum_squares(x, [0, 2]), lambda: (x * x).sum((0, 2)), None),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    shapes = [(64, 512), (4, 64, 32)] if args.quick else [(64, 512), (1000, 10000), (64, 512, 256), (256, 1024, 16)]
    min_run_time = 0.05 if args.quick else 0.5
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")
    print(f"{'op':24} {'shape':>12} {'opgen us':>10} {'eager us':>10} {'torch us':>10} {'vs eager':>9} {'vs torch':>9}")
    rows = []
    for shape in shapes:
        for name, gen, eager, fused in (cases(*shape) if len(shape) == 2 else middle_cases(*shape)):
            g, e = median_us(gen, min_run_time), median_us(eager, min_run_time)
            t = median_us(fused, min_run_time) if fused else float("nan")
            rows.append({"op": name, "shape": "x".join(map(str, shape)), "opgen_us": g, "eager_us": e, "torch_us": t,
                         "speedup_vs_eager": e / g, "speedup_vs_torch": t / g})
            print(f"{name:24} {rows[-1]['shape']:>12} {g:10.1f} {e:10.1f} {t:10.1f} {e / g:9.2f} {t / g:9.2f}")
    if not args.quick:
        write_csv(Path(args.out) / "kinds.csv", rows)
        print(f"wrote {args.out}/kinds.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
