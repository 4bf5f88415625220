"""Loads a spec file into plain Python values plus the location of every value.

PyYAML's composer gives us nodes with marks; we keep those marks in a table keyed by
the path of each value (``("kernel", "pointwise")``) so that the model can report
``path:line:col`` for any field it rejects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .errors import Location, SpecError

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 32

Path_ = tuple  # a key path into the document: tuple of str | int

# libyaml's parser when PyYAML has it (about 10x faster); the same nodes and marks either way.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Marks are kept as plain tuples, (line, col) and (line, col, exact), both 1-based: every value
# of every spec gets one, and a Location is made only for the few that an error names.
# `exact`: columns inside the scalar map 1:1 to the file (plain or quoted, on one line).
Mark = tuple[int, int]
ValueMark = tuple[int, int, bool]


@dataclass
class SpecSource:
    path: str
    data: Any
    value_marks: dict[Path_, ValueMark] = field(default_factory=dict)
    key_marks: dict[Path_, Mark] = field(default_factory=dict)

    def location(self, path: Path_, *, key: bool = False) -> Location:
        """The location of the value (or the key) at ``path``, else of its nearest parent."""
        p = tuple(path)
        while True:
            if key and p in self.key_marks:
                return Location(self.path, *self.key_marks[p])
            if p in self.value_marks:
                return Location(self.path, *self.value_marks[p][:2])
            if p in self.key_marks:
                return Location(self.path, *self.key_marks[p])
            if not p:
                return Location(self.path, 1, 1)
            p = p[:-1]

    def inner_location(self, path: Path_, offset: int) -> Location:
        """The location of character ``offset`` (0-based) inside the scalar at ``path``."""
        mark = self.value_marks.get(tuple(path))
        if mark is None:
            return self.location(path)
        line, col, exact = mark
        return Location(self.path, line, col + offset if exact else col)

    def error(self, path: Path_, message: str, *, key: bool = False) -> SpecError:
        return SpecError(self.location(path, key=key), message)


def _position(mark: yaml.Mark) -> Mark:
    return mark.line + 1, mark.column + 1


def _mark(path: str, mark: yaml.Mark) -> Location:
    return Location(path, *_position(mark))


def load_spec_source(path: str, raw: bytes) -> SpecSource:
    """Parses ``raw`` (the bytes of the file at display path ``path``)."""
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(Location(path, 1, 1), f"spec file is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise SpecError(Location(path, line, col), "spec files must be UTF-8; this byte is not") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    loader = None
    try:
        loader = _Loader(text)
        node = loader.get_single_node()
    except yaml.YAMLError as e:
        raise _yaml_error(path, text, e) from None
    except RecursionError:
        raise SpecError(Location(path, 1, 1), "invalid YAML: nesting is too deep") from None
    finally:
        if loader is not None:
            loader.dispose()
    source = SpecSource(path, None)
    if node is None:
        source.data = None
        return source
    source.data = _convert(source, loader, node, (), 0)
    return source


def _yaml_error(path: str, text: str, e: yaml.YAMLError) -> SpecError:
    """One located, one-line error from whatever PyYAML (pure Python or libyaml) raised."""
    if isinstance(e, yaml.reader.ReaderError):
        line = text.count("\n", 0, e.position) + 1
        col = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        return SpecError(Location(path, line, col), f"invalid YAML: character {e.character:#06x} is not allowed")
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        loc = _mark(path, mark) if mark else Location(path, 1, 1)
        message = " ".join(str(e.problem or e.context).split())
        if message == "did not find expected ',' or ']'":  # `shape: [x.size(0) + pad[0]]`
            message += "; quote an expression with brackets inside a [...] list, e.g. [\"x.size(0) + pad[0]\"]"
        return SpecError(loc, "invalid YAML: " + message)
    return SpecError(Location(path, 1, 1), "invalid YAML: " + " ".join(str(e).split()))


def _convert(source: SpecSource, loader, node: yaml.Node, path: Path_, depth: int) -> Any:
    line, col = _position(node.start_mark)
    if depth > MAX_DEPTH:
        raise SpecError(Location(source.path, line, col), f"value is nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, yaml.MappingNode):
        source.value_marks[path] = (line, col, False)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_mark = _position(key_node.start_mark)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                raise SpecError(Location(source.path, *key_mark), "mapping keys must be plain strings")
            key = key_node.value
            if key in out:
                first_line = source.key_marks[path + (key,)][0]
                raise SpecError(Location(source.path, *key_mark), f"duplicate key '{key}' (first defined at line {first_line})")
            source.key_marks[path + (key,)] = key_mark
            out[key] = _convert(source, loader, value_node, path + (key,), depth + 1)
        return out
    if isinstance(node, yaml.SequenceNode):
        source.value_marks[path] = (line, col, False)
        return [_convert(source, loader, item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
    assert isinstance(node, yaml.ScalarNode)
    exact = node.style in (None, "", "'", '"') and node.start_mark.line == node.end_mark.line
    if node.style in ("'", '"'):
        col += 1
        exact = exact and "\\" not in node.value and "''" not in _raw_text(node)
    source.value_marks[path] = (line, col, exact)
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        problem = " ".join(str(getattr(e, "problem", None) or e).split())  # one line, without PyYAML's location
        hint = "; specs take plain YAML values, without tags" if "tag" in problem else ""
        raise SpecError(Location(source.path, line, col), f"invalid value: {problem}{hint}") from None


def _raw_text(node: yaml.ScalarNode) -> str:
    buf = node.start_mark.buffer
    if buf is None:
        return ""
    return buf[node.start_mark.pointer : node.end_mark.pointer]
