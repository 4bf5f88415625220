"""What the emitters of a reduction share: its map, combine and post printed as C++ (hoisted
attribute values shared between them), its identity, and the names of its arguments."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import expr as E
from ..api import cpp_expr
from ..api.cpp import float_literal
from ..model import COMBINES, OpSpec, ReduceKernel
from . import op_context as ctx

# The builtin combines as C++ over two accumulators (scalars or vectors) of type _t.
_FOLDS = {"sum": "_a + _b", "mean": "_a + _b", "prod": "_a * _b", "max": "opgen::maximum(_a, _b)",
          "min": "opgen::minimum(_a, _b)", "logsumexp": "_a + _b"}


@dataclass(frozen=True)
class Reduction:
    x: str  # the reduced input
    dim: str  # the dims argument
    keepdim: str  # C++: the keepdim argument or `false`
    code: cpp_expr.KernelCode  # bodies: map, then post (if any), then a custom combine (if any)
    fold: str  # C++ over a, b and hoisted values
    identity: str  # C++ double expression
    attrs: list[ctx.KernelAttr]  # attributes read by map, post or combine

    @property
    def kernel_call(self) -> str:
        return "".join(f", {a.passed}" for a in self.attrs)


def post(k: ReduceKernel) -> E.Expr | None:
    """The post expression with the spec's `acc` as the generated code names it, `_acc`: an
    attribute may be called acc (the map reads attributes)."""
    return E.rename(k.post, {"acc": "_acc"}) if k.post is not None else None


def combine(k: ReduceKernel) -> E.Expr | None:
    """The custom combine over `_a` and `_b`, the generated code's names for the spec's a and b."""
    return E.rename(k.combine_expr, {"a": "_a", "b": "_b"}) if k.combine_expr is not None else None


def scope(op: OpSpec) -> E.Scope:
    s = ctx.kernel_scope(op)
    return s.extended({"_acc": E.TENSOR, "_a": E.TENSOR, "_b": E.TENSOR}, "reduction")


@functools.lru_cache(maxsize=1024)
def reduction(op: OpSpec) -> Reduction:
    k = op.kernel
    assert isinstance(k, ReduceKernel)
    exprs = [k.map] + [e for e in (post(k), combine(k)) if e is not None]
    code = cpp_expr.kernel_code(exprs, scope(op), [op.shape.tensors[0]])
    used: set[str] = set()
    for e in exprs:
        used |= E.names_in(e)
    fold = code.bodies[-1] if k.combine == "custom" else _FOLDS[k.combine]
    identity_value = k.identity if k.combine == "custom" else COMBINES[k.combine]
    return Reduction(
        x=op.shape.tensors[0],
        dim=op.shape.dim or "",
        keepdim=op.shape.keepdim or "false",
        code=code,
        fold=fold,
        identity=_double(identity_value),
        attrs=[a for a in ctx.kernel_attrs(op, used) if a.name not in (op.shape.dim, op.shape.keepdim)],
    )


def _double(v: float | None) -> str:
    if v is None:
        return "0.0"
    if v in (float("inf"), float("-inf")):
        return ("-" if v < 0 else "") + "std::numeric_limits<double>::infinity()"
    return float_literal(v)
