"""Shared fixtures: the shipped library, built once per session and loaded once per process
(registering a TORCH_LIBRARY namespace twice aborts a process, so never reload it)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("OPGEN_PROJECT", str(ROOT))  # the project opgen.op_suite tests


def pytest_configure(config):
    from hypothesis import settings

    settings.register_profile("ci", max_examples=25, derandomize=True, deadline=None, print_blob=True)
    settings.register_profile("dev", max_examples=300, deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


from opgen.op_suite import built_ops, typed_api  # noqa: E402,F401  (shared session fixtures)

# tests/golden/expected is a generated tree kept byte for byte, including its generated tests:
# compared by test_golden.py, never collected.
collect_ignore = ["golden"]
