"""Side-by-side timings of generated ops: kernels (forward, backward) and call overhead, then
the generator (benchmarks/generator_speed.py) and the build (benchmarks/build_speed.py).

    .venv/bin/python benchmarks/bench.py               # everything (~15 min), writes benchmarks/results/
    .venv/bin/python benchmarks/bench.py --skip-build  # without the 6-minute build section
    .venv/bin/python benchmarks/bench.py --quick       # a smoke run: small sizes, no torch.compile, kernels only

Every row compares methods measured in the same process with torch.utils.benchmark (medians
over repeated blocks, warm-up excluded), in three interleaved rounds of all the row's methods,
each method's median round reported. Ratios are steadier than absolute numbers on a shared
machine.
"""

from __future__ import annotations

import argparse
import csv
import platform
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.utils import benchmark

import opgen

ROOT = Path(__file__).resolve().parent.parent
ops = opgen.load(ROOT)
F = torch.nn.functional


def median_us(fn, min_run_time: float, threads: int | None = None) -> float:
    # Timer runs on one thread unless told otherwise
    t = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads or torch.get_num_threads())
    return t.blocked_autorange(min_run_time=min_run_time).median * 1e6


ROUNDS = 3  # each row's methods are timed in this many interleaved rounds


def interleaved_medians(methods: dict, min_run_time: float, rounds: int = ROUNDS, threads: int | None = None) -> dict[str, float]:
    """Median microseconds of each method over `rounds` rounds, every method once per round (for
    min_run_time / rounds seconds): a slow spell of the machine then hits all the methods alike,
    not one of them."""
    times: dict[str, list[float]] = {key: [] for key in methods}
    for _ in range(rounds):
        for key, fn in methods.items():
            times[key].append(median_us(fn, min_run_time / rounds, threads))
    return {key: statistics.median(t) for key, t in times.items()}


@dataclass(frozen=True)
class KernelCase:
    """One shipped pointwise op as a kernel row times it: the generated op, its out= overload, the
    spec's expression written with ATen ops (what a user would write without opgen), and torch's
    own single op for it where one exists."""

    name: str
    inputs: int
    generated: Callable
    eager: Callable
    aten: Callable | None = None
    into: Callable | None = None  # the out= overload, for ops that have one
    differentiable: bool = True


def _zero(x):
    return x.new_zeros(())


KERNEL_CASES = [
    # the fused expressions of three or more ops first
    KernelCase("weighted_sum", 2, lambda a, b: ops.weighted_sum(a, b, weight=0.5), lambda a, b: 0.5 * a + b,
               lambda a, b: torch.add(b, a, alpha=0.5), lambda a, b, out: ops.weighted_sum.out(a, b, weight=0.5, out=out)),
    KernelCase("gelu", 1, lambda x: ops.gelu(x),
               lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))),
               lambda x: F.gelu(x, approximate="tanh"), lambda x, out: ops.gelu.out(x, out=out)),
    KernelCase("bias_gelu", 2, lambda x, b: ops.bias_gelu(x, b),
               lambda x, b: (lambda y: 0.5 * y * (1 + torch.tanh(0.7978845608028654 * (y + 0.044715 * y * y * y))))(x + b),
               lambda x, b: F.gelu(x + b, approximate="tanh"), lambda x, b, out: ops.bias_gelu.out(x, b, out=out)),
    KernelCase("softplus", 1, lambda x: ops.softplus(x, beta=2.0),
               lambda x: torch.where(2.0 * x > 20.0, x, torch.log1p(torch.exp(2.0 * x)) / 2.0),
               lambda x: F.softplus(x, beta=2.0), lambda x, out: ops.softplus.out(x, beta=2.0, out=out)),
    KernelCase("actnorm", 3, lambda x, b, s: ops.actnorm(x, b, s), lambda x, b, s: (x + b) * torch.exp(s),
               into=lambda x, b, s, out: ops.actnorm.out(x, b, s, out=out)),
    KernelCase("sigmoid", 1, lambda x: ops.sigmoid(x), lambda x: 1 / (1 + torch.exp(-x)), torch.sigmoid,
               lambda x, out: ops.sigmoid.out(x, out=out)),
    KernelCase("isclose", 2, lambda a, b: ops.isclose(a, b, rtol=1e-5, atol=1e-8),
               lambda a, b: (a == b) | ((a - b).isfinite() & ((a - b).abs() <= 1e-8 + 1e-5 * b.abs())),
               lambda a, b: torch.isclose(a, b, rtol=1e-5, atol=1e-8),
               lambda a, b, out: ops.isclose.out(a, b, rtol=1e-5, atol=1e-8, out=out), differentiable=False),
    KernelCase("to_cartesian", 2, lambda r, t: ops.to_cartesian(r, t), lambda r, t: (r * torch.cos(t), r * torch.sin(t))),
    # single ATen ops: the generated kernel against torch's own
    KernelCase("add", 2, lambda a, b: ops.add(a, b, alpha=0.5), lambda a, b: a + 0.5 * b,
               lambda a, b: torch.add(a, b, alpha=0.5), lambda a, b, out: ops.add.out(a, b, alpha=0.5, out=out)),
    KernelCase("relu", 1, lambda x: ops.relu(x), lambda x: torch.maximum(x, _zero(x)), torch.relu,
               lambda x, out: ops.relu.out(x, out=out)),
    KernelCase("clamp", 1, lambda x: ops.clamp(x, min=-0.5, max=0.5),
               lambda x: torch.minimum(torch.maximum(x, _zero(x) - 0.5), _zero(x) + 0.5),
               lambda x: torch.clamp(x, min=-0.5, max=0.5), lambda x, out: ops.clamp.out(x, min=-0.5, max=0.5, out=out)),
]


