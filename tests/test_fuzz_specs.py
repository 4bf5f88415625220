"""Hostile and broken specs against `opgen generate`: every case ends in located errors
(exit 2, no traceback, generated/ byte-for-byte untouched) or in a successful generation.

The CI profile runs 1,000 derandomized cases here (about a minute), then builds and runs three
of the accepted mutations."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from opgen.cli import main

ROOT = Path(__file__).resolve().parent.parent
SPECS = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "specs").glob("*.yaml"))}
ERROR_LINE = re.compile(r"^specs/[A-Za-z0-9_.\-]+:\d+:\d+: error: .+")

INJECTIONS = [
    "*/", "/*", '"', "'", "\\", "\n#include <cstdlib>\n", "); system(\"rm -rf /\"); (", "{{ 7 * 7 }}", "{% raw %}",
    "{#", "\"\"\"", "`", "<script>", "$(id)", "\x00", "\u202e", "é", "__import__('os')", "x; import os",
    "a.__class__", "lambda: 0", "[x for x in y]", "exp(x", "1e309", "-", "**", "x if x else x", "\\\n",
]
IDENTS = ["x", "a", "b", "weight", "grad", "result", "exp", "where", "alpha", "min", "max", "approximate", "class", "int"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.sampled_from(INJECTIONS),
)
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
# Defaults at and past the edges of what torch's schema parser reads (std::stod, std::stoll).
EDGE_DEFAULTS = ["inf", "-inf", "nan", "1e309", "1e-400", "1e-310", "2.2250738585072014e-308", "1.7976931348623157e308",
                 "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0e5", "-0.0", "1e30", "None",
                 "'tanh'", "[]", "[1, 2]", "True"]
TOKEN_SOUP = st.lists(st.sampled_from(IDENTS + INJECTIONS + ["(", ")", ",", "+", "*", "/", ">", "0.5", "2", " "]),
                      min_size=1, max_size=12).map("".join)


@st.composite
def hostile_spec(draw):
    """(file stem, file bytes): a shipped spec with one or more mutations."""
    name = draw(st.sampled_from(sorted(SPECS)))
    doc = copy.deepcopy(SPECS[name])
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace", "soup", "unknown_key", "delete", "signature", "default", "dtypes", "bytes",
                                       "deep"]))
        keys = sorted(doc) if isinstance(doc, dict) else []
        if action == "replace" and keys:
            doc[draw(st.sampled_from(keys))] = draw(JUNK)
        elif action == "soup" and isinstance(doc, dict):
            target = draw(st.sampled_from(["kernel", "shape", "checks", "gradient", "reference", "doc", "let"]))
            soup = draw(TOKEN_SOUP)
            if target == "let":  # a let named like an argument, a function, a keyword, or read nowhere
                doc["let"] = {**(doc.get("let") if isinstance(doc.get("let"), dict) else {}), draw(st.sampled_from(IDENTS + ["u"])): soup}
            else:
                doc[target] = {"pointwise": soup} if target == "kernel" else ([soup] if target == "checks" else soup)
        elif action == "unknown_key" and isinstance(doc, dict):
            doc[draw(st.sampled_from(["kernal", "dtype", "grad", "signatures", "{{x}}", "shape "]))] = draw(SCALARS)
        elif action == "delete" and keys:
            del doc[draw(st.sampled_from(keys))]
        elif action == "signature" and isinstance(doc, dict):
            sig = str(doc.get("signature", f"{name}(Tensor x) -> Tensor"))
            pos = draw(st.integers(0, len(sig)))
            doc["signature"] = sig[:pos] + draw(st.sampled_from(INJECTIONS + IDENTS)) + sig[pos:]
        elif action == "default" and isinstance(doc, dict):
            sig = str(doc.get("signature", f"{name}(Tensor x) -> Tensor"))
            doc["signature"] = re.sub(r"=[^,)]*", lambda m: "=" + draw(st.sampled_from(EDGE_DEFAULTS)), sig, count=1)
        elif action == "dtypes" and isinstance(doc, dict):
            doc["dtypes"] = draw(st.lists(st.sampled_from(["float32", "floating", "int64", "bool", "half", "complex64", 3]), max_size=4))
        elif action == "bytes":
            return name, draw(st.binary(max_size=200))
        elif action == "deep":
            depth = draw(st.integers(20, 200))
            return name, ("kernel: " + "[" * depth + "]" * depth + "\n").encode()
    text = yaml.safe_dump(doc, allow_unicode=draw(st.booleans()), sort_keys=False)
    return name, text.encode("utf-8", errors="surrogatepass")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "specs").mkdir()
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "fuzzops"\n')
    for stem in SPECS:
        shutil.copy(ROOT / "specs" / f"{stem}.yaml", root / "specs")
    assert main(["--project", str(root), "generate"]) == 0
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".opgen.lock"}


def assert_torch_reads_every_schema(op_file: Path) -> None:
    """What opgen accepts, torch must register: every m.def schema of the op (the op, its out= and
    in-place overloads, its backward op) parses, within the dispatcher's 64 arguments. A schema
    torch can't read aborts the process loading the library."""
    import torch

    for literal in re.findall(r'm\.def\("((?:[^"\\]|\\.)*)"', op_file.read_text(encoding="utf-8")):
        # undo opgen.api.cpp.string_literal: \" \\ \? and octal bytes
        raw = re.sub(rb"\\([0-7]{3}|.)", lambda m: bytes([int(m[1], 8)]) if len(m[1]) == 3 else m[1], literal.encode())
        schema = torch._C.parse_schema(raw.decode("utf-8"))
        assert len(schema.arguments) <= 64, literal


