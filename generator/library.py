"""A loaded op library: the project settings plus every validated spec, in name order."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from .config import ProjectConfig
from .errors import Location, SpecError, SpecErrors
from .model import OpSpec
from .yaml_source import load_spec_source


@dataclass(frozen=True)
class Library:
    namespace: str
    ops: tuple[OpSpec, ...]
    build_dir_from_python: str  # build folder relative to generated/python/<ns>/, for the loader
    output: str = "generated"  # the output folder, relative to the project


def spec_files(config: ProjectConfig) -> list[Path]:
    if not config.specs_dir.is_dir():
        return []
    return sorted(p for p in config.specs_dir.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def parse_specs(config: ProjectConfig, paths: list[Path]) -> tuple[list[OpSpec], list[SpecError]]:
    """Each spec parsed on its own: the valid ones, and one located error per invalid one."""
    ops: list[OpSpec] = []
    errors: list[SpecError] = []
    folders: dict[Path, str] = {}  # spec folder -> its display path (all specs share one, usually)
    for path in paths:
        if path.parent not in folders:
            folders[path.parent] = path.parent.relative_to(config.root).as_posix()
        display = path.name if folders[path.parent] == "." else f"{folders[path.parent]}/{path.name}"
        try:
            ops.append(OpSpec.parse(load_spec_source(display, path.read_bytes())))
        except SpecError as e:
            errors.append(e)
    return ops, errors


def make_library(config: ProjectConfig, ops: list[OpSpec], errors: list[SpecError]) -> Library:
    """The library of the parsed specs; raises SpecErrors with every error, in file order."""
    ops = sorted(ops, key=lambda op: op.path)
    errors = sorted(errors, key=lambda e: e.location.path)
    seen: dict[str, OpSpec] = {}
    for op in ops:
        if op.name in seen:
            errors.append(SpecError(Location(op.path, 1, 1), f"op '{op.name}' is also defined in {seen[op.name].path}; keep one file per op"))
        seen[op.name] = op
    for op in ops:
        for name, what in _derived_op_names(op):
            if name in seen:
                errors.append(SpecError(Location(seen[name].path, 1, 1), f"op '{name}' has the name of {what} of '{op.name}' "
                                                                        f"({op.path}); rename it"))
    if errors:
        raise SpecErrors(sorted(errors, key=lambda e: e.location.path))
    ops.sort(key=lambda op: op.name)
    return dataclasses.replace(library_shell(config), ops=tuple(ops))


def _derived_op_names(op: OpSpec) -> list[tuple[str, str]]:
    """The other operators an op registers under names made from its own."""
    names = [(f"{op.name}_", "the in-place variant")] if "inplace" in op.variants else []
    if op.gradient is not None and not op.is_reduction and (not op.is_custom or op.gradient.kernel is not None):
        names.append((f"{op.name}_backward", "the backward op"))
    return names


def library_shell(config: ProjectConfig) -> Library:
    """The project's library settings without ops: all that emitters of one op need."""
    python_dir = Path(config.output) / "python" / config.namespace
    rel = os.path.relpath(Path(config.build), python_dir)
    return Library(config.namespace, (), Path(rel).as_posix(), config.output)


def load_library(config: ProjectConfig) -> Library:
    """Parses every spec; raises SpecErrors with all errors found, each located."""
    return make_library(config, *parse_specs(config, spec_files(config)))
