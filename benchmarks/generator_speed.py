"""Time `opgen generate` and `opgen check` on 100 and 1,000 synthetic specs, and torchgen's
parse and whole generation of native_functions.yaml (shipped with torch) per op, in one run. Times are medians of 3
runs. "render" is parsing and rendering in memory (workers included, file writes excluded): on a disk where creating a file
costs 0.05-0.4 ms, writing the (at most) 5 files of each op can cost as much as making them.

"cold, tmpfs" is the same cold run in a folder in memory (/dev/shm): on these VMs the disk
stalls for seconds at times, and that column shows what the generator itself costs.

Each command runs as an installed opgen does: with its modules' bytecode compiled (a warm-up run
writes it even where PYTHONDONTWRITEBYTECODE is set), and after `sync`, so that the writeback of
a previous run's files does not land in the next one's time.

    .venv/bin/python benchmarks/generator_speed.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEMORY_DISK = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
REPEAT = 3  # medians of this many runs: these machines are noisy
TEMPLATE = (ROOT / "specs" / "softplus.yaml").read_text()


def make_project(folder: Path, n: int) -> None:
    (folder / "specs").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "synthetic"\n')
    for i in range(n):
        (folder / "specs" / f"op{i:04d}.yaml").write_text(TEMPLATE.replace("softplus(", f"op{i:04d}("))


RENDER = """
import os, sys, time
start = time.perf_counter()
from opgen.config import load_config
from opgen.pipeline import load_and_generate
load_and_generate(load_config(sys.argv[1]))
print(time.perf_counter() - start, flush=True)
os._exit(0)  # as the opgen command does: no interpreter teardown
"""


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    os.sync()
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - start


def torchgen_parse_per_op() -> tuple[float, int] | None:
    try:
        import torchgen
        from torchgen.gen import parse_native_yaml
    except ImportError:
        return None
    base = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    if not (base / "native_functions.yaml").is_file():
        return None
    start = time.perf_counter()
    parsed = parse_native_yaml(str(base / "native_functions.yaml"), str(base / "tags.yaml"))
    return (time.perf_counter() - start) / len(parsed.native_functions), len(parsed.native_functions)


def torchgen_generate_per_op(n_ops: int) -> float | None:
    """A whole `python -m torchgen.gen` run over the wheel's native_functions.yaml (ATen's
    generated sources and headers into a folder in memory), per native function."""
    try:
        import torchgen
    except ImportError:
        return None
    source = Path(torchgen.__file__).parent / "packaged" / "ATen"
    if not (source / "templates").is_dir():
        return None
    with tempfile.TemporaryDirectory(dir=MEMORY_DISK) as out:
        # every output folder inside `out`: torchgen's defaults for the AOTI shims and the
        # header-only files are relative to the working directory
        cmd = [
            sys.executable, "-m", "torchgen.gen", "--source-path", str(source), "--install_dir", out,
            "--aoti-install-dir", os.path.join(out, "aoti"), "--headeronly-install-dir", os.path.join(out, "headeronly"),
        ]
        os.sync()
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV, cwd=out)
        return (time.perf_counter() - start) / n_ops


def main() -> int:
    opgen = [sys.executable, "-m", "opgen"]
    with tempfile.TemporaryDirectory() as warm:  # compiles opgen's bytecode, fills Jinja's template cache
        make_project(Path(warm) / "proj", 2)
        subprocess.run([*opgen, "--project", str(Path(warm) / "proj"), "generate"], check=True, stdout=subprocess.DEVNULL, env=ENV)
    print(f"{'specs':>6} {'generate (cold)':>16} {'cold, tmpfs':>14} {'generate (no-op)':>17} {'check':>8} {'render':>8} {'per op':>10}")
    for n in (100, 1000):
        runs = []
        for _ in range(REPEAT):  # a fresh project each time: "cold" finds no generated/ folder
            folder = Path(tempfile.mkdtemp()) / "proj"
            try:
                make_project(folder, n)
                runs.append([timed([*opgen, "--project", str(folder), "generate"]),
                             timed([*opgen, "--project", str(folder), "generate"]),
                             timed([*opgen, "--project", str(folder), "check"]),
                             timed([sys.executable, "-c", RENDER, str(folder)])])
            finally:
                shutil.rmtree(folder.parent)
            if MEMORY_DISK:  # the same into memory: the generator's own time, without the disk's stalls
                folder = Path(tempfile.mkdtemp(dir=MEMORY_DISK)) / "proj"
                try:
                    make_project(folder, n)
                    runs[-1].append(timed([*opgen, "--project", str(folder), "generate"]))
                finally:
                    shutil.rmtree(folder.parent)
            else:
                runs[-1].append(float("nan"))
        cold, warm, check, render, in_memory = (statistics.median(column) for column in zip(*runs))
        print(f"{n:>6} {cold:>15.2f}s {in_memory:>13.2f}s {warm:>16.2f}s {check:>7.2f}s {render:>7.2f}s {cold / n * 1e3:>8.2f}ms")
    parsed = torchgen_parse_per_op()
    if parsed is not None:
        per_op, n_ops = parsed
        print(f"torchgen parse of native_functions.yaml: {per_op * 1e3:.2f} ms per op")
        generate = torchgen_generate_per_op(n_ops)
        if generate is not None:
            print(f"torchgen generate (python -m torchgen.gen, ATen's files, into tmpfs): {generate * 1e3:.2f} ms per op; "
                  f"opgen's cold generate of {n:,} specs into tmpfs: {in_memory / n * 1e3:.2f} ms per op, "
                  f"{generate / (in_memory / n):.1f}x faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
