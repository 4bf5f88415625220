"""What emitters produce: files (a path relative to the output folder and its text), and parts
of files that another emitter's template renders in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # POSIX, relative to the output folder
    content: str
    spec: str | None = None  # the spec it comes from; None for library-wide files


@dataclass(frozen=True)
class Part:
    """Text that goes into a file another template renders: an op's Autograd section into
    csrc/ops/<op>.cpp, its wrapper into python/<ns>/_ops.py, a dtype its backward by rows takes
    into csrc/kernels/rows_summed.cpp. ``template`` is the one that renders the text or the file."""

    template: str
    text: str
