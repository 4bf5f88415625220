"""Time `opgen generate` and `opgen check` on 100 and 1,000 synthetic specs, and torchgen's
parse of native_functions.yaml (shipped with torch) per op, in one run. "render" is parsing and
rendering in memory (workers included, file writes excluded): on a disk where creating a file
costs 0.05-0.4 ms, writing the (at most) 5 files of each op can cost as much as making them.

    .venv/bin/python benchmarks/generator_speed.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def torchgen_parse_per_op() -> float | None:
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
    return (time.perf_counter() - start) / len(parsed.native_functions)


def main() -> int:
    opgen = [sys.executable, "-m", "opgen"]
    print(f"{'specs':>6} {'generate (cold)':>16} {'generate (no-op)':>17} {'check':>8} {'render':>8} {'per op':>10}")
    for n in (100, 1000):
        folder = Path(tempfile.mkdtemp()) / "proj"
        try:
            make_project(folder, n)
            cold = timed([*opgen, "--project", str(folder), "generate"])
            warm = timed([*opgen, "--project", str(folder), "generate"])
            check = timed([*opgen, "--project", str(folder), "check"])
            render = timed([sys.executable, "-c", RENDER, str(folder)])
            print(f"{n:>6} {cold:>15.2f}s {warm:>16.2f}s {check:>7.2f}s {render:>7.2f}s {cold / n * 1e3:>8.2f}ms")
        finally:
            shutil.rmtree(folder.parent)
    per_op = torchgen_parse_per_op()
    if per_op is not None:
        print(f"torchgen parse of native_functions.yaml: {per_op * 1e3:.2f} ms per op")
    return 0


if __name__ == "__main__":
    sys.exit(main())
