"""python/<ns>/: the typed package, one wrapper module and one reference module per op."""

from __future__ import annotations

from ..api import python
from ..library import Library
from ..model import OpSpec
from ..render import render
from .files import GeneratedFile
from .op_context import kernel_scope


def library_file(lib: Library) -> str:
    return f"lib{lib.namespace}.so"


def emit_package(lib: Library) -> list[GeneratedFile]:
    base = f"python/{lib.namespace}"
    return [
        GeneratedFile(f"{base}/__init__.py", render("python/__init__.py.j2", ns=lib.namespace, ops=lib.ops)),
        GeneratedFile(f"{base}/_library.py", render("python/_library.py.j2", ns=lib.namespace,
                                                    library_file=library_file(lib), build_dir=lib.build_dir_from_python)),
        GeneratedFile(f"{base}/_ops/__init__.py", render("python/_ops/__init__.py.j2", ns=lib.namespace)),
        GeneratedFile(f"{base}/_references/__init__.py", render("python/_references/__init__.py.j2", ns=lib.namespace)),
    ]


def docstring(op: OpSpec) -> str:
    text = op.doc or f"The {op.name} op."
    return f"{text}\n\nSchema: ``{op.schema}``. With ``out=``, writes into that tensor (resized if needed).\n"


def emit_op(op: OpSpec, lib: Library) -> list[GeneratedFile]:
    base = f"python/{lib.namespace}"
    params = python.parameters(op.schema.arguments)
    out_param = (", " if any(a.kwarg_only for a in op.schema.arguments) else ", *, ") + "out: Optional[Tensor] = None"
    wrapper = render("python/_ops/op.py.j2", op=op, ns=lib.namespace, params=params + out_param,
                     call=python.call_arguments(op.schema.arguments), docstring=docstring(op))
    expression = op.reference if op.reference is not None else python.reference(op.kernel.expr, kernel_scope(op))
    ref = render("python/_references/op.py.j2", op=op, params=params.replace(": Tensor", ": torch.Tensor"), expression=expression)
    return [
        GeneratedFile(f"{base}/_ops/{op.name}.py", wrapper, op.path),
        GeneratedFile(f"{base}/_references/{op.name}.py", ref, op.path),
    ]
