"""``opgen.load()``: loads a project's built extension and returns ``torch.ops.<namespace>``."""

from __future__ import annotations

import os
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
    path = Path(os.environ["OPGEN_LIBRARY"]) if os.environ.get("OPGEN_LIBRARY") else library_path(config)
    if not path.is_file():
        raise OpgenError(f"{path} not found; run `opgen build`{'' if project is None else f' --project {project}'} first")
    resolved = str(path.resolve())
    if resolved not in torch.ops.loaded_libraries:
        torch.ops.load_library(resolved)
    return getattr(torch.ops, config.namespace)
