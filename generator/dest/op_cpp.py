"""csrc/ops/<op>.cpp: validation, output allocation, CPU and Meta kernels, registration."""

from __future__ import annotations

from .. import expr as E
from ..api import cpp, cpp_expr
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import backward
from . import op_context as ctx
from .files import GeneratedFile

TEMPLATE = "csrc/ops/op.cpp.j2"


def emit(op: OpSpec, lib: Library) -> GeneratedFile:
    used = E.names_in(op.kernel.expr)
    attrs = ctx.kernel_attrs(op, used)
    kernel_call = ", ".join(
        f"{a.name}.toDouble()" if op.schema.argument(a.name).type.base == "Scalar" else a.name for a in attrs)
    scope = ctx.check_scope(op)
    bw = backward.plan(op)
    kernels = [{"name": op.name, "attrs": attrs}]
    bw_kernel_call = ""
    if bw is not None and bw.fused:
        kernels.append({"name": bw.name, "attrs": list(bw.kernel_attrs)})
        bw_kernel_call = "".join(
            f", {a.name}.toDouble()" if op.schema.argument(a.name).type.base == "Scalar" else f", {a.name}" for a in bw.kernel_attrs)
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        qualified_name=ctx.qualified_name(lib.namespace, op),
        params=cpp.parameters(op.schema.arguments),
        args=cpp.names(op.schema.arguments),
        tensors=[a.name for a in op.tensor_inputs],
        dtype_names=ctx.dtype_names(op),
        checks=ctx.checks(op),
        shape_text=str(op.shape),
        shape_sizes=[cpp_expr.symbolic(s, scope) if any(isinstance(n, E.Method) for n in E.walk(s))
                     else f"c10::SymInt({cpp_expr.symbolic(s, scope)})" for s in op.shape.sizes],
        kernels=kernels,
        out_schema=out_schema(op),
        bw=bw,
        bw_kernel_call=bw_kernel_call,
        kernel_call=("".join(", " + a for a in kernel_call.split(", ")) if kernel_call else ""),
    )
    return GeneratedFile(f"csrc/ops/{op.name}.cpp", text, op.path)


def out_schema(op: OpSpec) -> str:
    """`<op>.out(..., *, Tensor(a!) out) -> ()`: the out= overload of a one-output op."""
    schema = str(op.schema)
    head, _, _ = schema.rpartition(") -> ")
    star = "" if any(a.kwarg_only for a in op.schema.arguments) else "*, "
    name_end = head.index("(")
    return f"{head[:name_end]}.out{head[name_end:]}, {star}Tensor(a!) out) -> ()"
