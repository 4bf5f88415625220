"""What emitters produce: a file path (relative to the output folder) and its text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # POSIX, relative to the output folder
    content: str
    spec: str | None = None  # the spec it comes from; None for library-wide files
