"""The Autograd section of csrc/ops/<op>.cpp for an op with a gradient: the Autograd-key kernel
and its backward node."""

from __future__ import annotations

from types import SimpleNamespace

from .. import expr as E
from ..api import aten_expr, cpp
from ..derivatives import gradient_pieces, substitute
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import backward
from . import op_context as ctx
from .op_cpp import inplace as inplace_variant
from .files import Part

TEMPLATE = "csrc/autograd/op.cpp.j2"


def node_name(op: OpSpec) -> str:
    return "".join(p.capitalize() for p in op.name.split("_")) + "Backward"


def emit(op: OpSpec, lib: Library) -> Part | None:
    bw = backward.plan(op)
    if bw is None:
        return None
    args = op.schema.arguments
    tensors = [a.name for a in op.tensor_inputs]
    scope = backward.scope(op)
    composite = {n: aten_expr.aten(f, scope) for n, f in zip(bw.inputs, bw.formulas)}
    inplace = inplace_variant(op) if len(bw.results) == 1 else None
    optional = [b.name for b in ctx.optional_bindings(op)]

    def primal(n: str) -> str:  # an absent optional tensor is undefined here
        return f"opgen::fw_primal({n})" if n in optional else f"{n}._fw_primal(/*level=*/0)"
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        bw=bw,
        qualified=f"{lib.namespace}.{op.name}",
        node=node_name(op),
        formulas=[(n, E.unparse(f)) for n, f in zip(bw.inputs, bw.formulas)],
        forward_type=f"{cpp.returns_type(op.schema)}({', '.join(cpp.argument_type(a.type) for a in args)})",
        returns_type=cpp.returns_type(op.schema),
        multi=len(bw.grads) > 1,
        tangents=_tangents(op, bw, composite),
        params=ctx.cpp_parameters(op),
        args=ctx.cpp_arguments(op),
        optional=optional,
        tangent_args="".join(f", opgen::fw_grad({n})" if n in optional else f", {n}._fw_grad(/*level=*/0)" for n in bw.differentiated),
        tensor_args=", ".join(tensors),
        edge={n: i for i, n in enumerate(tensors)},
        attr_type={a.name: cpp.member_type(a.type) for a in bw.attributes},
        attr_value={a.name: cpp.to_member(a.type, a.name) for a in bw.attributes},
        tangent_params=", ".join(
            [f"[[maybe_unused]] const at::Tensor& {n}" for n in tensors]
            + [f"{cpp.member_type(a.type)} {a.name}" for a in bw.attributes]
            + [f"[[maybe_unused]] const at::Tensor& {r}" for r in bw.results]
            + [f"const at::Tensor& {n}__t" for n in bw.differentiated]
        ),
        primal_args=", ".join(
            [primal(n) for n in tensors]
            + [cpp.to_member(a.type, a.name) for a in bw.attributes]
        ),
        inplace_primal_args=", ".join(
            [("_original" if inplace and n == inplace.self and n in bw.saved else primal(n)) for n in tensors]
            + [cpp.to_member(a.type, a.name) for a in bw.attributes]
        ),
        composite=composite,
        pieces=_pieces(bw, scope) if len(bw.grads) > 1 else {},
        inplace=inplace,
        inplace_qualified=f"{lib.namespace}.{op.name}_",
    )
    return Part(TEMPLATE, text)


def _pieces(bw: backward.BackwardPlan, scope: E.Scope) -> dict[str, list[tuple[str, int, str]]]:
    """Per input, its formula's piece of each incoming gradient as ATen calls: the create_graph
    path sums those of the gradients given."""
    out = {}
    for n, f in zip(bw.inputs, bw.formulas):
        _, pieces = gradient_pieces(f, bw.grads)
        out[n] = [(g, sign, aten_expr.aten(piece, scope)) for g, sign, piece in pieces]
    return out


def _tangents(op: OpSpec, bw: backward.BackwardPlan, composite: dict[str, str]) -> list[SimpleNamespace]:
    """One tangent function per output: the terms, per input, of the formulas with that output's
    incoming gradient standing for the input's tangent (`grad`) and the other gradients 0."""
    if len(bw.grads) == 1:
        return [SimpleNamespace(name="_tangent_of", result="result", terms=[(n, composite[n]) for n in bw.differentiated])]
    scope = backward.scope(op)
    scope = scope.extended({"grad": E.TENSOR})
    out = []
    for g, r in zip(bw.grads, bw.results):
        names = {other: E.Num(0) for other in bw.grads}
        names[g] = E.Name("grad")
        terms = []
        for n, f in zip(bw.inputs, bw.formulas):
            coefficient = substitute(f, names)
            if coefficient != E.Num(0):
                terms.append((n, aten_expr.aten(coefficient, scope)))
        out.append(SimpleNamespace(name=f"_tangent_of_{r}", result=r, terms=terms))
    return out
