"""Precompiled headers shared by every project on the machine.

The generated headers (csrc/opgen_*.h) are the same in every project, and precompiling them is
the slowest step of a build (the op files' header 35-50 s and ~480 MB, the kernels' 10-12 s and
~165 MB per CPU capability). So they are precompiled once per set of (header, headers, compiler,
flags, torch), into a folder named by a hash of all of them:

    <cache>/pch/<key>/opgen_*.h     copies of the generated headers
                     /pch.h         #include "opgen_pch.h" (or the header it is made of)
                     /pch.h.gch     the precompiled header
                     /command       how it was made, for people
                     /seconds       how long it took
                     /used          touched by every build that uses it

and every project's translation units include it from there (the headers' include guards make
the project's own copies a no-op after it). <cache> is $OPGEN_CACHE_DIR, else
$XDG_CACHE_HOME/opgen, else ~/.cache/opgen; where it cannot be written, the build folder. The
few most recently used keys are kept, older ones removed, except those a build holds: from
before it makes its keys until its last unit is compiled, a build holds a shared lock on each
(<key>.lock), which eviction's exclusive one cannot take. Making a key takes <key>.make.lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .capabilities import CPU_CAPABILITIES
from .errors import OpgenError

# Keys kept: a project's normal, --debug, --sanitize and CUDA builds each use their own, one for the
# op files and one per CPU capability (16 on x86-64, ~3.6 GB). At 9, a normal, a debug and a
# sanitize build (12) evicted each other's keys: the next of them made its headers again and
# recompiled every unit.
KEEP = 4 * (1 + len(CPU_CAPABILITIES))
HEADER_SUFFIXES = (".h", ".cuh")


@dataclass(frozen=True)
class SharedPch:
    label: str  # e.g. "pch/AVX2/opgen_kernel_pch.h.gch": what a build reports
    folder: Path
    entry: str  # the generated header it precompiles, e.g. "opgen_pch.h"
    command: tuple[str, ...]  # the compiler command without input and output
    headers: tuple[Path, ...]  # the generated headers it is made from

    @property
    def header(self) -> Path:
        return self.folder / "pch.h"

    @property
    def gch(self) -> Path:
        return self.folder / "pch.h.gch"


def seconds(folder: Path) -> float | None:
    """How long making the header in ``folder`` took, or None when that is not known."""
    try:
        return float((folder / "seconds").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def cache_root(fallback: Path) -> Path:
    """The shared cache's pch/ folder, or ``fallback`` when it cannot be written."""
    base = os.environ.get("OPGEN_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "opgen")
    root = Path(base) / "pch"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
        return root
    except OSError:
        return fallback


def plan(root: Path, label: str, csrc: Path, command: list[str], identity: object, entry: str = "opgen_pch.h") -> SharedPch:
    """The shared header ``entry`` of ``csrc``, precompiled by ``command`` (compiler and flags),
    over the headers in ``csrc``; ``identity`` is whatever else decides its content (the
    installed torch, the compiler's file)."""
    headers = tuple(sorted(p for p in csrc.iterdir() if p.suffix in HEADER_SUFFIXES and p.is_file()))
    digest = hashlib.sha256(json.dumps([entry, command, identity], default=str).encode())
    for p in headers:
        digest.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return SharedPch(label, root / digest.hexdigest()[:24], entry, tuple(command), headers)


def ensure(pchs: list[SharedPch], jobs: int, log: Callable[[str], object] | None = None) -> list[SharedPch]:
    """Makes those of ``pchs`` that do not exist yet, ``jobs`` at a time; returns those it made.
    Another build making the same one meanwhile is waited for, not repeated. Progress goes to
    ``log`` (default: stderr)."""
    log = log or (lambda line: (sys.stderr.write(line), sys.stderr.flush()))
    for p in pchs:
        p.folder.mkdir(parents=True, exist_ok=True)
    missing = [p for p in pchs if not p.gch.is_file()]
    made: list[SharedPch] = []
    if missing:
        with ThreadPoolExecutor(max(1, min(jobs, len(missing)))) as pool:
            made = [p for p, did in zip(missing, pool.map(lambda p: _make(p, log), missing)) if did]
    for p in pchs:
        with contextlib.suppress(OSError):
            (p.folder / "used").touch()
    if pchs:
        evict(pchs[0].folder.parent, keep=KEEP, protect={p.folder for p in pchs})
    return made


@contextlib.contextmanager
def in_use(pchs: list[SharedPch]) -> Iterator[None]:
    """Keeps other builds from evicting ``pchs`` while this one makes them and compiles against them."""
    with contextlib.ExitStack() as stack:
        for p in pchs:
            p.folder.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_locked(p.folder, shared=True))
        yield


@contextlib.contextmanager
def _locked(folder: Path, *, blocking: bool = True, shared: bool = False, suffix: str = ".lock") -> Iterator[bool]:
    with open(folder.with_name(folder.name + suffix), "a") as lock:
        try:
            fcntl.flock(lock, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _make(p: SharedPch, log: Callable[[str], object]) -> bool:
    with _locked(p.folder, suffix=".make.lock"):
        if p.gch.is_file():
            return False  # another build made it while this one waited
        for h in p.headers:
            shutil.copyfile(h, p.folder / h.name)
        p.header.write_text(f'#include "{p.entry}"\n', encoding="utf-8")
        tmp = p.folder / f"pch.h.gch.{os.getpid()}.tmp"
        cmd = [*p.command, "-x", "c++-header", "-c", str(p.header), "-o", str(tmp)]
        log(f"PCH {p.label} (shared: {p.folder})\n")
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise OpgenError(f"precompiling the generated headers failed:\n{' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
        (p.folder / "command").write_text(" ".join(cmd) + "\n", encoding="utf-8")
        (p.folder / "seconds").write_text(f"{time.perf_counter() - start:.1f}\n", encoding="utf-8")
        os.replace(tmp, p.gch)
        return True


def evict(root: Path, *, keep: int, protect: set[Path]) -> list[Path]:
    """Removes all but the ``keep`` most recently used keys under ``root`` (never those in
    ``protect``, nor one that a build holds, see `in_use`); returns what it removed."""
    def last_used(folder: Path) -> float:
        try:
            return (folder / "used").stat().st_mtime
        except OSError:
            return folder.stat().st_mtime

    folders = sorted((f for f in root.iterdir() if f.is_dir()), key=last_used, reverse=True)
    removed = []
    for folder in folders[keep:]:
        if folder in protect:
            continue
        with _locked(folder, blocking=False) as mine:
            if mine:
                shutil.rmtree(folder, ignore_errors=True)
                folder.with_name(folder.name + ".make.lock").unlink(missing_ok=True)
                folder.with_name(folder.name + ".lock").unlink(missing_ok=True)
                removed.append(folder)
    return removed
