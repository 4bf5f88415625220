"""Shared fixtures: the shipped library, built once per session and loaded once per process
(registering a TORCH_LIBRARY namespace twice aborts a process, so never reload it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "generated" / "python"))


def pytest_configure(config):
    from hypothesis import settings

    settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None, print_blob=True)
    settings.register_profile("dev", max_examples=300, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def project_config():
    from opgen.config import load_config

    return load_config(ROOT)


@pytest.fixture(scope="session")
def shipped_library(project_config):
    from opgen.library import load_library

    return load_library(project_config)


@pytest.fixture(scope="session")
def built_ops(project_config):
    """torch.ops.<namespace> of the shipped specs, built incrementally if needed."""
    if os.environ.get("OPGEN_SKIP_BUILD") != "1":
        subprocess.run([sys.executable, "-m", "opgen", "--project", str(ROOT), "build"], check=True)
    import opgen

    return opgen.load(ROOT)


@pytest.fixture(scope="session")
def typed_api(built_ops, project_config):
    import importlib

    return importlib.import_module(project_config.namespace)
