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
from pathlib import Path

import torch
from torch.utils import benchmark

import opgen

ROOT = Path(__file__).resolve().parent.parent
ops = opgen.load(ROOT)


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


def kernel_rows(sizes, use_compile: bool, min_run_time: float, dtype=torch.float32):
    cases = {
        "weighted_sum": (2, lambda a, b: ops.weighted_sum(a, b, weight=0.5), lambda a, b: 0.5 * a + b),
        "gelu": (1, lambda x: ops.gelu(x), lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))),
        "softplus": (1, lambda x: ops.softplus(x, beta=2.0), lambda x: torch.where(2.0 * x > 20.0, x, torch.log1p(torch.exp(2.0 * x)) / 2.0)),
    }
    # the same ops writing into a buffer the caller reuses (the out= overload)
    into = {
        "weighted_sum": lambda a, b, out: ops.weighted_sum.out(a, b, weight=0.5, out=out),
        "gelu": lambda x, out: ops.gelu.out(x, out=out),
        "softplus": lambda x, out: ops.softplus.out(x, beta=2.0, out=out),
    }
    # torch's own single op for the same expression, where it has one (its fused ATen kernel)
    aten = {
        "weighted_sum": lambda a, b: torch.add(b, a, alpha=0.5),
        "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
        "softplus": lambda x: torch.nn.functional.softplus(x, beta=2.0),
    }
    rows = []
    for name, (n_in, generated, composite) in cases.items():
        for size in sizes:
            inputs = [torch.randn(int(size), dtype=dtype) for _ in range(n_in)]
            out = torch.empty(int(size), dtype=dtype)
            row = {"op": name, "dtype": str(dtype).removeprefix("torch."), "elements": int(size)}
            methods = {
                "generated_us": lambda: generated(*inputs),
                "generated_out_us": lambda: into[name](*inputs, out=out),
                "eager_composite_us": lambda: composite(*inputs),
                "aten_op_us": lambda: aten[name](*inputs),
            }
            if use_compile:
                compiled = torch.compile(composite, dynamic=False)
                compiled(*inputs)
                methods["torch_compile_us"] = lambda: compiled(*inputs)
            methods["copy_ceiling_us"] = lambda: out.copy_(inputs[0])
            # backward: forward + backward of a sum, fused generated vs eager autograd of the composite
            leaves = [t.clone().requires_grad_() for t in inputs]
            grad = torch.ones(int(size), dtype=dtype)
            methods["generated_fwd_bwd_us"] = lambda: torch.autograd.grad(generated(*leaves), leaves, grad)
            methods["eager_fwd_bwd_us"] = lambda: torch.autograd.grad(composite(*leaves), leaves, grad)
            row.update(interleaved_medians(methods, min_run_time))
            row["speedup_vs_eager"] = row["eager_composite_us"] / row["generated_us"]
            row["bwd_speedup_vs_eager"] = row["eager_fwd_bwd_us"] / row["generated_fwd_bwd_us"]
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


def print_row(row):
    extra = f" compile {row['torch_compile_us']:10.1f}" if "torch_compile_us" in row else ""
    print(f"  {row['op']:13} {row['dtype']:>8} {row['elements']:>9}  generated {row['generated_us']:10.1f}  out= {row['generated_out_us']:10.1f}"
          f"  eager {row['eager_composite_us']:10.1f}  aten op {row['aten_op_us']:10.1f}"
          f"{extra}  copy {row['copy_ceiling_us']:9.1f}  | fwd+bwd generated {row['generated_fwd_bwd_us']:10.1f}"
          f"  eager {row['eager_fwd_bwd_us']:10.1f}  (us)")


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
    fig, axes = plt.subplots(1, len(ops_), figsize=(5 * len(ops_), 4), squeeze=False)
    series = [("generated_us", "generated"), ("generated_out_us", "generated, out="), ("eager_composite_us", "eager ATen"),
              ("aten_op_us", "torch's own op"), ("torch_compile_us", "torch.compile"),
              ("copy_ceiling_us", "copy (ceiling)")]
    for ax, op in zip(axes[0], ops_):
        mine = [r for r in rows if r["op"] == op]
        for key, label in series:
            if key in mine[0]:
                ax.plot([r["elements"] for r in mine], [r["elements"] / r[key] for r in mine], marker="o", label=label)
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
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="small sizes, no torch.compile, short timings (CI smoke)")
    p.add_argument("--skip-build", action="store_true", help="leave out the build section (minutes)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = p.parse_args(argv)
    sizes = [1e3, 1e5] if args.quick else [1e3, 1e5, 1e6, 1e7]
    min_run_time = 0.05 if args.quick else 0.5
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}, "
          f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("kernels (median us; lower is better):")
    kernels = kernel_rows(sizes, use_compile=not args.quick, min_run_time=min_run_time)
    kernels += kernel_rows(sizes[:-1] if len(sizes) > 2 else sizes, use_compile=False, min_run_time=min_run_time,
                           dtype=torch.bfloat16)
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
