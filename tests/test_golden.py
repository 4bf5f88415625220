"""Golden tests: the whole generated tree of tests/golden/project, byte for byte.

Update after an intended change to templates or emitters with:
    OPGEN_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from opgen.config import load_config
from opgen.generate import generate_files
from opgen.library import load_library

PROJECT = Path(__file__).resolve().parent / "golden" / "project"
EXPECTED = Path(__file__).resolve().parent / "golden" / "expected"


def test_generated_tree_matches_golden():
    files = generate_files(load_library(load_config(PROJECT)))
    if os.environ.get("OPGEN_UPDATE_GOLDEN") == "1":
        shutil.rmtree(EXPECTED, ignore_errors=True)
        for rel, content in files.items():
            (EXPECTED / rel).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / rel).write_text(content, encoding="utf-8")
    on_disk = {p.relative_to(EXPECTED).as_posix() for p in EXPECTED.rglob("*") if p.is_file()}
    assert on_disk == set(files), "file list differs; run OPGEN_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py"
    for rel, content in files.items():
        expected = (EXPECTED / rel).read_text(encoding="utf-8")
        assert content == expected, f"{rel} differs from golden; run OPGEN_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py"
