"""The generated stubs (generated/python/<ns>/__init__.pyi): mypy accepts correct calls and
rejects wrong ones, and the stubs say exactly what the runtime wrappers take."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "generated" / "python"

GOOD = """
import torch
import opgen_ops

x = torch.randn(3)
y: torch.Tensor = opgen_ops.softplus(x, beta=2.0)
z = opgen_ops.gelu(y, approximate="none", out=torch.empty(3))
w = opgen_ops.weighted_sum(x, z, weight=0.5) + opgen_ops.clamp(x, min=-1.0, max=1.0)
m: opgen_ops.return_types.max = opgen_ops.max(x, 0)
i: torch.Tensor = m.indices + opgen_ops.to_cartesian(x, y).y
"""

BAD = """
import torch
import opgen_ops

x = torch.randn(3)
opgen_ops.softplus(x, beta="2")
opgen_ops.clamp(x, min=0.0)
opgen_ops.relu(x, inplace=True)
s: str = opgen_ops.sigmoid(x)
opgen_ops.max(x, 0).value
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    script = tmp_path / "use_ops.py"
    script.write_text(source)
    env = {**os.environ, "MYPYPATH": str(PYTHON)}
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary",
                           "--hide-error-context", str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)


def test_mypy_accepts_correct_calls_and_rejects_wrong_ones(tmp_path):
    good = _mypy(tmp_path, GOOD)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _mypy(tmp_path, BAD)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = {int(line.split(":")[1]) for line in bad.stdout.splitlines() if ": error:" in line}
    assert lines == {6, 7, 8, 9, 10}, bad.stdout
    assert 'Argument "beta" to "softplus" has incompatible type "str"; expected "float"' in bad.stdout
    assert 'Missing named argument "max" for "clamp"' in bad.stdout
    assert '"max" has no attribute "value"' in bad.stdout


def test_stubs_match_the_runtime_wrappers(typed_api):
    stubs = ast.parse((PYTHON / "opgen_ops" / "__init__.pyi").read_text())
    functions = {f.name: f for f in stubs.body if isinstance(f, ast.FunctionDef) and f.name != "load_library"}
    assert set(functions) == set(typed_api.__all__) - {"load_library", "ops", "return_types"}
    # the named tuples of ops with several outputs: the same classes, fields and annotations
    (named,) = [c for c in stubs.body if isinstance(c, ast.ClassDef) and c.name == "return_types"]
    stub_fields = {c.name: [f.target.id for f in c.body] for c in named.body}
    assert stub_fields == {k: list(v._fields) for k, v in vars(typed_api.return_types).items() if isinstance(v, type)}
    assert stub_fields["max"] == ["values", "indices"]
    for name, stub in functions.items():
        runtime = inspect.signature(getattr(typed_api, name))
        assert ast.unparse(stub.returns) == str(runtime.return_annotation), name
        params = stub.args.args + stub.args.kwonlyargs
        assert [p.arg for p in params] == list(runtime.parameters), name
        assert [ast.unparse(p.annotation) for p in params] == [str(p.annotation) for p in runtime.parameters.values()], name
        stub_defaults = stub.args.defaults + [d for d in stub.args.kw_defaults if d is not None]
        runtime_defaults = [p.default for p in runtime.parameters.values() if p.default is not inspect.Parameter.empty]
        assert [ast.literal_eval(d) for d in stub_defaults] == runtime_defaults, name
        assert ast.get_docstring(stub) == inspect.getdoc(getattr(typed_api, name)), name
    importlib.import_module("opgen_ops")  # the package itself still imports with the stub next to it
