"""The Autograd section of csrc/ops/<op>.cpp for a reduction: the Autograd-key kernel and its
backward node."""

from __future__ import annotations

from .. import expr as E
from ..api import aten_expr, cpp
from ..derivatives import gradient_formulas
from ..library import Library
from ..model import OpSpec, expression_scope
from ..render import render
from .autograd_cpp import node_name
from .files import Part

TEMPLATE = "csrc/autograd/reduction.cpp.j2"


def scope(op: OpSpec) -> E.Scope:
    names = {op.shape.tensors[0]: E.TENSOR, "grad": E.TENSOR, "result": E.TENSOR, "count": E.NUM, "ties": E.TENSOR}
    return expression_scope(op.attributes, names, elementwise=True, what="gradient formula")


def emit(op: OpSpec, lib: Library) -> Part | None:
    formulas = gradient_formulas(op)
    if not formulas:
        return None
    (x_name, formula), = formulas
    x = op.shape.tensors[0]
    dim_arg = op.schema.argument(op.shape.dim or "")
    assert dim_arg is not None
    used = set() if op.has_indices else E.names_in(formula)
    ties = "ties" in used
    if ties:  # computed from map(x) and the result, in the node
        used |= {x, "result"} | E.names_in(op.kernel.map)
    saved = [t for t in (x, "result") if t in used] + (["indices"] if op.has_indices else [])
    attributes = [a for a in op.attributes if a.name in used and a.name not in (op.shape.dim, op.shape.keepdim)]
    keepdim = op.shape.keepdim
    args = op.schema.arguments
    returns_type = cpp.returns_type(op.schema)
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        node=node_name(op),
        formulas=[(x_name, E.unparse(formula))],
        forward_type=f"{returns_type}({', '.join(cpp.argument_type(a.type) for a in args)})",
        returns_type=returns_type,
        params=cpp.parameters(args),
        args=cpp.names(args),
        x=x,
        saved=saved,
        dim=op.shape.dim,
        dim_type="std::vector<int64_t>" if dim_arg.type.is_list else "int64_t",
        dim_value=(f"opgen::saved_dims({op.shape.dim})" if dim_arg.type.optional
                   else f"{op.shape.dim}.vec()" if dim_arg.type.is_list else op.shape.dim),
        keepdim=keepdim or "_keepdim",
        keepdim_value=keepdim or "false",
        attributes=attributes,
        attr_type={a.name: cpp.member_type(a.type) for a in attributes},
        attr_value={a.name: cpp.to_member(a.type, a.name) for a in attributes},
        composite="" if op.has_indices else aten_expr.aten(formula, scope(op)),
        ties=aten_expr.aten(op.kernel.map, scope(op)) if ties else "",
    )
    return Part(TEMPLATE, text)
