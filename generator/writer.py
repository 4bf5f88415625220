"""Writes a generated tree: only changed files, stale ones removed, nothing else touched.

All content is rendered before anything is written. New contents of existing files go to
temporary files beside them first; then, with SIGINT/SIGTERM held back, a journal is written,
the temporaries are renamed into place, files that did not exist yet are written directly (the
journal lists them, so a rollback deletes them), and files that the previous manifest listed but
no spec produces are deleted. An exclusive lock keeps two concurrent runs apart.

A run killed outright (SIGKILL, power loss) inside that swap leaves a journal of what it was
moving; the next run (or `opgen check`) finds it, puts the previous files back and removes the
temporaries before doing anything else, so the tree is never left half old, half new.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import itertools
import json
import os
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .errors import OpgenError
from .generate import MANIFEST

LOCK_FILE = ".opgen.lock"
JOURNAL = ".opgen-journal.json"


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    recovered: bool = False  # an interrupted earlier run was rolled back first

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


def previous_files(out_dir: Path) -> set[str]:
    """Files the last run generated, from its manifest (empty if there is none)."""
    manifest = out_dir / MANIFEST
    if not manifest.is_file():
        return set()
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        files = data["files"]
    except (ValueError, KeyError, TypeError):
        raise OpgenError(f"{manifest}: unreadable manifest; delete the output folder and generate again") from None
    return {f for f in files if isinstance(f, str) and _is_safe(f)} | {MANIFEST}


def _is_safe(rel: str) -> bool:
    """A path relative to the output folder that stays inside it (as pathlib splits a POSIX path)."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    return not rel.startswith("/") and ".." not in parts and bool(parts)


def _read(path: str | Path) -> str | None:
    """The text of ``path`` as open(path, encoding="utf-8") reads it (universal newlines), else
    None. Plain os calls: a run with nothing to write reads every generated file, and a text-mode
    open() and read cost 2-3x as much."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        chunks = [os.read(fd, os.fstat(fd).st_size + 1)]
        while chunks[-1]:
            chunks.append(os.read(fd, 1 << 16))
        text = b"".join(chunks).decode("utf-8")
    except (IsADirectoryError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


# Paths below are plain strings: a library of 1,000 ops has 5,000 files, and pathlib's joins
# cost more than opening and reading them.


def _existing(out_dir: Path) -> set[str]:
    """Every path under ``out_dir``, relative, from one walk (cheaper than a failed open per new file)."""
    root = os.fspath(out_dir)
    out: set[str] = set()
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out.update(prefix + n for n in (*dirs, *names))
    return out


def plan(out_dir: Path, files: dict[str, str]) -> Changes:
    changes = Changes()
    existing = _existing(out_dir)
    root = os.fspath(out_dir)
    for rel, content in files.items():
        if rel not in existing:
            changes.added.append(rel)
        elif _read(os.path.join(root, rel)) != content:
            changes.changed.append(rel)
    changes.removed = sorted(f for f in previous_files(out_dir) - set(files) if (out_dir / f).exists())
    return changes


@contextlib.contextmanager
def locked(out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK_FILE, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _signals_held():
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def write_tree(out_dir: Path, files: dict[str, str]) -> Changes:
    with locked(out_dir):
        recovered = recover(out_dir)
        _sweep_temporaries(out_dir)
        changes = plan(out_dir, files)
        changes.recovered = recovered
        staged: list[tuple[Path, Path]] = []
        try:
            for rel in changes.changed:
                target = out_dir / rel
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(files[rel])
                os.chmod(tmp, 0o644)
                staged.append((Path(tmp), target))
            with _signals_held():
                _commit(out_dir, staged, [out_dir / rel for rel in changes.removed], {rel: files[rel] for rel in changes.added})
            staged = []
        finally:
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
        return changes


def _backup_of(target: Path) -> Path:
    return target.with_name(f".{target.name}.opgen-backup")


def _commit(out_dir: Path, staged: list[tuple[Path, Path]], removed: list[Path], added: dict[str, str]) -> None:
    """Moves the previous versions aside, the new ones in, writes the added files, and on any
    error puts everything back. The journal written first lets the next run do the same after a
    crash."""
    rel = lambda p: str(p.relative_to(out_dir))  # noqa: E731
    targets = [t for _, t in staged] + removed
    _write_journal(out_dir, {
        "backups": [[rel(_backup_of(t)), rel(t)] for t in targets if t.exists()],
        "temporaries": [rel(tmp) for tmp, _ in staged],
        "added": sorted(added),
    })
    backups: list[tuple[Path, Path]] = []  # (backup, original location)
    placed: list[str] = []  # renamed into place or written, to remove on failure
    try:
        for target in targets:
            if target.exists():
                backup = _backup_of(target)
                os.replace(target, backup)
                backups.append((backup, target))
        for tmp, target in staged:
            os.replace(tmp, target)
            placed.append(os.fspath(target))
        _create_all(os.fspath(out_dir), added, placed)
    except BaseException:
        for target in placed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
        for backup, target in backups:
            os.replace(backup, target)
        (out_dir / JOURNAL).unlink(missing_ok=True)
        raise
    (out_dir / JOURNAL).unlink()
    for backup, _ in backups:
        backup.unlink(missing_ok=True)
    for target in removed:
        _prune_empty(out_dir, target.parent)


PARALLEL_CREATE_MIN = 200  # new files; fewer are written by the calling thread alone
CREATE_CHUNK = 250  # files of one folder that a thread creates in a row


def _create_all(root: str, added: dict[str, str], placed: list[str]) -> None:
    """Creates the new files. Many of them (a first generate of a large library) are created by
    one thread per CPU: creating a file is mostly kernel time, which threads spend in parallel
    (on this project's ext4 VMs ~0.5 ms each: 5,000 files took 1.9-3.3 s in one thread, 1.0-1.3 s
    in two). Each thread takes runs of one folder's files, and runs of different folders follow
    each other, so that two threads rarely contend for one directory's lock. Threads inherit the
    calling thread's blocked signals; every failure is raised after all of them stopped."""
    by_folder: dict[str, list[str]] = {}
    for rel_path in added:
        by_folder.setdefault(rel_path.rpartition("/")[0], []).append(rel_path)
    for folder in by_folder:
        os.makedirs(os.path.join(root, folder), exist_ok=True)

    def create(rels: list[str]) -> None:
        for rel_path in rels:
            _create(os.path.join(root, rel_path), added[rel_path], placed)

    threads = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 4)
    if threads < 2 or len(added) < PARALLEL_CREATE_MIN:
        create(list(added))
        return
    runs = [[rels[i:i + CREATE_CHUNK] for i in range(0, len(rels), CREATE_CHUNK)] for rels in by_folder.values()]
    tasks = [run for row in itertools.zip_longest(*runs) for run in row if run]
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(create, task) for task in tasks]
    for f in futures:
        f.result()  # the first failure, now that no thread is still creating files


