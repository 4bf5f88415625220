"""Translation of spec types, defaults and expressions into Python."""

from __future__ import annotations

import math
import re

from .. import expr as E
from . import cpp
from ..functions import FUNCTIONS
from ..schema import Argument, Type, format_default

_SCALAR = {"int": "int", "SymInt": "int", "float": "float", "bool": "bool", "str": "str", "Scalar": "Union[int, float, bool]", "Tensor": "Tensor"}


def annotation(t: Type) -> str:
    inner = _SCALAR[t.base]
    if t.is_list:
        inner = f"Sequence[{inner}]"
    return f"Optional[{inner}]" if t.optional else inner


def default(a: Argument) -> str:
    v = a.default
    if isinstance(v, tuple):
        return "(" + "".join(format_default(x) + ", " for x in v) + ")"
    return format_default(v)


def parameters(args: tuple[Argument, ...]) -> str:
    parts: list[str] = []
    star = False
    for a in args:
        if a.kwarg_only and not star:
            parts.append("*")
            star = True
        s = f"{a.name}: {annotation(a.type)}"
        if a.has_default:
            s += f" = {default(a)}"
        parts.append(s)
    return ", ".join(parts)


def call_arguments(args: tuple[Argument, ...]) -> str:
    return ", ".join(a.name if not a.kwarg_only else f"{a.name}={a.name}" for a in args)


def literal(value) -> str:
    """A Python literal for plain data (dicts, lists, tuples, str, numbers), non-finite floats included."""
    if value is None or type(value) in (str, int, bool):  # the common leaves first: tests print thousands
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        items = [literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise TypeError(f"no Python literal for {type(value).__name__}")


_PLAIN = re.compile(r"[\t\n -~]*\Z")  # printable ASCII, tabs and newlines: nothing is invisible


def docstring(text: str) -> str:
    """A triple-quoted Python literal holding ``text``."""
    body = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if not _PLAIN.match(body):
        body = "".join(f"\\u{ord(c):04x}" if cpp.invisible(c) and ord(c) <= 0xFFFF else c for c in body)  # escaped, not hidden
    if body.endswith('"'):
        body = body[:-1] + '\\"'
    return '"""' + body + '"""'


def reference(e: E.Expr, scope: E.Scope) -> str:
    """The kernel expression as torch code over float64 tensors (tests' oracle)."""
    return _Reference(scope).print(e)


def size(e: E.Expr) -> str:
    """A size expression of a shape rule as Python over the (reference's) tensors: ints, `//`."""
    if isinstance(e, E.Num):
        return repr(int(e.value))
    if isinstance(e, E.Name):
        return e.id
    if isinstance(e, E.Index):
        return f"{e.obj.id}[{e.index}]"
    if isinstance(e, E.Unary):
        return f"(-{size(e.operand)})"
    if isinstance(e, E.Binary):
        return f"({size(e.lhs)} {e.op} {size(e.rhs)})"
    if isinstance(e, E.Method):
        return f"{e.obj.id}.{e.method}({', '.join(size(a) for a in e.args)})"
    raise TypeError(e)


_NONE_READS_AS = {E.NUM: "0.0", E.INT: "0", E.BOOL: "False", E.STR: "''", E.TENSOR: "0.0"}


class _Reference:
    def __init__(self, scope: E.Scope) -> None:
        self.scope = scope
        self.kinds: dict[int, str] = {}
        self.elementwise: dict[int, bool] = {}

    def uniform(self, e: E.Expr) -> bool:
        return not E.reads_tensors(e, self.scope, self.elementwise)

    def print(self, e: E.Expr) -> str:
        if isinstance(e, E.Num):
            return repr(float(e.value))
        if isinstance(e, E.Str):
            return repr(e.value)
        if isinstance(e, E.Name):
            if e.id in self.scope.optional:  # read only where not None (E.check_optional_guards); Python evaluates eagerly
                return f"({_NONE_READS_AS[self.scope.names[e.id]]} if {e.id} is None else {e.id})"
            return e.id
        if isinstance(e, E.IsNone):
            return f"({e.operand.id} is None)"
        if isinstance(e, E.Index):
            return f"{e.obj.id}[{e.index}]"
        if isinstance(e, E.Unary):
            if e.op == "not":
                if E.typecheck(e, self.scope, self.kinds) == E.MASK:
                    return f"torch.logical_not({self.print(e.operand)})"
                return f"(not {self.print(e.operand)})"
            return f"(-{self.print(e.operand)})"
        if isinstance(e, (E.Binary, E.Compare)):
            return f"({self.print(e.lhs)} {e.op} {self.print(e.rhs)})"
        if isinstance(e, E.BoolOp):
            if E.typecheck(e, self.scope, self.kinds) == E.MASK:  # bool tensors: & and | are elementwise
                return "(" + f" {'&' if e.op == 'and' else '|'} ".join(self.print(v) for v in e.values) + ")"
            return "(" + f" {e.op} ".join(self.print(v) for v in e.values) + ")"
        if isinstance(e, E.In):
            return f"({self.print(e.operand)} in ({', '.join(self.print(o) for o in e.options)},))"
        if isinstance(e, E.Call):
            args = [self.print(a) for a in e.args]
            if e.fn == "where" and E.typecheck(e.args[0], self.scope, self.kinds) == E.BOOL:
                return f"({args[1]} if {args[0]} else {args[2]})"
            if self.uniform(e):
                return f"float({FUNCTIONS[e.fn].torch.format(*(f'_t({a})' for a in args))})"
            if (v := E.softplus_argument(e)) is not None:
                # log(1 + exp(v)) as the kernel computes it, without exp's overflow (v > 709 in float64)
                inner = self.print(v)
                return f"torch.logaddexp({inner}, torch.zeros_like({inner}))"
            args = [a if not self.uniform(x) else f"_t({a})" for a, x in zip(args, e.args)]
            return FUNCTIONS[e.fn].torch.format(*args)
        raise TypeError(e)
