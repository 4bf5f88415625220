"""Build times of the shipped library, in a copy of the project: from scratch, with nothing to
do, after editing one spec, and of a second project that finds the precompiled headers already
made (they are shared by every project on the machine); seconds per translation unit.

    .venv/bin/python benchmarks/build_speed.py      # about 6 minutes on 2 cores

The edit changes softplus's kernel expression, so that op's translation units (its op file and
its kernel, once per CPU capability) are rebuilt and nothing else. ccache is turned off and the
shared cache of precompiled headers starts empty (a temporary one), so "from scratch" means
compiling everything. Last, one at a time with nothing else running (interleaved rounds, medians): softplus's op
file and its AVX2 kernel with the build's own command lines, and the same flags on a file that
only includes <torch/extension.h> (what a hand-written extension starts from), for the ratio.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
import sys
import sysconfig
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
        if len(parts) >= 2 and parts[0].replace(".", "", 1).isdigit():
            steps[parts[1]] = float(parts[0])
    return steps


def _alone(project: Path, obj: str) -> float:
    """Seconds to compile one object of the build with its own command line, nothing else running."""
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    build = project / "build"
    cmd = subprocess.run([ninja, "-f", str(build / "build.ninja"), "-t", "commands", str(build / obj)],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    seconds, _ = _timed(["sh", "-c", cmd], project)
    return seconds


def _extension_h_alone(project: Path, obj: str) -> float:
    """The same command line as ``obj``'s, on a file that only includes <torch/extension.h>."""
    ninja = shutil.which("ninja") or str(Path(sys.executable).parent / "ninja")
    build = project / "build"
    cmd = shlex.split(subprocess.run([ninja, "-f", str(build / "build.ninja"), "-t", "commands", str(build / obj)],
                                     capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    source = project / "extension_h.cpp"
    source.write_text("#include <torch/extension.h>\n")
    out: list[str] = []
    skip = 0
    for i, arg in enumerate(cmd):
        if skip:
            skip -= 1
        elif arg == "-include":  # the precompiled header
            skip = 1
        elif arg in ("-MMD",):
            continue
        elif arg == "-MF":
            skip = 1
        elif arg == "-c":
            out += ["-c", str(source)]
            skip = 1
        elif arg == "-o":
            out += ["-o", str(project / "extension_h.o")]
            skip = 1
        else:
            out.append(arg)
    out.append(f"-isystem{sysconfig.get_paths()['include']}")  # torch/extension.h includes Python.h
    seconds, _ = _timed(out, project)
    return seconds


ALONE_ROUNDS = 3


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OPGEN_CACHE_DIR"] = str(Path(tmp) / "cache")
        project = Path(tmp) / "proj"
        project.mkdir()
        _copy_project(project)
        scratch, _ = _timed([*OPGEN, "build"], project)
        steps = _unit_seconds(project)
        noop, _ = _timed([*OPGEN, "build"], project)
        second = Path(tmp) / "second"
        second.mkdir()
        _copy_project(second)
        shared, _ = _timed([*OPGEN, "build"], second)
        shutil.rmtree(second)
        spec = project / "specs" / "softplus.yaml"
        spec.write_text(spec.read_text().replace("log1p(exp(beta * x)) / beta", "log1p(exp(x * beta)) / beta"))
        _timed([*OPGEN, "generate"], project)
        edited, out = _timed([*OPGEN, "build"], project)
        rebuilt = out.strip().splitlines()[-1]
        # interleaved rounds, medians: a slow spell of the machine hits all three alike
        alone = [(_alone(project, "obj/DEFAULT/csrc/ops/softplus.cpp.o"),
                  _alone(project, "obj/AVX2/csrc/kernels/softplus_cpu.cpp.o"),
                  _extension_h_alone(project, "obj/DEFAULT/csrc/ops/softplus.cpp.o")) for _ in range(ALONE_ROUNDS)]
        op_unit, kernel_unit, extension_h = (statistics.median(column) for column in zip(*alone))
    units = {k: v for k, v in steps.items() if k.endswith(".o")}
    pch = {k: v for k, v in steps.items() if k.endswith(".gch")}
    print(f"{'build':<34} {'seconds':>8}")
    print(f"{'from scratch':<34} {scratch:>8.1f}   ({len(units)} translation units, {len(pch)} precompiled headers, 2 jobs)")
    print(f"{'nothing to do':<34} {noop:>8.2f}")
    print(f"{'a second project, same headers':<34} {shared:>8.1f}   (the shared precompiled headers are reused)")
    steps_run = rebuilt.split(" built ")[-1].split(" in ")[0] if " built " in rebuilt else rebuilt
    print(f"{'after editing specs/softplus.yaml':<34} {edited:>8.1f}   {steps_run}")
    if units:
        values = sorted(units.values())
        print(f"per translation unit: median {statistics.median(values):.1f} s, max {values[-1]:.1f} s; "
              f"per precompiled header: {', '.join(f'{v:.1f}' for v in pch.values())} s (each step's own time, two running at once)")
    print(f"one at a time, medians of {ALONE_ROUNDS} interleaved rounds: softplus op file {op_unit:.1f} s, its AVX2 kernel {kernel_unit:.1f} s, "
          f"a file including only <torch/extension.h> {extension_h:.1f} s "
          f"(ratios {op_unit / extension_h:.2f}, {kernel_unit / extension_h:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