def fwd_bwd(fn, leaves, grad):
    """Forward and backward of every output, as `torch.autograd.grad` with all-ones incoming gradients."""
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    return torch.autograd.grad(outs, leaves, (grad,) * len(outs))


def kernel_rows(sizes, use_compile: bool, min_run_time: float, dtype=torch.float32, names=None):
    rows = []
    for case in KERNEL_CASES:
        if names and case.name not in names:
            continue
        for size in sizes:
            inputs = [torch.randn(int(size), dtype=dtype) for _ in range(case.inputs)]
            row = {"op": case.name, "dtype": str(dtype).removeprefix("torch."), "elements": int(size)}
            methods = {"generated_us": lambda: case.generated(*inputs)}
            if case.into is not None:
                out = torch.empty_like(case.generated(*inputs))
                methods["generated_out_us"] = lambda: case.into(*inputs, out=out)
            methods["eager_composite_us"] = lambda: case.eager(*inputs)
            if case.aten is not None:
                methods["aten_op_us"] = lambda: case.aten(*inputs)
            if use_compile:
                compiled = torch.compile(case.eager, dynamic=False)
                compiled(*inputs)
                methods["torch_compile_us"] = lambda: compiled(*inputs)
            copy_to = torch.empty_like(inputs[0])
            methods["copy_ceiling_us"] = lambda: copy_to.copy_(inputs[0])
            if case.differentiable:
                # forward + backward of every output: fused generated vs eager autograd of the composite
                leaves = [t.clone().requires_grad_() for t in inputs]
                grad = torch.ones(int(size), dtype=dtype)
                methods["generated_fwd_bwd_us"] = lambda: fwd_bwd(case.generated, leaves, grad)
                methods["eager_fwd_bwd_us"] = lambda: fwd_bwd(case.eager, leaves, grad)
                if case.aten is not None:  # torch's own op and its own backward: the floor for ops with nothing to fuse
                    methods["aten_op_fwd_bwd_us"] = lambda: fwd_bwd(case.aten, leaves, grad)
            row.update(interleaved_medians(methods, min_run_time))
            row["speedup_vs_eager"] = row["eager_composite_us"] / row["generated_us"]
            if "aten_op_us" in row:
                row["speedup_vs_aten_op"] = row["aten_op_us"] / row["generated_us"]
            if case.differentiable:
                row["bwd_speedup_vs_eager"] = row["eager_fwd_bwd_us"] / row["generated_fwd_bwd_us"]
                if "aten_op_fwd_bwd_us" in row:
                    row["bwd_speedup_vs_aten_op"] = row["aten_op_fwd_bwd_us"] / row["generated_fwd_bwd_us"]
            rows.append(row)
            print_row(row)
    return rows


def overhead_cases() -> dict:
    """The ways to compute `w * a + b` on 8 floats that the overhead rows compare: by name, a call
    without grad and one with. Registers a Python custom_op: call once per process."""
    a, b = torch.randn(8), torch.randn(8)
    ag, bg = a.clone().requires_grad_(), b.clone().requires_grad_()

    @torch.library.custom_op("opgen_bench::weighted_sum", mutates_args=())
    def py_weighted_sum(a: torch.Tensor, b: torch.Tensor, weight: float) -> torch.Tensor:
        return torch.add(b, a, alpha=weight)

    @py_weighted_sum.register_fake
    def _(a, b, weight):
        return torch.empty_like(a)

    def py_backward(ctx, grad):
        return grad * ctx.weight, grad, None

    def py_setup(ctx, inputs, output):
        ctx.weight = inputs[2]

    py_weighted_sum.register_autograd(py_backward, setup_context=py_setup)
    sys.path.insert(0, str(ROOT / "generated" / "python"))
    import opgen_ops

    cases = {
        "torch.add(b, a, alpha=w)": (lambda: torch.add(b, a, alpha=0.5), lambda: torch.add(bg, ag, alpha=0.5)),
        # ATen's own add through the same Python path as ours: what torch.ops itself costs
        "torch.ops.aten.add": (lambda: torch.ops.aten.add(b, a, alpha=0.5), lambda: torch.ops.aten.add(bg, ag, alpha=0.5)),
        "torch.ops (generated)": (lambda: ops.weighted_sum(a, b, weight=0.5), lambda: ops.weighted_sum(ag, bg, weight=0.5)),
        "typed API (generated)": (lambda: opgen_ops.weighted_sum(a, b, weight=0.5), lambda: opgen_ops.weighted_sum(ag, bg, weight=0.5)),
        "Python custom_op": (lambda: py_weighted_sum(a, b, 0.5), lambda: py_weighted_sum(ag, bg, 0.5)),
    }
    return cases


