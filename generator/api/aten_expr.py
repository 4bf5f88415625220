"""Spec expressions printed as differentiable ATen calls on whole tensors.

Used for the create_graph path of backward (double backward): ATen's own autograd then
differentiates the gradient formulas again. Numbers become 0-dim tensors (``_s(v)``), which
broadcast and do not change the result dtype.
"""

from __future__ import annotations

from .. import expr as E
from .cpp import float_literal
from .cpp_expr import uniform

_CMP = {"<": "at::lt", "<=": "at::le", ">": "at::gt", ">=": "at::ge", "==": "at::eq", "!=": "at::ne"}
_ARITH = {"+": "at::add", "-": "at::sub", "*": "at::mul", "/": "at::div", "**": "at::pow"}


def aten(e: E.Expr, scope: E.Scope, kinds: dict[int, str] | None = None) -> str:
    kinds = {} if kinds is None else kinds
    kind = E.typecheck(e, scope, kinds)
    if kind in (E.NUM, E.INT):
        return f"_s({_number(e, scope)})"
    if kind == E.BOOL:
        return uniform(e, scope)
    if isinstance(e, E.Name):
        return e.id
    if isinstance(e, E.Unary):
        return f"at::neg({aten(e.operand, scope, kinds)})"
    if isinstance(e, E.Binary):
        return f"{_ARITH[e.op]}({aten(e.lhs, scope, kinds)}, {aten(e.rhs, scope, kinds)})"
    if isinstance(e, E.Compare):
        return f"{_CMP[e.op]}({aten(e.lhs, scope, kinds)}, {aten(e.rhs, scope, kinds)})"
    if isinstance(e, E.Call):
        args = [aten(a, scope, kinds) for a in e.args]
        if e.fn == "where":
            if E.typecheck(e.args[0], scope, kinds) == E.BOOL:
                return f"({args[0]} ? {args[1]} : {args[2]})"
            return f"at::where({args[0]}, {args[1]}, {args[2]})"
        if e.fn == "clamp":
            return f"at::minimum(at::maximum({args[0]}, {args[1]}), {args[2]})"
        return f"at::{e.fn}({', '.join(args)})"
    raise TypeError(f"unsupported expression {e!r}")


def _number(e: E.Expr, scope: E.Scope) -> str:
    if isinstance(e, E.Num):
        return float_literal(e.value)
    return f"static_cast<double>({uniform(e, scope)})"
