"""Stubs of hand-written kernel files: written once, next to the spec, never overwritten.

Unlike everything under generated/, these files belong to the user from the moment they exist,
so `opgen generate` creates only the missing ones and `opgen check` reports the missing ones."""

from __future__ import annotations

from pathlib import Path

from ..library import Library
from ..render import render
from . import custom
from .op_context import dtype_names


def kernel_files(lib: Library) -> list[tuple[str, str]]:
    """(path relative to the project, stub text) of every hand-written kernel file the specs name."""
    out = []
    for op in lib.ops:
        if not op.is_custom:
            continue
        for f in custom.custom(op).files:
            text = render("stubs/kernel.cpp.j2", op=op, ns=lib.namespace, f=f, dtype_names=dtype_names(op))
            out.append((f.file, text))
    return out


def missing(root: Path, lib: Library) -> list[str]:
    return [path for path, _ in kernel_files(lib) if not (root / path).exists()]


def write_missing(root: Path, lib: Library) -> list[str]:
    written = []
    for path, text in kernel_files(lib):
        target = root / path
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "x", encoding="utf-8") as f:  # "x": never replaces a file that appeared meanwhile
            f.write(text)
        written.append(path)
    return written