def overhead_rows(min_run_time: float):
    cases = overhead_cases()
    rows = []
    for name, (plain, with_grad) in cases.items():
        row = {"method": name, "no_grad_us": median_us(plain, min_run_time), "requires_grad_us": median_us(with_grad, min_run_time)}
        rows.append(row)
        print(f"  {name:28} {row['no_grad_us']:8.2f} us   with grad {row['requires_grad_us']:8.2f} us")
    base = rows[0]
    for row in rows:
        row["ratio_to_torch_add"] = row["no_grad_us"] / base["no_grad_us"]
    return rows


COLUMNS = [("generated_us", "generated"), ("generated_out_us", "out="), ("eager_composite_us", "eager"),
           ("aten_op_us", "aten op"), ("torch_compile_us", "compile"), ("copy_ceiling_us", "copy"),
           ("generated_fwd_bwd_us", "| fwd+bwd generated"), ("eager_fwd_bwd_us", "eager"), ("aten_op_fwd_bwd_us", "aten op")]


def print_row(row):
    cells = "  ".join(f"{label} {row[key]:10.1f}" if key in row else f"{label} {'-':>10}" for key, label in COLUMNS)
    print(f"  {row['op']:13} {row['dtype']:>8} {row['elements']:>9}  {cells}  (us)", flush=True)


def plot(path: Path, rows) -> bool:
    """Throughput (elements per microsecond) against size, one panel per op; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (pip install -e .[bench])")
        return False
    ops_ = sorted({r["op"] for r in rows})
    cols = min(3, len(ops_))
    grid_rows = -(-len(ops_) // cols)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(5 * cols, 4 * grid_rows), squeeze=False)
    for ax in axes.flat[len(ops_):]:
        ax.set_visible(False)
    series = [("generated_us", "generated"), ("generated_out_us", "generated, out="), ("eager_composite_us", "eager ATen"),
              ("aten_op_us", "torch's own op"), ("torch_compile_us", "torch.compile"),
              ("copy_ceiling_us", "copy (ceiling)")]
    for ax, op in zip(axes.flat, ops_):
        mine = [r for r in rows if r["op"] == op]
        for index, (key, label) in enumerate(series):
            if key in mine[0]:  # one colour per method in every panel, whichever methods a panel has
                ax.plot([r["elements"] for r in mine], [r["elements"] / r[key] for r in mine], marker="o", label=label,
                        color=f"C{index}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{op}, float32")
        ax.set_xlabel("elements")
        ax.set_ylabel("elements per us (higher is better)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def write_csv(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        fields = list(dict.fromkeys(key for r in rows for key in r))  # rows without a column leave it empty
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="small sizes, no torch.compile, short timings (CI smoke)")
    p.add_argument("--skip-build", action="store_true", help="leave out the build section (minutes)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--ops", help="comma-separated kernel rows to run (default: every shipped pointwise op)")
    args = p.parse_args(argv)
    sizes = [1e3, 1e5] if args.quick else [1e3, 1e5, 1e6, 1e7]
    min_run_time = 0.05 if args.quick else 0.5
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("kernels (median us; lower is better):")
    names = args.ops.split(",") if args.ops else None
    unknown = set(names or ()) - {case.name for case in KERNEL_CASES}
    if unknown:
        p.error(f"--ops: no kernel row for {', '.join(sorted(unknown))}; rows: {', '.join(c.name for c in KERNEL_CASES)}")
    kernels = kernel_rows(sizes, use_compile=not args.quick, min_run_time=min_run_time, names=names)
    kernels += kernel_rows(sizes[:-1] if len(sizes) > 2 else sizes, use_compile=False, min_run_time=min_run_time,
                           dtype=torch.bfloat16, names=names)
    print("call overhead, 8 floats (median us):")
    overhead = overhead_rows(min_run_time)
    if not args.quick:
        write_csv(Path(args.out) / "kernels.csv", kernels)
        write_csv(Path(args.out) / "overhead.csv", overhead)
        plotted = plot(Path(args.out) / "kernels.png", [r for r in kernels if r["dtype"] == "float32"])
        print(f"wrote {args.out}/kernels.csv, overhead.csv" + (" and kernels.png" if plotted else ""))
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import generator_speed

        print("generator (seconds, whole processes):")
        generator_speed.main()
        if not args.skip_build:
            import build_speed

            print("build of the shipped library:")
            build_speed.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
