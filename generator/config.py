"""Project settings: ``[tool.opgen]`` in the project's ``pyproject.toml``."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import Location, OpgenError, SpecError, did_you_mean

DEFAULTS = {"namespace": "opgen_ops", "specs": "specs", "output": "generated", "build": "build"}
NAMESPACE = re.compile(r"[a-z][a-z0-9_]*\Z")
# Operator namespaces PyTorch registers itself (torch 2.13's dispatcher after `import torch`, and
# those its Python modules define): a library claiming one aborts the process that loads it.
TORCH_NAMESPACES = frozenset(
    """aten c10d debug_mode_ops debugprims export higher_order inductor inductor_prims mkl mkldnn mkldnn_prepacked
    onednn prim prims profiler quantization quantized quantized_decomposed rngprims sparse static_runtime symm_mem""".split()
)


def namespace_problem(namespace: str) -> str | None:
    """Why ``namespace`` can't name a project's ops (torch.ops.<ns>, C++ namespace, Python package), or None."""
    from .schema import reserved_reason

    if not NAMESPACE.match(namespace):
        return "use lowercase letters, digits and '_', starting with a letter"
    if namespace in TORCH_NAMESPACES:
        return f"torch.ops.{namespace} is PyTorch's own (a library registering it aborts when it loads); choose another"
    reason = reserved_reason(namespace)
    return f"{reason}; choose another" if reason else None


@dataclass(frozen=True)
class ProjectConfig:
    root: Path
    namespace: str
    specs: str
    output: str
    build: str

    @property
    def specs_dir(self) -> Path:
        return self.root / self.specs

    @property
    def output_dir(self) -> Path:
        return self.root / self.output

    @property
    def build_dir(self) -> Path:
        return self.root / self.build


def load_config(root: str | Path | None = None) -> ProjectConfig:
    root = Path(root or ".").resolve()
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise OpgenError(f"{pyproject}: not found; run 'opgen init {root}' or pass --project DIR")
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise OpgenError(f"pyproject.toml: {e}") from None
    table = data.get("tool", {}).get("opgen")
    if not isinstance(table, dict):
        raise OpgenError("pyproject.toml: no [tool.opgen] table; add one with at least namespace = \"myops\"")
    loc = Location("pyproject.toml", 1, 1)
    for key in table:
        if key not in DEFAULTS:
            raise SpecError(loc, f"[tool.opgen]: unknown key '{key}'; allowed: {', '.join(DEFAULTS)}{did_you_mean(key, tuple(DEFAULTS))}")
    values = {**DEFAULTS, **table}
    for key, value in values.items():
        if not isinstance(value, str) or not value:
            raise SpecError(loc, f"[tool.opgen]: '{key}' must be a non-empty string")
    if problem := namespace_problem(values["namespace"]):
        raise SpecError(loc, f"[tool.opgen]: invalid namespace '{values['namespace']}': {problem}")
    for key in ("specs", "output", "build"):
        p = Path(values[key])
        if p.is_absolute() or ".." in p.parts:
            raise SpecError(loc, f"[tool.opgen]: '{key}' must be a folder inside the project")
    return ProjectConfig(root, values["namespace"], values["specs"], values["output"], values["build"])
