"""csrc/autograd/<op>.cpp: the Autograd-key kernel of an op with a gradient."""

from __future__ import annotations

from .. import expr as E
from ..api import aten_expr, cpp
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import backward
from .files import GeneratedFile

TEMPLATE = "csrc/autograd/op.cpp.j2"

# How an attribute is kept in AutogradContext::saved_data (an IValue) and read back.
_SAVE = {"str": "std::string({n})", "SymInt": "{n}"}
_RESTORE = {"float": "{v}.toDouble()", "int": "{v}.toInt()", "bool": "{v}.toBool()", "str": "{v}.toStringRef()",
            "Scalar": "{v}.toScalar().toDouble()", "SymInt": "{v}.toSymInt()"}


def emit(op: OpSpec, lib: Library) -> GeneratedFile | None:
    bw = backward.plan(op)
    if bw is None:
        return None
    for a in bw.attributes:
        if a.type.is_list or a.type.optional:
            raise NotImplementedError(f"{op.name}: list or optional attribute '{a.name}' in a gradient formula")
    args = op.schema.arguments
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        bw=bw,
        qualified=f"{lib.namespace}.{op.name}",
        class_name="".join(p.capitalize() for p in op.name.split("_")) + "Function",
        formulas=[(n, E.unparse(f)) for n, f in zip(bw.inputs, bw.formulas)],
        forward_params="".join(f", {cpp.argument_type(a.type)} {a.name}" for a in args),
        forward_type=f"at::Tensor({', '.join(cpp.argument_type(a.type) for a in args)})",
        forward_args=cpp.names(args),
        params=cpp.parameters(args),
        args=cpp.names(args),
        index={a.name: i for i, a in enumerate(args)},
        saved_attr={a.name: _SAVE.get(a.type.base, "{n}").format(n=a.name) for a in bw.attributes},
        composite={n: aten_expr.aten(f, backward.scope(op)) for n, f in zip(bw.inputs, bw.formulas)},
        restore_attr={a.name: _RESTORE[a.type.base].format(v=f'ctx->saved_data["{a.name}"]') for a in bw.attributes},
    )
    return GeneratedFile(f"csrc/autograd/{op.name}.cpp", text, op.path)
