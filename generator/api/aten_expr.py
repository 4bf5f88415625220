"""Spec expressions printed as differentiable ATen calls on whole tensors.

Used for the create_graph path of backward (double backward) and for forward-mode AD: ATen's own
autograd then differentiates the gradient formulas again. Numbers become 0-dim tensors
(``_s(v)``), which broadcast and do not change the result dtype.

A sub-expression that a formula uses more than once (gelu's gradient reads its tanh three times)
is computed once: the formula becomes an immediately invoked lambda that binds it to a local
first. That saves the repeated ATen calls at run time and a third of the op file's machine code.
The branches of a uniform ``where`` (a C++ ``?:``) are blocks of their own, so nothing that only
one branch needs is computed before the condition is known.
"""

from __future__ import annotations

import itertools
from collections import Counter

from .. import expr as E
from .cpp import float_literal, nested_call
from .cpp_expr import uniform

_CMP = {"<": "at::lt", "<=": "at::le", ">": "at::gt", ">=": "at::ge", "==": "at::eq", "!=": "at::ne"}
_ARITH = {"+": "at::add", "-": "at::sub", "*": "at::mul", "/": "at::div", "**": "at::pow"}


def aten(e: E.Expr, scope: E.Scope, kinds: dict[int, str] | None = None) -> str:
    return _Printer(scope, {} if kinds is None else kinds).block(e)


class _Printer:
    def __init__(self, scope: E.Scope, kinds: dict[int, str]) -> None:
        self.scope = scope
        self.kinds = kinds
        self.locals = itertools.count()  # one numbering for the whole formula: nested blocks shadow nothing

    def kind(self, e: E.Expr) -> str:
        return E.typecheck(e, self.scope, self.kinds)

    def block(self, root: E.Expr) -> str:
        """``root`` as one C++ expression, its repeated sub-expressions bound to locals first."""
        uses = Counter({root: 1})

        def count(node: E.Expr) -> None:  # references to each distinct node from each distinct parent
            for child in self.operands(node):
                uses[child] += 1
                if uses[child] == 1:
                    count(child)

        count(root)
        lets: list[str] = []
        printed: dict[E.Expr, str] = {}

        def code(node: E.Expr) -> str:
            if node not in printed:
                text = self.node(node, code)
                if uses[node] > 1 and not isinstance(node, E.Name):
                    name = f"_c{next(self.locals)}"
                    lets.append(f"const at::Tensor {name} = {text};")
                    text = name
                printed[node] = text
            return printed[node]

        body = code(root)
        return f"[&] {{ {' '.join(lets)} return {body}; }}()" if lets else body

    def operands(self, e: E.Expr) -> tuple[E.Expr, ...]:
        """The sub-expressions that ``e`` prints as tensors in its own block."""
        if self.kind(e) in (E.NUM, E.INT, E.BOOL) or isinstance(e, E.Name):
            return ()
        if isinstance(e, E.Unary):
            return (e.operand,)
        if isinstance(e, (E.Binary, E.Compare)):
            return (e.lhs, e.rhs)
        if isinstance(e, E.BoolOp):
            return tuple(v for v in e.values if self.kind(v) == E.MASK)  # per-call conditions are C++ bools
        if isinstance(e, E.Call):
            if self._uniform_where(e):
                return ()  # each branch is a block of its own
            if (v := E.softplus_argument(e)) is not None:
                return (v, v)  # printed twice below: bound to a local
            return e.args
        raise TypeError(f"unsupported expression {e!r}")

    def _uniform_where(self, e: E.Call) -> bool:
        return e.fn == "where" and self.kind(e.args[0]) == E.BOOL

    def node(self, e: E.Expr, code) -> str:
        kind = self.kind(e)
        if kind in (E.NUM, E.INT):
            return f"_s({_number(e, self.scope)})"
        if kind == E.BOOL:
            return uniform(e, self.scope)
        if isinstance(e, E.Name):
            return e.id
        if isinstance(e, E.Unary):
            return f"at::{'logical_not' if e.op == 'not' else 'neg'}({code(e.operand)})"
        if isinstance(e, E.Binary):
            return f"{_ARITH[e.op]}({code(e.lhs)}, {code(e.rhs)})"
        if isinstance(e, E.BoolOp):
            # A per-call condition beside a mask becomes a 0-dim tensor (logical ops take any dtype).
            masks = [code(v) if self.kind(v) == E.MASK else f"_s({uniform(v, self.scope)} ? 1.0 : 0.0)" for v in e.values]
            return nested_call(f"at::logical_{e.op}", masks)
        if isinstance(e, E.Compare):
            return f"{_CMP[e.op]}({code(e.lhs)}, {code(e.rhs)})"
        if isinstance(e, E.Call):
            if self._uniform_where(e):
                return f"({uniform(e.args[0], self.scope)} ? {self.block(e.args[1])} : {self.block(e.args[2])})"
            if (v := E.softplus_argument(e)) is not None:  # log(1 + exp(v)) without exp's overflow
                return f"at::logaddexp({code(v)}, at::zeros_like({code(v)}))"
            args = [code(a) for a in e.args]
            if e.fn == "where":
                return f"at::where({args[0]}, {args[1]}, {args[2]})"
            if e.fn == "clamp":
                return f"at::minimum(at::maximum({args[0]}, {args[1]}), {args[2]})"
            return f"at::{e.fn}({', '.join(args)})"
        raise TypeError(f"unsupported expression {e!r}")


def _number(e: E.Expr, scope: E.Scope) -> str:
    if isinstance(e, E.Num):
        return float_literal(e.value)
    return f"static_cast<double>({uniform(e, scope)})"
