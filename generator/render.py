"""The Jinja environment every emitter renders with: StrictUndefined, escaping filters."""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

import jinja2
import jinja2.bccache
import jinja2.compiler

from .api import cpp, python


def templates_dir() -> Path:
    """``templates/`` beside the package in a checkout, or ``opgen/templates`` in a wheel."""
    checkout = Path(__file__).resolve().parent.parent / "templates"
    if (checkout / "macros.j2").is_file():
        return checkout
    return Path(str(resources.files("opgen") / "templates"))


def markdown_text(text: str) -> str:
    """Plain text made inert in Markdown/HTML (code spans kept as written)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_code(text: str) -> str:
    """An inline code span holding ``text`` exactly."""
    ticks = "`"
    while ticks in text:
        ticks += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


class BestEffortCache(jinja2.FileSystemBytecodeCache):
    """A cache that never fails a run: a folder that is read-only, full or gone means no caching."""

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept in $XDG_CACHE_HOME/opgen (compiling all of them costs ~0.4 s per
    run; Jinja checks each against its source). None where that folder can't be made."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "opgen" / f"jinja-{jinja2.__version__}-{_CodeGenerator.VERSION}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return BestEffortCache(str(root))


class _CodeGenerator(jinja2.compiler.CodeGenerator):
    """Compiles `a.b` in templates to Python's own attribute access instead of a call to
    Environment.getattr, which tries the attribute, then an item, then makes an Undefined: a
    method call per access, ~750 per op. Emitters pass templates objects, never dicts, so the
    fallback is never needed; a missing attribute still fails the render (AttributeError)."""

    VERSION = "attr1"  # names the bytecode cache: code compiled by another generator must not be reused

    def visit_Getattr(self, node, frame) -> None:
        self.write("(")
        self.visit(node.node, frame)
        self.write(f").{node.attr}")


class _Environment(jinja2.Environment):
    code_generator_class = _CodeGenerator

    def make_globals(self, d: dict | None) -> dict:  # type: ignore[override]
        """A plain dict instead of Jinja's ChainMap over the environment's globals: every render
        copies the globals into its context and every `{% import %}` compares their keys, which a
        ChainMap makes slow (two thirds of an import's cost). The globals are complete before the
        first template loads and never change afterwards, so nothing is lost."""
        return {**self.globals, **(d or {})}


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = _Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # one process renders each template many times; no stat() per render
    )
    env.filters.update(
        cpp_string=cpp.string_literal,
        cpp_comment=cpp.comment,
        py_docstring=python.docstring,
        py_string=repr,
        repr=python.literal,
        md=markdown_text,
        md_code=markdown_code,
        zip=lambda a, b: list(zip(a, b, strict=True)),
        add_prefix=lambda s, prefix: prefix + s,
    )
    return env


@functools.lru_cache(maxsize=None)
def _template(name: str) -> jinja2.Template:
    return environment().get_template(name)  # Jinja's own cache is an LRU behind a lock


def render(template: str, **context: object) -> str:
    return _template(template).render(template=template, **context)
