"""``opgen.load()``: loads a project's built extension and returns ``torch.ops.<namespace>``."""

from __future__ import annotations

import os
import runpy
import warnings
from pathlib import Path

from .build import library_path
from .config import load_config
from .errors import OpgenError


def load(project: str | Path | None = None):
    """Loads the extension that ``opgen build`` produced for ``project`` (default: the current folder).

    Loading the same library again in one process does nothing; the ops stay registered.
    """
    import torch

    config = load_config(project)
    # OPGEN_LIBRARY picks another build of the same library (e.g. build/sanitize/lib<ns>.so)
    path = Path(os.environ["OPGEN_LIBRARY"]) if os.environ.get("OPGEN_LIBRARY") else default_library(config)
    if not path.is_file():
        raise OpgenError(f"{path} not found; run `opgen build`{'' if project is None else f' --project {project}'} first")
    if is_stale(config, path):
        warnings.warn(f"{path} is older than {config.output}/; run `opgen build` to load the current ops", stacklevel=2)
    resolved = str(path.resolve())
    loaded = [p for p in torch.ops.loaded_libraries if Path(p).name == path.name]
    if loaded and resolved not in loaded:
        # A second copy would register the namespace again, which aborts the process.
        warnings.warn(f"{path.name} is already loaded from {loaded[0]}; not loading {resolved}", stacklevel=2)
    elif resolved not in loaded:
        torch.ops.load_library(resolved)
    rules = config.output_dir / "python" / config.namespace / "_rules.py"
    if rules.is_file():
        runpy.run_path(str(rules))["register"]()
    return getattr(torch.ops, config.namespace)


def default_library(config) -> Path:
    """build/cuda/'s library (CPU and CUDA kernels) under a CUDA build of torch when there is one,
    else build/'s (CPU kernels)."""
    import torch

    cuda = library_path(config, cuda=True)
    return cuda if torch.version.cuda is not None and cuda.is_file() else library_path(config)


def is_stale(config, library: Path) -> bool:
    """True when `opgen generate` wrote files after the library was built."""
    from .generate import MANIFEST

    newest = max((p.stat().st_mtime for p in (config.output_dir / "csrc").rglob("*") if p.is_file()), default=0.0)
    manifest = config.output_dir / MANIFEST
    return library.is_file() and manifest.is_file() and newest > library.stat().st_mtime