def _create(path: str, content: str, placed: list[str]) -> None:
    """Writes a file that must not exist yet, noting it in ``placed`` once it does. Plain os calls:
    a text-mode open() costs several more system calls per file, which add up over thousands."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    placed.append(path)
    try:
        data = memoryview(content.encode("utf-8"))
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def _write_journal(out_dir: Path, entries: dict) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".opgen-journal.", suffix=".tmp", dir=out_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(entries, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out_dir / JOURNAL)


def _sweep_temporaries(out_dir: Path) -> None:
    """Removes temporaries a killed run left while staging, before it wrote its journal."""
    for tmp in out_dir.rglob(".*.tmp"):
        if tmp.is_file() and tmp.name.count(".") >= 3:  # .<name>.<random>.tmp, as mkstemp makes them above
            tmp.unlink(missing_ok=True)


def interrupted(out_dir: Path) -> bool:
    """True when a run was killed while swapping files in (see `recover`)."""
    return (out_dir / JOURNAL).is_file()


def recover(out_dir: Path) -> bool:
    """Undoes a swap that a killed run left half done: previous files back, new and temporary
    ones removed. Returns whether there was anything to undo. Call with the lock held."""
    journal = out_dir / JOURNAL
    if not journal.is_file():
        return False
    try:
        entries = json.loads(journal.read_text(encoding="utf-8"))
        backups = [(out_dir / b, out_dir / t) for b, t in entries["backups"] if _is_safe(b) and _is_safe(t)]
        temporaries = [out_dir / t for t in entries["temporaries"] if _is_safe(t)]
        added = [out_dir / a for a in entries["added"] if _is_safe(a)]
    except (ValueError, KeyError, TypeError):
        raise OpgenError(f"{journal}: unreadable journal of an interrupted run; delete the output folder and generate again") from None
    for path in added:
        path.unlink(missing_ok=True)
    for backup, target in backups:
        if backup.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(backup, target)
    for tmp in temporaries:
        tmp.unlink(missing_ok=True)
    journal.unlink()
    return True


def _prune_empty(root: Path, folder: Path) -> None:
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def diff(out_dir: Path, files: dict[str, str], display_root: str) -> tuple[Changes, str]:
    """What `opgen check` reports: the changes a generate would make, as a unified diff."""
    changes = plan(out_dir, files)
    chunks: list[str] = []
    for rel in sorted(changes.added + changes.changed):
        old = _read(out_dir / rel) or ""
        chunks.extend(difflib.unified_diff(
            old.splitlines(keepends=True), files[rel].splitlines(keepends=True),
            fromfile=f"a/{display_root}/{rel}", tofile=f"b/{display_root}/{rel}"))
    for rel in changes.removed:
        old = _read(out_dir / rel) or ""
        chunks.extend(difflib.unified_diff(old.splitlines(keepends=True), [], fromfile=f"a/{display_root}/{rel}", tofile="/dev/null"))
    text = "".join(c if c.endswith("\n") else c + "\n\\ No newline at end of file\n" for c in chunks)
    return changes, text
