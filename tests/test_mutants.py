"""The generated property tests have teeth: each mutant of the generated C++ (a changed
operator, a changed constant, a dropped broadcast reduction, a widened dtype list, a wrong
backward constant) is built and must make the op's generated tests fail; mutants of the
backward's broadcast reduction (a tile of columns read from the row's start in the loop by rows;
no sum_to after the other loops; grad read in place of an input the rows copy out) and of its
element-by-element rows (strided inputs) must fail the generic suite's test of it (`opgen test -k ...`).

Prints the kill rate; every mutant must be killed. The kernels are built for the DEFAULT CPU
capability only: a mutant changes the kernel's source, which every capability compiles alike,
and the main build covers the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (op, generated file, text to find, replacement, only after this marker, the generic suite's
# tests to run instead of the op's generated ones: a pytest -k expression)
MUTANTS = [
    ("weighted_sum", "csrc/kernels/weighted_sum_cpu.cpp", "((_u0 * a) + b)", "((_u0 * a) - b)", None, None),
    ("gelu", "csrc/kernels/gelu_cpu.cpp", "_t(0.044715)", "_t(0.04)", None, None),
    ("weighted_sum", "csrc/ops/weighted_sum.cpp", "opgen::summed_gradient(_g0, opgen::reduced_shape(grad.sym_sizes(), a__shape))", "_g0",
     "// Every input of the grad's shape and layout", None),
    ("gelu", "csrc/ops/gelu.cpp", "at::ScalarType::BFloat16 }", "at::ScalarType::BFloat16, at::ScalarType::Long }", None, None),
    ("gelu", "csrc/kernels/gelu_cpu.cpp", "_t(0.7978845608028654)", "_t(0.79)", "void gelu_backward_contiguous_chunk", None),
    # the TensorIterator's element-by-element rows (strided inputs) of the backward
    ("gelu", "csrc/kernels/gelu_cpu.cpp", "_t(0.7978845608028654)", "_t(0.79)", "void gelu_backward_loop", "non_contiguous and gelu"),
    ("weighted_sum", "csrc/kernels/weighted_sum_cpu.cpp", "_r * _cols) + _begin", "_r * _cols)", None, "summed_row_by_row and weighted_sum"),
    # the rows a backward by rows reads: grad standing in for bias, which log_scale's gradient reads
    ("actnorm", "csrc/ops/actnorm.cpp", "_full[1] || _sums[1], _full[1] || _sums[1], _full[0]", "_full[1] || _sums[1], false, _full[0]",
     "opgen::RowReads(*_hoisted_rows", "summed_row_by_row and actnorm"),
]


def _mutate(path: Path, old: str, new: str, after: str | None) -> None:
    text = path.read_text()
    start = text.index(after) if after else 0
    where = text.index(old, start)
    path.write_text(text[:where] + new + text[where + len(old):])


ENV = dict(os.environ, OPGEN_CPU_CAPABILITIES="DEFAULT", HYPOTHESIS_PROFILE="ci")


def _run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=ENV)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mutants") / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "mutops"\n')
    for name in ("weighted_sum", "gelu", "actnorm"):
        shutil.copy(ROOT / "specs" / f"{name}.yaml", root / "specs")
    opgen = [sys.executable, "-m", "opgen", "--project", str(root)]
    subprocess.run([*opgen, "generate"], check=True, capture_output=True)
    subprocess.run([*opgen, "build"], check=True, capture_output=True, env=ENV)
    return root


def test_generated_tests_pass_on_the_unmutated_build(project):
    proc = _run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "generated/tests"], project)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_every_mutant_is_killed(project):
    opgen = [sys.executable, "-m", "opgen", "--project", str(project)]
    killed, report = 0, []
    for op, rel, old, new, after, suite in MUTANTS:
        target = project / "generated" / rel
        original = target.read_text()
        try:
            _mutate(target, old, new, after)
            build = _run([*opgen, "build"], project)
            assert build.returncode == 0, build.stderr[-2000:]
            # -x: one failing test is enough to kill it
            if suite is None:
                proc = _run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                             f"generated/tests/test_{op}_properties.py"], project)
            else:
                proc = _run([*opgen, "test", "--", "-q", "-x", "-k", suite], project)
            dead = proc.returncode != 0 and "failed" in proc.stdout
            killed += dead
            report.append(f"{'killed' if dead else 'SURVIVED'}: {rel}: {old} -> {new}")
        finally:
            target.write_text(original)
    _run([*opgen, "build"], project)
    print("\n".join(report))
    print(f"mutation kill rate: {killed}/{len(MUTANTS)}")
    assert killed == len(MUTANTS), "\n".join(report)
