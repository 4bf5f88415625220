"""CUDA timings of every generated op: forward and forward+backward against eager PyTorch (the
spec's reference, run with ATen ops in the same dtype) and against a device-to-device copy of
the same number of elements (the bandwidth ceiling).

    .venv-cuda/bin/python benchmarks/gpu_bench.py --out benchmarks/results/gpu

Needs a GPU and a library built with `opgen build --cuda on`; benchmarks/gpu_check.sh runs it.
Writes gpu_kernels.csv and gpu_kernels.md (a table) under --out.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import torch
from torch.utils import benchmark

import opgen
from opgen import testing

ROOT = Path(__file__).resolve().parent.parent


def median_us(fn, min_run_time: float) -> float:
    # torch.utils.benchmark synchronizes CUDA around each measured block
    return benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median * 1e6


def as_tuple(value) -> tuple[torch.Tensor, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def op_rows(ops, namespace: str, names: list[str], sizes, dtypes, min_run_time: float, device: str = "cuda"):
    rows = []
    for name in names:
        op = testing.load_op(ROOT, name)
        if not op.is_pointwise or op.kernel.bool_output:
            print(f"  {name}: skipped (this table is for pointwise ops with floating outputs)")
            continue
        if op.test.shapes or op.shape.kind == "explicit":
            print(f"  {name}: skipped (explicit shapes)")
            continue
        generated = getattr(ops, name).default
        reference = testing.reference_fn(namespace, op)
        attrs = testing.attribute_sets(op)[0]
        for dtype in dtypes:
            if dtype not in {d.name for d in op.dtypes}:
                continue
            dt = getattr(torch, dtype)
            for n in sizes:
                gen = torch.Generator().manual_seed(0)
                tensors = {a.name: testing.make_tensor(op, a.name, (int(n),), dt, gen, device=device) for a in op.tensor_inputs}
                args, kwargs = testing.call_args(op, tensors, attrs)
                outs = as_tuple(generated(*args, **kwargs))
                for got, want in zip(outs, as_tuple(reference(*args, **kwargs)), strict=True):
                    torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)
                out = outs[0]
                src, dst = tensors[op.tensor_inputs[0].name], torch.empty_like(out)
                row = {"op": name, "dtype": dtype, "elements": int(n)}
                row["generated_us"] = median_us(lambda: generated(*args, **kwargs), min_run_time)
                row["eager_us"] = median_us(lambda: reference(*args, **kwargs), min_run_time)
                row["copy_us"] = median_us(lambda: dst.copy_(src), min_run_time)
                moved = (len(tensors) + len(outs)) * int(n) * out.element_size()
                row["generated_GBps"] = moved / row["generated_us"] / 1e3
                row["copy_GBps"] = 2 * int(n) * out.element_size() / row["copy_us"] / 1e3
                if op.gradient is not None and dt.is_floating_point:
                    leaves = {k: v.clone().requires_grad_() for k, v in tensors.items()}
                    largs, lkwargs = testing.call_args(op, leaves, attrs)
                    grad = tuple(torch.ones_like(o) for o in outs)
                    inputs = list(leaves.values())
                    row["generated_fwd_bwd_us"] = median_us(
                        lambda: torch.autograd.grad(generated(*largs, **lkwargs), inputs, grad), min_run_time)
                    row["eager_fwd_bwd_us"] = median_us(
                        lambda: torch.autograd.grad(reference(*largs, **lkwargs), inputs, grad, allow_unused=True), min_run_time)
                rows.append(row)
                print("  " + "  ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
    return rows


def write(out: Path, rows) -> None:
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with (out / "gpu_kernels.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()})
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (smoke run, not a GPU measurement)"
    lines = [f"device: {where}, torch {torch.__version__}; median us (lower is better)", "",
             "| op | dtype | elements | generated | eager | copy | generated GB/s | copy GB/s | fwd+bwd generated | fwd+bwd eager |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["op"], r["dtype"], f"{r['elements']:.0e}"] + [
            f"{r[k]:.1f}" if k in r else "-" for k in
            ("generated_us", "eager_us", "copy_us", "generated_GBps", "copy_GBps", "generated_fwd_bwd_us", "eager_fwd_bwd_us")]
        lines.append("| " + " | ".join(cells) + " |")
    (out / "gpu_kernels.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu"))
    p.add_argument("--quick", action="store_true", help="one size, short timings")
    p.add_argument("--device", default="cuda", help="'cpu' runs the same code as a smoke test (CI)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_bench: no CUDA device; nothing to time (--device cpu for a smoke run)", file=sys.stderr)
        return 2
    ops = opgen.load(ROOT)
    manifest = json.loads((ROOT / "generated" / "opgen-manifest.json").read_text())
    sizes = [1e4] if args.quick else [1e5, 1e6, 1e7, 1e8]
    rows = op_rows(ops, manifest["namespace"], manifest["ops"], sizes, ("float32", "bfloat16"), 0.02 if args.quick else 0.3,
                   args.device)
    write(Path(args.out), rows)
    print(f"wrote {args.out}/gpu_kernels.csv and gpu_kernels.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