COUNT = {"cases": 0, "rejected": 0, "accepted": 0}
ACCEPTED: dict[str, bytes] = {}  # stem -> the first accepted mutation that changed the generated code


@settings(max_examples=1000, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=hostile_spec())
def test_hostile_specs_fail_cleanly_or_generate(project, capsys, case):
    stem, raw = case
    spec = project / "specs" / f"{stem}.yaml"
    original = spec.read_bytes()
    before = snapshot(project / "generated")
    spec.write_bytes(raw)
    try:
        capsys.readouterr()
        rc = main(["--project", str(project), "generate"])
        out, err = capsys.readouterr()
        assert rc in (0, 2), (rc, out, err)
        assert "Traceback" not in err + out
        COUNT["cases"] += 1
        if rc == 2:
            COUNT["rejected"] += 1
            lines = err.strip().splitlines()
            assert lines[-1].startswith("opgen: ") and "nothing was written" in lines[-1], err
            for line in lines[:-1]:
                assert ERROR_LINE.match(line), line
            assert snapshot(project / "generated") == before
        else:
            COUNT["accepted"] += 1
            assert_torch_reads_every_schema(project / "generated" / "csrc" / "ops" / f"{stem}.cpp")
            csrc = {k: v for k, v in snapshot(project / "generated").items() if k.startswith("csrc/")}
            if stem not in ACCEPTED and csrc != {k: v for k, v in before.items() if k.startswith("csrc/")}:
                ACCEPTED[stem] = raw
    finally:
        spec.write_bytes(original)
        if snapshot(project / "generated") != before:
            assert main(["--project", str(project), "generate"]) == 0
            capsys.readouterr()


def test_fuzz_ran_enough_cases():
    # runs after the fuzz test in file order; reports the count
    print(f"fuzz cases: {COUNT}")
    assert COUNT["cases"] >= 1000 or COUNT["cases"] == 0  # 0 when the fuzz test was deselected


CALL_EACH = r"""
import sys, torch, opgen
from opgen import testing
ops = opgen.load(sys.argv[1])
for name in sys.argv[2:]:
    op = testing.load_op(sys.argv[1], name)
    gen = torch.Generator().manual_seed(0)
    dtype = getattr(torch, op.dtypes[0].name)
    shapes = [dict(op.test.shapes).get(a.name, (3, 4)) for a in op.tensor_inputs]
    tensors = {a.name: testing.make_tensor(op, a.name, s, dtype, gen) for a, s in zip(op.tensor_inputs, shapes)}
    tensors.update({a.name: [tensors[a.name], tensors[a.name].clone()] for a in op.tensor_inputs if a.type.is_list})
    for attrs in testing.attribute_sets(op, limit=2):
        args, kwargs = testing.call_args(op, tensors, attrs)
        try:
            out = getattr(ops, name)(*args, **kwargs)
        except RuntimeError as e:  # a hand-written op: its kernel is the stub opgen wrote, which says so
            assert op.is_custom and "is still the stub opgen wrote" in str(e), (name, e)
            print(name, "stub")
            continue
        for o in (out,) if isinstance(out, torch.Tensor) else out:
            assert isinstance(o, torch.Tensor), name
            print(name, tuple(o.shape), o.dtype)
print("all called")
"""


def test_accepted_mutations_compile_load_and_run(tmp_path, monkeypatch):
    """The fuzz's accepted specs are built too (three of them, their kernels for the DEFAULT CPU
    capability only, to bound CI time): whatever the generator accepts must compile with -Werror,
    load, and run (a hand-written op with the stub kernel opgen writes for it, which raises
    saying so)."""
    if not ACCEPTED:
        pytest.skip("the fuzz test did not run in this session, so nothing was accepted")
    import subprocess
    import sys

    root = tmp_path / "accepted"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "fuzzaccepted"\n')
    chosen = sorted(ACCEPTED)[:3]
    for stem in chosen:
        (root / "specs" / f"{stem}.yaml").write_bytes(ACCEPTED[stem])
    assert main(["--project", str(root), "generate"]) == 0
    monkeypatch.setenv("OPGEN_CPU_CAPABILITIES", "DEFAULT")
    assert main(["--project", str(root), "build", "--cuda", "off"]) == 0
    run = subprocess.run([sys.executable, "-c", CALL_EACH, str(root), *chosen], capture_output=True, text=True)
    assert run.returncode == 0 and "all called" in run.stdout, run.stdout + run.stderr[-3000:]
    print(f"built and ran accepted mutations of {chosen}")
