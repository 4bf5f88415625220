"""``opgen init`` and ``opgen new``: starting points that generate and build as they are."""

from __future__ import annotations

import re
from pathlib import Path

from .config import ProjectConfig, namespace_problem
from .errors import OpgenError
from .schema import op_name_reserved_reason

SCHEMA_FILE = "opgen-spec.schema.json"

SPEC_TEMPLATE = """\
# yaml-language-server: $schema=../opgen-spec.schema.json
# {name}: one op, one file. The full format is in opgen's docs/spec.md.
# signature: PyTorch schema syntax; non-Tensor arguments are attributes (after `*`: keyword-only).
signature: {name}(Tensor x, *, float alpha=1.0) -> Tensor
# doc: one paragraph; it becomes the C++ comment, the Python docstring and the reference page.
doc: Computes `alpha * x * sigmoid(x)`.
# dtypes: names (float32, float64, float16, bfloat16) or groups (floating).
dtypes: [floating]
# shape: same(x), broadcast(a, b, ...) or an explicit list such as [a.size(0), b.size(1)].
shape: same(x)
# checks: conditions on attributes and sizes, checked on every call.
checks: ["alpha > 0"]
# let: names for sub-expressions that the kernel and gradient read (optional).
let:
  s: sigmoid(x)
# kernel.pointwise: an expression over the inputs and attributes, computed per element.
kernel:
  pointwise: alpha * x * s
# gradient: one formula per differentiable input, over the inputs, attributes, grad and result.
gradient:
  x: grad * alpha * (s * (1 + x * (1 - s)))
"""

PYPROJECT_TEMPLATE = """\
[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.10"

[tool.opgen]
namespace = "{namespace}"
specs = "specs"
output = "generated"
build = "build"
"""


def check_op_name(name: str) -> None:
    reason = op_name_reserved_reason(name)
    if reason:
        raise OpgenError(f"invalid op name '{name}': {reason}")


def write_schema(root: Path) -> None:
    """The JSON Schema next to pyproject.toml, which specs written by `opgen new` point editors to."""
    import json

    from .json_schema import spec_schema

    (root / SCHEMA_FILE).write_text(json.dumps(spec_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8")


def new_spec(config: ProjectConfig, name: str) -> Path:
    check_op_name(name)
    if not (config.root / SCHEMA_FILE).exists():
        write_schema(config.root)
    path = config.specs_dir / f"{name}.yaml"
    if path.exists():
        raise OpgenError(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC_TEMPLATE.format(name=name), encoding="utf-8")
    return path


def init_project(root: Path, namespace: str | None) -> Path:
    root = root.resolve()
    if (root / "pyproject.toml").exists():
        raise OpgenError(f"{root}/pyproject.toml already exists; opgen init makes new projects only")
    if namespace is None:
        namespace = re.sub(r"[^a-z0-9_]", "_", root.name.lower()).strip("_") or "ops"
        if not namespace[0].isalpha():
            namespace = "ops_" + namespace
    if problem := namespace_problem(namespace):
        raise OpgenError(f"invalid namespace '{namespace}': {problem} (pass --namespace)")
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT_TEMPLATE.format(name=root.name, namespace=namespace), encoding="utf-8")
    (root / ".gitignore").write_text("build/\n__pycache__/\ngenerated/.opgen.lock\n", encoding="utf-8")
    write_schema(root)
    specs = root / "specs"
    specs.mkdir(exist_ok=True)
    (specs / "scaled_silu.yaml").write_text(SPEC_TEMPLATE.format(name="scaled_silu"), encoding="utf-8")
    return root
