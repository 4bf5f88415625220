"""Spec expressions printed as C++.

Kernel expressions become the body of a generic lambda that is instantiated twice: for
scalars in ``opmath_t`` and for ``at::vec::Vectorized<opmath_t>``. Sub-expressions that do
not depend on tensor elements (attributes, literals, conditions on attributes) are hoisted
out of the loop: numbers become extra lambda parameters (so the vector instantiation sees
them broadcast), conditions become captured ``bool``s used in a ternary, so only the chosen
branch runs per element.

Checks and explicit shapes are printed over ``c10::SymInt`` so that Meta kernels work
with symbolic shapes under ``torch.compile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import expr as E
from ..functions import FUNCTIONS
from .cpp import float_literal, nested_call, string_literal


@dataclass
class KernelCode:
    params: list[str]  # tensor-element parameters, in iterator input order
    bodies: list[str]  # one C++ expression per output, over params, _u<i> and _c<i>
    hoisted_numbers: list[str] = field(default_factory=list)  # C++ (double) expressions for _u<i>
    hoisted_conditions: list[str] = field(default_factory=list)  # C++ bool expressions for _c<i>
    # Whether an element goes through a function computed as a series (exp, tanh, pow, ...):
    # then the loop is bound by arithmetic; else (+, *, min, abs, where, ...) by memory.
    computes_series: bool = False

    @property
    def body(self) -> str:
        (only,) = self.bodies
        return only


# minimum / maximum / clamp of an element and per-call numbers that are not NaN: at::vec's
# clamp_min / clamp_max, one instruction where a NaN-propagating minimum / maximum of two vectors
# takes four (compare, mask, min or max, or). NaN in the element still propagates.
_EXTREMA = {"maximum": "maximum_uniform", "minimum": "minimum_uniform", "clamp": "clamp_uniform"}
# Element comparisons call opgen's functions, not the operators: on vectors of the DEFAULT
# capability those avoid at::vec's branch per lane (opgen_math.h).
_COMPARISONS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


class _KernelPrinter:
    def __init__(self, scope: E.Scope, tensor_params: list[str]) -> None:
        self.scope = scope
        self.params = tensor_params
        self.numbers: list[str] = []
        self.conditions: list[str] = []
        self.kinds: dict[int, str] = {}
        self.elementwise: dict[int, bool] = {}
        # Whether attributes under minimum / maximum / clamp may be taken as not NaN (the printer
        # prints a kernel twice when they occur, once each way, and `kernel_code` picks per call).
        self.assume_not_nan = False
        self.maybe_nan: list[str] = []  # those attributes' uniform C++ expressions
        self.computes_series = False

    def is_uniform(self, e: E.Expr) -> bool:
        return not E.reads_tensors(e, self.scope, self.elementwise)

    def element(self, e: E.Expr) -> str:
        kind = E.typecheck(e, self.scope, self.kinds)
        if self.is_uniform(e):
            if isinstance(e, E.Num):
                return f"_t({float_literal(e.value)})"
            if kind == E.BOOL:
                return self.hoist(self.conditions, uniform(e, self.scope), "_c")
            return self.hoist(self.numbers, uniform(e, self.scope), "_u")
        if isinstance(e, E.Name):
            return e.id
        if isinstance(e, E.Unary):
            fn = "logical_not" if e.op == "not" else "neg"
            return f"opgen::{fn}({self.element(e.operand)})"
        if isinstance(e, E.BoolOp):
            return nested_call(f"opgen::logical_{e.op}", [self.element(v) for v in e.values])
        if isinstance(e, E.Binary):
            if e.op == "**":
                return self.power(e)
            return f"({self.element(e.lhs)} {e.op} {self.element(e.rhs)})"
        if isinstance(e, E.Compare):
            return f"opgen::{_COMPARISONS[e.op]}({self.element(e.lhs)}, {self.element(e.rhs)})"
        if isinstance(e, E.Call):
            if e.fn == "where" and E.typecheck(e.args[0], self.scope, self.kinds) == E.BOOL:
                c, a, b = (self.element(x) for x in e.args)
                return f"({c} ? {a} : {b})"
            if e.fn in _EXTREMA:
                fast = self.extremum(e)
                if fast is not None:
                    return fast
            if (v := E.softplus_argument(e)) is not None:
                self.computes_series = True
                return f"opgen::softplus({self.element(v)})"
            self.computes_series |= FUNCTIONS[e.fn].series
            return f"opgen::{e.fn}({', '.join(self.element(a) for a in e.args)})"
        raise TypeError(f"not an element expression: {e!r}")

    def extremum(self, e: E.Call) -> str | None:
        """`opgen::<fn>_uniform(element, numbers...)` where every other operand is a per-call number
        that is not NaN: a literal always, an attribute when `assume_not_nan`; None otherwise."""
        args = list(e.args)
        if e.fn == "clamp":
            element, bounds = args[0], args[1:]
        else:
            uniform_args = [a for a in args if self.is_uniform(a)]
            if len(uniform_args) != 1:
                return None
            bounds = uniform_args
            element = args[1] if uniform_args[0] is args[0] else args[0]  # maximum is symmetric in value
        if self.is_uniform(element) or not all(self.is_uniform(b) for b in bounds):
            return None
        if any(isinstance(b, E.Num) and math.isnan(b.value) for b in bounds):
            return None
        attributes = [b for b in bounds if not isinstance(b, E.Num)]
        for b in attributes:
            code = uniform(b, self.scope)
            if code not in self.maybe_nan:
                self.maybe_nan.append(code)
        if attributes and not self.assume_not_nan:
            return None
        return f"opgen::{_EXTREMA[e.fn]}({', '.join(self.element(a) for a in [element, *bounds])})"

    def power(self, e: E.Binary) -> str:
        if isinstance(e.rhs, E.Num) and e.rhs.value in (1, 2, 3, 0.5, -1):
            base = self.element(e.lhs)
            return {1: base, 2: f"({base} * {base})", 3: f"({base} * {base} * {base})",
                    0.5: f"opgen::sqrt({base})", -1: f"(_t(1.0) / {base})"}[e.rhs.value]
        self.computes_series = True
        return f"opgen::pow({self.element(e.lhs)}, {self.element(e.rhs)})"

    @staticmethod
    def hoist(table: list[str], code: str, prefix: str) -> str:
        if code not in table:
            table.append(code)
        return f"{prefix}{table.index(code)}"


def kernel_code(exprs: E.Expr | list[E.Expr], scope: E.Scope, tensor_params: list[str]) -> KernelCode:
    """C++ for one or several element expressions that share their hoisted per-call values."""
    p = _KernelPrinter(scope, tensor_params)
    exprs = exprs if isinstance(exprs, list) else [exprs]
    bodies = [p.element(e) for e in exprs]
    if p.maybe_nan:
        # Attributes bound minimum / maximum / clamp: the fast form when none of them is NaN, a
        # condition checked once per call (the loop is unswitched on it), else the exact one.
        p.assume_not_nan = True
        fast = [p.element(e) for e in exprs]
        not_nan = p.hoist(p.conditions, " && ".join(f"!std::isnan(static_cast<double>({c}))" for c in p.maybe_nan), "_c")
        bodies = [f"({not_nan} ? {f} : {b})" for f, b in zip(fast, bodies)]
    return KernelCode(tensor_params, bodies, p.numbers, p.conditions, p.computes_series)


def uniform(e: E.Expr, scope: E.Scope) -> str:
    """A uniform (per-call) expression over attributes, computed in double / bool."""
    if isinstance(e, E.Num):
        return float_literal(e.value)
    if isinstance(e, E.Str):
        return string_literal(e.value)
    if isinstance(e, E.Name):
        if e.id in ("True", "False"):
            return e.id.lower()
        kind = scope.names[e.id]
        value = _value_of(e, scope)
        if kind == E.INT:
            return f"static_cast<double>({value})"
        if kind == E.STR:
            return f"c10::string_view({value})"
        return value
    if isinstance(e, E.IsNone):
        return f"{e.operand.id}__absent" if e.operand.id in scope.absent else f"(!{e.operand.id}.has_value())"
    if isinstance(e, E.Index):
        element = f"{e.obj.id}[{e.index}]"
        return f"static_cast<double>({element})" if scope.names[e.obj.id] == E.INT else element
    if isinstance(e, E.Unary):
        return f"(!{uniform(e.operand, scope)})" if e.op == "not" else f"(-{uniform(e.operand, scope)})"
    if isinstance(e, E.Binary):
        if e.op == "**":
            return f"std::pow({uniform(e.lhs, scope)}, {uniform(e.rhs, scope)})"
        return f"({uniform(e.lhs, scope)} {e.op} {uniform(e.rhs, scope)})"
    if isinstance(e, E.Compare):
        return f"({uniform(e.lhs, scope)} {e.op} {uniform(e.rhs, scope)})"
    if isinstance(e, E.BoolOp):
        op = " && " if e.op == "and" else " || "
        return "(" + op.join(uniform(v, scope) for v in e.values) + ")"
    if isinstance(e, E.In):
        lhs = uniform(e.operand, scope)
        return "(" + " || ".join(f"{lhs} == {uniform(o, scope)}" for o in e.options) + ")"
    if isinstance(e, E.Call):
        if e.fn == "isfinite":
            return f"std::isfinite(static_cast<double>({uniform(e.args[0], scope)}))"
        if e.fn == "where":
            c, a, b = (uniform(x, scope) for x in e.args)
            return f"({c} ? {a} : {b})"
        return f"opgen::{e.fn}({', '.join(uniform(a, scope) for a in e.args)})"
    raise TypeError(f"not a uniform expression: {e!r}")


# What an optional attribute reads as when None: never observed, since every read is guarded
# (E.check_optional_guards), but per-call values are computed before the branch that uses them.
_NONE_READS_AS = {E.NUM: "0.0", E.INT: "0", E.BOOL: "false", E.STR: '""'}


def _value_of(e: E.Name, scope: E.Scope) -> str:
    value = scope.cpp_values.get(e.id, e.id)
    if e.id in scope.optional:
        return f"{value}.value_or({_NONE_READS_AS[scope.names[e.id]]})"
    return value


def symbolic(e: E.Expr, scope: E.Scope) -> str:
    """A check or size expression. Sizes are ``c10::SymInt``; conditions over them ``c10::SymBool``."""
    kind = E.typecheck(e, scope)
    if not _has_sizes(e, scope):
        return uniform(e, scope) if kind != E.INT else _int_uniform(e, scope)
    if isinstance(e, E.Name):  # a SymInt attribute
        return e.id
    if isinstance(e, E.Index):  # an element of a SymInt[N] attribute
        return f"{e.obj.id}[{e.index}]"
    if isinstance(e, E.Method):
        obj = scope.cpp_values.get(e.obj.id, e.obj.id)  # a hand-written op's Tensor? is `(*bias)`
        if e.method == "dim":
            return f"c10::SymInt({obj}.dim())"
        if e.method == "numel":
            return f"{obj}.sym_numel()"
        return f"{obj}.sym_size({_int_uniform(e.args[0], scope)})"
    if isinstance(e, E.Unary):
        if e.op == "not":
            return f"(~{_as_symbool(e.operand, scope)})"
        return f"(-{symbolic(e.operand, scope)})"
    if isinstance(e, E.Binary):
        if e.op == "/":
            raise TypeError("true division of sizes")
        if e.op == "**":
            raise TypeError("power of sizes")
        return f"opgen::size_arith('{_ARITH_CODE[e.op]}', {_as_symint(e.lhs, scope)}, {_as_symint(e.rhs, scope)}, _op)"
    if isinstance(e, E.Compare):
        lk = E.typecheck(e.lhs, scope)
        rk = E.typecheck(e.rhs, scope)
        if E.NUM in (lk, rk):  # a size against a float attribute: compare as double
            return f"c10::SymBool({_as_double(e.lhs, scope)} {e.op} {_as_double(e.rhs, scope)})"
        ops = {"<": "sym_lt", "<=": "sym_le", ">": "sym_gt", ">=": "sym_ge", "==": "sym_eq", "!=": "sym_ne"}
        return f"{_as_symint(e.lhs, scope)}.{ops[e.op]}({_as_symint(e.rhs, scope)})"
    if isinstance(e, E.BoolOp):
        # Short-circuit like Python, so `x.dim() == 2 and x.size(1) == 3` never reads a missing size.
        fn = "opgen::all_of" if e.op == "and" else "opgen::any_of"
        return f"c10::SymBool({fn}(" + ", ".join(f"[&] {{ return {_as_symbool(v, scope)}; }}" for v in e.values) + "))"
    if isinstance(e, E.In):
        lhs = _as_symint(e.operand, scope)
        return "(" + " | ".join(f"{lhs}.sym_eq(c10::SymInt({o.value}))" for o in e.options) + ")"
    if isinstance(e, E.Call):
        raise TypeError(f"function {e.fn} over sizes")
    raise TypeError(f"unsupported check expression {e!r}")


# Integer arithmetic of sizes and int attributes goes through checked helpers (opgen_runtime.h):
# int64 overflow and division by zero raise errors naming the op instead of undefined behaviour.
_ARITH_CODE = {"+": "+", "-": "-", "*": "*", "//": "/"}


def _has_sizes(e: E.Expr, scope: E.Scope) -> bool:
    """Whether ``e`` reads a size: a tensor's, or a SymInt attribute's or element's (symbolic under torch.compile)."""
    return any(isinstance(n, E.Method) or (isinstance(n, E.Name) and n.id in scope.sizes) for n in E.walk(e))


