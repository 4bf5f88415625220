"""Errors that point at a place in a spec file: ``path:line:col: message``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    path: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


class OpgenError(Exception):
    """A user error: printed without a traceback, exit code 2."""


class SpecError(OpgenError):
    def __init__(self, location: Location, message: str) -> None:
        super().__init__(f"{location}: {message}")
        self.location = location
        self.message = message

    def __reduce__(self):  # pickled by worker processes (see pipeline.py)
        return SpecError, (self.location, self.message)


class SpecErrors(OpgenError):
    """Several spec errors collected across files; each keeps its location."""

    def __init__(self, errors: list[SpecError]) -> None:
        super().__init__("\n".join(str(e) for e in errors))
        self.errors = errors


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
