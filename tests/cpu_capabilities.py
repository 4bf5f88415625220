"""Rerunning a test file's kernel tests under each CPU capability ATen can pick."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

CAPABILITIES = ["default", "avx2", "avx512"]


def rerun_at_capability(test_file: str, tests: str, capability: str) -> None:
    """Runs the tests of `test_file` selected by `-k tests` with ATEN_CPU_CAPABILITY=capability, in
    a process of its own (ATen reads it once); skips a capability the CPU lacks or this process runs."""
    from opgen import testing

    if capability.upper() not in testing.runnable_cpu_capabilities():
        pytest.skip(f"this CPU has no {capability.upper()}")
    if capability.upper() == torch.backends.cpu.get_cpu_capability():
        pytest.skip(f"{capability.upper()} is what this process runs, in the tests above")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability, OPGEN_SKIP_BUILD="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k", tests]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]
