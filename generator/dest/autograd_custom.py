"""The Autograd section of csrc/ops/<op>.cpp for an op with hand-written kernels: the
Autograd-key kernel and its node."""

from __future__ import annotations

from .. import tensor_expr as T
from ..api import cpp
from ..library import Library
from ..model import OpSpec, TENSOR_KIND, _formula_kind
from ..render import render
from . import custom
from .autograd_cpp import node_name
from .files import Part

TEMPLATE = "csrc/autograd/custom.cpp.j2"


def emit(op: OpSpec, lib: Library) -> Part | None:
    g = op.gradient
    if g is None:
        return None
    c = custom.custom(op)
    args = op.schema.arguments
    formulas = dict(g.tensor_formulas)
    results = op.result_names
    if c.backward:
        saved_names = {a.name for a in op.tensor_inputs} | set(results)
        attributes = list(op.attributes)
    else:
        saved_names = set().union(*(f.names() for f in formulas.values()))
        attributes = [a for a in op.attributes if a.name in saved_names]
    saved = [a.name for a in op.tensor_inputs if a.name in saved_names]
    saved_results = [r for r in results if r in saved_names]
    composite = {}
    for name, f in formulas.items():
        kinds = {a.name: TENSOR_KIND for a in op.tensor_inputs}
        kinds.update({a.name: k for a in op.attributes if (k := _formula_kind(a))})
        kinds.update({n: TENSOR_KIND for n in (*op.grad_names, *results)})
        rename = {name: f"{name}__element"} if name in c.lists else ({name: f"(*{name})"} if name in c.optional else {})
        composite[name] = T.cpp(f.expr, kinds, rename)
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        c=c,
        node=node_name(op),
        formulas=[(n, f.text) for n, f in formulas.items()],
        differentiable=[a.name for a in op.tensor_inputs if c.backward or a.name in formulas],
        forward_type=f"{cpp.returns_type(op.schema)}({', '.join(cpp.argument_type(a.type) for a in args)})",
        returns_type=cpp.returns_type(op.schema),
        results=list(results),
        incoming=list(op.grad_names),
        saved_results=saved_results,
        multi=len(results) > 1,
        backward_type=_backward_type(op),
        params=cpp.parameters(args),
        args=cpp.names(args),
        tensor_args=", ".join(a.name for a in op.tensor_inputs),
        saved=saved,
        attributes=attributes,
        attr_type={a.name: cpp.member_type(a.type) for a in attributes},
        attr_value={a.name: cpp.to_member(a.type, a.name) for a in attributes},
        attr_local={a.name: cpp.from_member(a.type, f"{a.name}__attr") for a in attributes},
        composite=composite,
    )
    return Part(TEMPLATE, text)


def _backward_type(op: OpSpec) -> str:
    n = len(op.tensor_inputs)
    ret = "std::tuple<" + ", ".join(["at::Tensor"] * n) + ">"
    outs = len(op.schema.returns)
    params = ["const at::Tensor&"] * outs + [cpp.argument_type(a.type) for a in op.schema.arguments]
    params += ["const at::Tensor&"] * outs + [f"std::array<bool, {n}>"]
    return f"{ret}({', '.join(params)})"
