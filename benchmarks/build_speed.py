"""Build times of the shipped library, in a copy of the project: from scratch, with nothing to
do, and after editing one spec; seconds per translation unit from ninja's log.

    .venv/bin/python benchmarks/build_speed.py      # about 6 minutes on 2 cores

The edit changes softplus's kernel expression, so that op's translation units (its op file and
its kernel, once per CPU capability) are rebuilt and nothing else. ccache is turned off, so
"from scratch" means compiling.
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
OPGEN = [sys.executable, "-m", "opgen"]


def _copy_project(dest: Path) -> None:
    for name in ("pyproject.toml", "specs", "generated"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dest / name)


def _timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, "OPGEN_CCACHE": "0"})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.perf_counter() - start, proc.stdout


def _unit_seconds(project: Path) -> dict[str, float]:
    """Seconds of each step of the last build, from `opgen build --timings`."""
    _, out = _timed([*OPGEN, "build", "--timings"], project)
    steps = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].replace(".", "", 1).isdigit():
            steps[parts[1]] = float(parts[0])
    return steps


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "proj"
        project.mkdir()
        _copy_project(project)
        scratch, _ = _timed([*OPGEN, "build"], project)
        steps = _unit_seconds(project)
        noop, _ = _timed([*OPGEN, "build"], project)
        spec = project / "specs" / "softplus.yaml"
        spec.write_text(spec.read_text().replace("log1p(exp(beta * x)) / beta", "log1p(exp(x * beta)) / beta"))
        _timed([*OPGEN, "generate"], project)
        edited, out = _timed([*OPGEN, "build"], project)
        rebuilt = out.strip().splitlines()[-1]
    units = {k: v for k, v in steps.items() if k.endswith(".o")}
    pch = {k: v for k, v in steps.items() if k.endswith(".gch")}
    print(f"{'build':<34} {'seconds':>8}")
    print(f"{'from scratch':<34} {scratch:>8.1f}   ({len(units)} translation units, {len(pch)} precompiled headers, 2 jobs)")
    print(f"{'nothing to do':<34} {noop:>8.2f}")
    print(f"{'after editing specs/softplus.yaml':<34} {edited:>8.1f}   ({rebuilt.split(' built ')[-1] if ' built ' in rebuilt else rebuilt})")
    if units:
        values = sorted(units.values())
        print(f"per translation unit: median {statistics.median(values):.1f} s, max {values[-1]:.1f} s; "
              f"per precompiled header: {', '.join(f'{v:.1f}' for v in pch.values())} s (each step's own time, two running at once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
