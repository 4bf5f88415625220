"""Specs in, generated files out, on every CPU when there are many specs.

Parsing and emitting one op needs nothing from the others, so a large library is split into
chunks that forked workers parse and emit; the parent checks the library as a whole (duplicate
names, every error at once) and adds the library-wide files. The result is the same, byte for
byte, as the sequential path, which small libraries and non-Linux platforms take.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import pickle
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from .config import ProjectConfig
from .dest.files import GeneratedFile, Part
from .errors import SpecError
from .generate import generate_files, op_files
from .library import Library, library_shell, load_library, make_library, parse_specs, spec_files
from .model import OpSpec

_SPOOL_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # memory; else $TMPDIR (page cache)
MIN_CHUNK = 16  # specs: smaller chunks cost more in hand-overs than they save in balance
MIN_SPECS_PER_WORKER = 100  # below this a worker costs more (fork, pickling results) than it saves


def workers(n_specs: int) -> int:
    """How many processes to use: $OPGEN_JOBS if set, else one per CPU with enough specs each."""
    if os.environ.get("OPGEN_JOBS", "").isdigit():
        return max(1, int(os.environ["OPGEN_JOBS"]))
    if sys.platform != "linux":  # fork is the cheap start; elsewhere it is unsafe or absent
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), n_specs // MIN_SPECS_PER_WORKER))


_froze = False  # whether objects are frozen because the last generation froze them


@contextlib.contextmanager
def _without_gc():
    """Generation makes millions of small objects and few cycles; the cyclic collector's passes
    over them cost about a third of the time, and reference counting frees nearly everything
    anyway. What it made is frozen afterwards, or the first collection would walk all of it once
    (0.4 s for 1,000 specs), and unfrozen at the next run, so that a watch's earlier runs stay
    collectable. A process that froze objects itself keeps them as they are."""
    global _froze
    if _froze:
        gc.unfreeze()
        _froze = False
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            _froze = True
        if enabled:
            gc.enable()


def load_and_generate(config: ProjectConfig) -> tuple[Library, dict[str, str]]:
    """The validated library and every generated file by path; raises SpecErrors like load_library."""
    with _without_gc():
        return _load_and_generate(config)


def _load_and_generate(config: ProjectConfig) -> tuple[Library, dict[str, str]]:
    paths = spec_files(config)
    n = min(workers(len(paths)), len(paths))
    if n < 2:
        lib = load_library(config)
        return lib, generate_files(lib)
    try:
        results = _in_workers(config, paths, n)
    except OSError:  # e.g. no room in /dev/shm for the results; the sequential path needs none
        lib = load_library(config)
        return lib, generate_files(lib)
    ops = [op for r in results for op in r[0]]
    errors = [e for r in results for e in r[1]]
    lib = make_library(config, ops, errors)
    per_op: dict[str, list[GeneratedFile | Part]] = {}
    for r in results:
        per_op.update(r[2])
    return lib, generate_files(lib, per_op)


def chunks(paths: list[Path], n: int) -> list[list[Path]]:
    """Chunks for ``n`` workers, each half a worker's share of what is left (guided scheduling):
    large at first, so hand-overs are few, then smaller, so that when the first worker runs out
    of work the others are at most a small chunk from the end (equal chunks left one worker
    idle for up to a chunk's time, ~0.4 s of 1,000 specs). Handed out as workers finish."""
    out: list[list[Path]] = []
    floor = min(MIN_CHUNK, -(-len(paths) // n))  # a few specs still go to every worker
    start = 0
    while start < len(paths):
        size = max(floor, -(-(len(paths) - start) // (2 * n)))
        out.append(paths[start:start + size])
        start += size
    return out


def _in_workers(config: ProjectConfig, paths: list[Path], n: int) -> list:
    with contextlib.ExitStack() as files:
        # Each worker pickles its result into a file of its own that it inherits: the executor's
        # pipe moves the ~35 MB that 1,000 specs make about 5x slower than a file in memory.
        parts = chunks(paths, n)
        spools = [files.enter_context(tempfile.TemporaryFile(dir=_SPOOL_DIR)) for _ in parts]
        # The parent unpickles each chunk's result as soon as it is done (~0.2 s for 1,000 specs, most
        # of it the parsed specs' objects), while the workers go on with the rest. Results come
        # in the order chunks finish; the library sorts ops and errors by file.
        results = []
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            spool_of = {pool.submit(_parse_and_emit_into, config, chunk, f.fileno()): f for chunk, f in zip(parts, spools)}
            for done in as_completed(spool_of):
                done.result()
                results.append(pickle.loads(_read_from_start(spool_of[done])))
        return results


def _parse_and_emit_into(config: ProjectConfig, paths: list[Path], fd: int) -> None:
    data = memoryview(pickle.dumps(_parse_and_emit(config, paths), protocol=pickle.HIGHEST_PROTOCOL))
    while data:
        data = data[os.write(fd, data):]


def _read_from_start(f) -> bytes:
    f.seek(0)  # the worker's writes moved the offset the two processes share
    return f.read()


def _parse_and_emit(config: ProjectConfig, paths: list[Path]) -> tuple[list[OpSpec], list[SpecError], dict[str, list[GeneratedFile | Part]]]:
    ops, errors = parse_specs(config, paths)
    if errors:
        return ops, errors, {}
    shell = library_shell(config)
    return ops, errors, {op.name: op_files(op, shell) for op in ops}