def _int_uniform(e: E.Expr, scope: E.Scope) -> str:
    """An integer expression without sizes, in int64_t."""
    if isinstance(e, E.Num):
        return f"int64_t{{{int(e.value)}}}"
    if isinstance(e, E.Name):  # an int attribute (SymInts are sizes: symbolic() prints them)
        return f"{e.id}.value_or(0)" if e.id in scope.optional else e.id
    if isinstance(e, E.Index):
        return f"{e.obj.id}[{e.index}]"
    if isinstance(e, E.Unary):
        return f"(-{_int_uniform(e.operand, scope)})"
    if isinstance(e, E.Binary):
        return f"opgen::int_arith('{_ARITH_CODE[e.op]}', {_int_uniform(e.lhs, scope)}, {_int_uniform(e.rhs, scope)}, _op)"
    if isinstance(e, E.Method):
        return f"{scope.cpp_values.get(e.obj.id, e.obj.id)}.dim()"
    raise TypeError(f"unsupported integer expression {e!r}")


def _as_symint(e: E.Expr, scope: E.Scope) -> str:
    s = symbolic(e, scope)
    return s if _has_sizes(e, scope) else f"c10::SymInt({s})"


def _as_symbool(e: E.Expr, scope: E.Scope) -> str:
    s = symbolic(e, scope)
    return s if _has_sizes(e, scope) else f"c10::SymBool({s})"


def _as_double(e: E.Expr, scope: E.Scope) -> str:
    if _has_sizes(e, scope):
        return f"static_cast<double>(({symbolic(e, scope)}).guard_int(__FILE__, __LINE__))"
    return f"static_cast<double>({uniform(e, scope)})"
