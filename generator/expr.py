"""The expression language of specs: an IR parsed from Python syntax through a whitelist.

Spec text never reaches generated code directly: it is parsed here into frozen
dataclasses, type-checked against the op's arguments, and printed back by each backend.
"""

from __future__ import annotations

import ast
import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Union

from .errors import did_you_mean
from .functions import FUNCTIONS, METHODS

MAX_EXPR_CHARS = 4096
MAX_EXPR_DEPTH = 64


class ExprError(Exception):
    def __init__(self, col: int, message: str) -> None:
        super().__init__(message)
        self.col = col  # 0-based offset inside the expression text
        self.message = message


@dataclass(frozen=True)
class Num:
    value: Union[int, float]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Str:
    value: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Name:
    id: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Unary:
    op: str  # '-', 'not'
    operand: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Binary:
    op: str  # '+', '-', '*', '/', '//', '**'
    lhs: "Expr"
    rhs: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Compare:
    op: str  # '<', '<=', '>', '>=', '==', '!='
    lhs: "Expr"
    rhs: "Expr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class BoolOp:
    op: str  # 'and', 'or'
    values: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class In:
    operand: "Expr"
    options: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class IsNone:
    """`eps is None` for an optional attribute (`eps is not None` is `not (eps is None)`)."""
    operand: Name
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Index:
    """`betas[0]`: one element of a sized list attribute (`float[2] betas`), a literal index."""
    obj: Name
    index: int
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Method:
    obj: Name
    method: str  # 'size', 'dim', 'numel'
    args: tuple["Expr", ...]
    col: int = field(default=0, compare=False)


Expr = Union[Num, Str, Name, Unary, Binary, Compare, BoolOp, In, IsNone, Index, Call, Method]

# Operators a PyTorch user reaches for, with what the language has instead.
_BITWISE_HINTS = {
    ast.BitAnd: "'&' is not supported; combine conditions with 'and', e.g. x > 0 and y > 0",
    ast.BitOr: "'|' is not supported; combine conditions with 'or', e.g. x < lo or x > hi",
    ast.BitXor: "'^' is not supported; write a power as x ** 2",
}
_OPERATOR_HINTS = {
    **_BITWISE_HINTS,
    ast.Mod: "'%' is not supported; write remainder(a, b) (the sign of b, as Python's %) or fmod(a, b) (the sign of a)",
}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def parse_expr(text: str) -> Expr:
    if not isinstance(text, str):
        raise ExprError(0, "an expression must be a string")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(0, f"expression is {len(text)} characters; the limit is {MAX_EXPR_CHARS}")
    text = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if "#" in text:
        raise ExprError(text.index("#"), "'#' is not allowed in expressions (comments belong in YAML, after the value)")
    stripped = text.lstrip()
    lead = len(text) - len(stripped)
    if not stripped:
        raise ExprError(0, "empty expression")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # e.g. "1e309x"; errors are reported below
            tree = ast.parse(stripped, mode="eval")
    except SyntaxError as e:
        col = (e.offset - 1 if e.offset else len(stripped.rstrip())) + lead
        msg = "the expression ends too early" if not e.offset else e.msg
        raise ExprError(col, f"invalid expression syntax: {msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError(0, "expression is too deeply nested") from None
    return _Converter(lead).convert(tree.body, 0)


class _Converter:
    def __init__(self, lead: int) -> None:
        self.lead = lead

    def col(self, node: ast.AST) -> int:
        return getattr(node, "col_offset", 0) + self.lead

    def convert(self, node: ast.AST, depth: int) -> Expr:
        if depth > MAX_EXPR_DEPTH:
            raise ExprError(self.col(node), "expression is too deeply nested")
        c = self.col(node)
        sub = lambda n: self.convert(n, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return Name("True" if v else "False", c)
            if isinstance(v, (int, float)):
                return Num(v, c)
            if isinstance(v, str):
                return Str(v, c)
            raise ExprError(c, f"unsupported literal {v!r}")
        if isinstance(node, ast.Name):
            return Name(node.id, c)
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                operand = sub(node.operand)
                if isinstance(operand, Num):
                    return Num(-operand.value, c)
                return Unary("-", operand, c)
            if isinstance(node.op, ast.UAdd):
                return sub(node.operand)
            if isinstance(node.op, ast.Not):
                return Unary("not", sub(node.operand), c)
            if isinstance(node.op, ast.Invert):
                raise ExprError(c, "'~' is not supported; negate a condition with 'not', e.g. not (x > 0)")
            raise ExprError(c, "unsupported unary operator; use '-' or 'not'")
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise ExprError(c, _OPERATOR_HINTS.get(type(node.op), "unsupported operator; use + - * / // **"))
            return Binary(op, sub(node.left), sub(node.right), c)
        if isinstance(node, ast.BoolOp):
            return BoolOp("and" if isinstance(node.op, ast.And) else "or", tuple(sub(v) for v in node.values), c)
        if isinstance(node, ast.Compare):
            if len(node.ops) != 1:
                for operand in (node.left, *node.comparators):  # `x > 0 | y > 0` is x > (0 | y) > 0
                    if isinstance(operand, ast.BinOp) and type(operand.op) in _BITWISE_HINTS:
                        raise ExprError(self.col(operand), _BITWISE_HINTS[type(operand.op)])
                raise ExprError(c, "chained comparisons are not supported; combine them with 'and'")
            op_node, right = node.ops[0], node.comparators[0]
            if isinstance(op_node, (ast.Is, ast.IsNot)):
                if not (isinstance(right, ast.Constant) and right.value is None and isinstance(node.left, ast.Name)):
                    raise ExprError(c, "'is' only tests an optional attribute against None, e.g. eps is None")
                test = IsNone(Name(node.left.id, c), c)
                return Unary("not", test, c) if isinstance(op_node, ast.IsNot) else test
            if isinstance(op_node, ast.In):
                if not isinstance(right, (ast.List, ast.Tuple)):
                    raise ExprError(self.col(right), "'in' needs a list of literals, e.g. x in ['a', 'b']")
                return In(sub(node.left), tuple(sub(e) for e in right.elts), c)
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise ExprError(c, "unsupported comparison; use < <= > >= == != or in")
            return Compare(op, sub(node.left), sub(right), c)
        if isinstance(node, ast.Call):
            if node.keywords:
                raise ExprError(self.col(node.keywords[0].value), "keyword arguments are not supported in expressions")
            args = tuple(sub(a) for a in node.args)
            if isinstance(node.func, ast.Name):
                return Call(node.func.id, args, c)
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
                obj = Name(node.func.value.id, self.col(node.func.value))
                return Method(obj, node.func.attr, args, c)
            raise ExprError(c, "only functions (exp(x)) and tensor methods (x.size(0)) can be called")
        if isinstance(node, ast.Attribute):
            if node.attr in _CONSTANT_HINTS:  # math.pi, torch.inf
                raise ExprError(c, f"attribute access is not supported; {_CONSTANT_HINTS[node.attr]}")
            raise ExprError(c, f"attribute access is not supported; did you mean to call {node.attr}()?")
        if isinstance(node, ast.IfExp):
            raise ExprError(c, "'a if cond else b' is not supported; write where(cond, a, b)")
        if isinstance(node, ast.Subscript):
            return self.index(node, c)
        raise ExprError(c, f"unsupported syntax ({type(node).__name__})")

    def index(self, node: ast.Subscript, c: int) -> Index:
        if not isinstance(node.value, ast.Name):
            raise ExprError(c, "only a list attribute can be indexed, e.g. betas[0] for float[2] betas")
        i = node.slice
        ic = self.col(i)
        if isinstance(i, ast.Slice):
            raise ExprError(ic, "slices are not supported; index one element at a time, e.g. betas[0]")
        negative = isinstance(i, ast.UnaryOp) and isinstance(i.op, ast.USub)
        literal = i.operand if negative else i
        if not (isinstance(literal, ast.Constant) and type(literal.value) is int):
            raise ExprError(ic, "an index must be a literal integer, e.g. betas[0]")
        if negative:
            raise ExprError(ic, f"negative indices are not supported; count from the front, e.g. {node.value.id}[0]")
        return Index(Name(node.value.id, self.col(node.value)), literal.value, c)


# ---- type checking -----------------------------------------------------------------------

# Kinds of values in the language.
ELEM = "element"  # a per-element tensor value (numeric)
MASK = "mask"  # a per-element boolean
NUM = "number"  # a uniform number (attribute, literal, size arithmetic)
INT = "int"  # a uniform integer (int attribute, size, dim)
BOOL = "bool"  # a uniform boolean
STR = "str"
TENSOR = "tensor"  # a whole tensor, only as the object of a method call

NUMERIC = (ELEM, NUM, INT)


@dataclass(frozen=True)
class Scope:
    """What names mean in one context (kernel, check, shape, gradient)."""

    names: dict[str, str]  # name -> kind
    elementwise: bool  # tensors stand for their elements (kernels, gradients)
    what: str  # 'kernel expression', 'check', ...
    hints: dict[str, str] = field(default_factory=dict)  # unknown name -> what to write instead
    optional: frozenset[str] = frozenset()  # attributes that may be None (`float? eps=None`), and `absent`
    # optional tensors (a pointwise op's `Tensor? bias`): generated C++ reads one through a stand-in
    # when it is None and tests `<name>__absent`
    absent: frozenset[str] = frozenset()
    # C++ reading an attribute whose parameter is not a plain number: in checks, an at::Scalar
    # (kernels and autograd nodes get doubles)
    cpp_values: dict[str, str] = field(default_factory=dict)
    sizes: frozenset[str] = frozenset()  # SymInt attributes: in checks and shapes, symbolic like t.size(i)
    # sized list attributes (`float[2] betas`), read one element at a time: name -> size; their
    # entry in `names` is the kind of an element
    lists: dict[str, int] = field(default_factory=dict)
    lets: tuple[str, ...] = ()  # a spec's `let:` names, replaced before type checks; listed in unknown-name errors

    def extended(self, names: dict[str, str], what: str | None = None) -> "Scope":
        """This scope with more names (gradients, accumulators), the attributes unchanged."""
        return dataclasses.replace(self, names={**self.names, **names}, what=what or self.what)

    def kind_of(self, name: Name) -> str:
        if name.id in ("True", "False"):
            return BOOL
        if name.id in self.lists:
            raise ExprError(name.col, f"'{name.id}' is a list ({self.lists[name.id]} elements); read one element, e.g. {name.id}[0]")
        kind = self.names.get(name.id)
        if kind is None:
            known = sorted(self.names)
            hint = did_you_mean(name.id, known + list(self.lets))
            if not hint and name.id in FUNCTIONS:
                hint = f"; '{name.id}' is a function: call it as {name.id}(...)"
            if not hint and name.id in _CONSTANT_HINTS:
                hint = f"; {_CONSTANT_HINTS[name.id]}"
            if name.id in self.hints:
                hint = f"; {self.hints[name.id]}"
            lets = f"; lets: {', '.join(self.lets)}" if self.lets else ""
            raise ExprError(name.col, f"unknown name '{name.id}' in {self.what}; known names: {', '.join(known) or 'none'}{lets}{hint}")
        return kind


def typecheck(e: Expr, scope: Scope, memo: dict[int, str] | None = None) -> str:
    """Returns the kind of ``e`` or raises ExprError pointing at the offending node.

    Printers ask for the kind of every sub-expression; passing the same ``memo`` makes that
    linear instead of quadratic in the expression's size.
    """
    if memo is None:
        return _typecheck(e, scope, {})
    kind = memo.get(id(e))
    if kind is None:
        kind = memo[id(e)] = _typecheck(e, scope, memo)
    return kind


def _typecheck(e: Expr, scope: Scope, memo: dict[int, str]) -> str:
    if isinstance(e, Num):
        return INT if isinstance(e.value, int) else NUM
    if isinstance(e, Str):
        return STR
    if isinstance(e, Name):
        kind = scope.kind_of(e)
        if kind == TENSOR:
            if scope.elementwise:
                return ELEM
            raise ExprError(e.col, f"tensor '{e.id}' can't be used as a value in a {scope.what}; use {e.id}.size(i), {e.id}.dim() or {e.id}.numel()")
        return kind
    if isinstance(e, Unary):
        k = typecheck(e.operand, scope, memo)
        if e.op == "not":
            if k not in (BOOL, MASK):
                raise ExprError(e.col, f"'not' needs a condition (a comparison such as x > 0), not {_described(k)}")
            return k
        _need_numeric(e.operand, k, "'-'")
        return k
    if isinstance(e, Binary):
        lk, rk = typecheck(e.lhs, scope, memo), typecheck(e.rhs, scope, memo)
        _need_numeric(e.lhs, lk, f"'{e.op}'")
        _need_numeric(e.rhs, rk, f"'{e.op}'")
        if e.op == "//":
            if scope.elementwise:
                raise ExprError(e.col, "'//' is for sizes; use floor(a / b) on tensor values")
            if lk != INT or rk != INT:
                raise ExprError(e.col, "'//' needs integers")
            return INT
        if ELEM in (lk, rk):
            return ELEM
        if e.op == "/" or NUM in (lk, rk):
            return NUM
        return INT
    if isinstance(e, Compare):
        lk, rk = typecheck(e.lhs, scope, memo), typecheck(e.rhs, scope, memo)
        if STR in (lk, rk):
            if lk != rk or e.op not in ("==", "!="):
                raise ExprError(e.col, "strings can only be compared with == or != to a string")
            return BOOL
        if lk == rk == BOOL and e.op in ("==", "!="):  # flag == True, per call
            return BOOL
        for side, k in ((e.lhs, lk), (e.rhs, rk)):
            if k in (MASK, BOOL):
                raise ExprError(side.col, f"'{e.op}' compares numbers, not conditions; combine conditions with "
                                          "'and', 'or' and 'not'")
        _need_numeric(e.lhs, lk, f"'{e.op}'")
        _need_numeric(e.rhs, rk, f"'{e.op}'")
        return MASK if ELEM in (lk, rk) else BOOL
    if isinstance(e, BoolOp):
        # Per-element conditions (masks) combine like numpy's logical_and / logical_or: both sides
        # are evaluated. Uniform ones short-circuit, which checks rely on.
        kinds = [typecheck(v, scope, memo) for v in e.values]
        for v, k in zip(e.values, kinds):
            if k not in (BOOL, MASK):
                raise ExprError(v.col, f"'{e.op}' needs a condition on each side (a comparison such as x > 0), not {_described(k)}")
        return MASK if MASK in kinds else BOOL
    if isinstance(e, In):
        k = typecheck(e.operand, scope, memo)
        if k not in (STR, INT, NUM):
            raise ExprError(e.col, "'in' tests an attribute against a list of literals")
        for o in e.options:
            if not isinstance(o, (Num, Str)):
                raise ExprError(o.col, "the list after 'in' must hold literals")
            if (k == STR) != isinstance(o, Str):
                raise ExprError(o.col, "the list after 'in' must hold values of the attribute's type")
        return BOOL
    if isinstance(e, IsNone):
        scope.kind_of(e.operand)
        if e.operand.id not in scope.optional:
            raise ExprError(e.operand.col, f"'{e.operand.id}' is never None: only optional attributes (float? eps=None) and "
                                           f"tensors (Tensor? bias=None) are")
        return BOOL
    if isinstance(e, Index):
        size = scope.lists.get(e.obj.id)
        if size is None:
            scope.kind_of(e.obj)  # unknown name
            raise ExprError(e.obj.col, f"'{e.obj.id}' is not a list attribute; only sized lists (float[2] betas) can be indexed")
        if e.index >= size:
            raise ExprError(e.col, f"index {e.index} is out of range: '{e.obj.id}' has {size} element(s), {e.obj.id}[0] to {e.obj.id}[{size - 1}]")
        return scope.names[e.obj.id]
    if isinstance(e, Method):
        if e.method not in METHODS and e.method in FUNCTIONS:
            if scope.names.get(e.obj.id) == TENSOR:
                raise ExprError(e.col, f"tensor methods other than {', '.join(METHODS)} are not available; write "
                                       f"{e.method}({', '.join([e.obj.id, *(unparse(a) for a in e.args)])})")
            if e.obj.id not in scope.names:
                raise ExprError(e.col, f"call {e.method}(...) without '{e.obj.id}.': the expression language has its own functions")
        if e.method not in METHODS:
            raise ExprError(e.col, f"unknown tensor method '{e.method}'; allowed: {', '.join(METHODS)}{did_you_mean(e.method, tuple(METHODS))}")
        if scope.elementwise:
            raise ExprError(e.col, f"tensor methods are not available in a {scope.what}")
        if scope.kind_of(e.obj) != TENSOR:
            raise ExprError(e.obj.col, f"'{e.obj.id}' is not a tensor")
        if len(e.args) != METHODS[e.method]:
            raise ExprError(e.col, f"{e.method}() takes {METHODS[e.method]} argument(s), got {len(e.args)}")
        for a in e.args:
            if typecheck(a, scope, memo) != INT:
                raise ExprError(a.col, f"the argument of {e.method}() must be an integer")
        return INT
    if isinstance(e, Call):
        fn = FUNCTIONS.get(e.fn)
        if fn is None:
            hint = _FUNCTION_HINTS.get(e.fn) or did_you_mean(e.fn, tuple(FUNCTIONS))
            raise ExprError(e.col, f"unknown function '{e.fn}'; allowed: {', '.join(sorted(FUNCTIONS))}{hint}")
        if len(e.args) != fn.arity:
            raise ExprError(e.col, f"{e.fn}() takes {fn.arity} argument(s), got {len(e.args)}")
        kinds = [typecheck(a, scope, memo) for a in e.args]
        if e.fn == "isfinite":
            _need_numeric(e.args[0], kinds[0], "isfinite()")
            return MASK if kinds[0] == ELEM else BOOL
        if e.fn == "where":
            if kinds[0] not in (MASK, BOOL):
                raise ExprError(e.args[0].col, "the first argument of where() must be a condition, e.g. x > 0")
            for a, k in zip(e.args[1:], kinds[1:]):
                _need_numeric(a, k, "where()")
            if kinds[0] == BOOL and ELEM not in kinds[1:]:
                return NUM
            return ELEM
        for a, k in zip(e.args, kinds):
            _need_numeric(a, k, f"{e.fn}()")
        return ELEM if ELEM in kinds else NUM
    raise ExprError(getattr(e, "col", 0), f"unsupported expression {e!r}")


# Names and functions from Python, math and torch that the language spells differently.
_CONSTANT_HINTS = {
    "pi": "write the number, 3.141592653589793",
    "e": "write the number, 2.718281828459045, or exp(x) for e ** x",
    "inf": "the language has no infinity; isfinite(x) tests for one",
    "nan": "the language has no NaN; x != x tests for one",
}
_FUNCTION_HINTS = {
    "max": "; did you mean 'maximum'?",
    "min": "; did you mean 'minimum'?",
    "relu": "; relu(x) is maximum(x, 0)",
    "arcsin": "; did you mean 'asin'?",
    "arccos": "; did you mean 'acos'?",
    "arctan": "; did you mean 'atan'?",
    "arctan2": "; did you mean 'atan2'?",
    "sgn": "; did you mean 'sign'?",
    "rint": "; round(x) rounds halves to even, as rint",
    "mod": "; remainder(a, b) has the sign of b (Python's %), fmod(a, b) the sign of a",
    "reciprocal": "; write 1 / x",
    "square": "; write x * x (or x ** 2)",
}


def _need_numeric(e: Expr, kind: str, what: str) -> None:
    if kind not in NUMERIC:
        raise ExprError(e.col, f"{what} needs a number here, not {_described(kind)}")


_DESCRIPTIONS = {ELEM: "a tensor element", MASK: "a per-element condition", NUM: "a number", INT: "an integer",
                 BOOL: "a condition", STR: "a string", TENSOR: "a tensor"}


def _described(kind: str) -> str:
    return _DESCRIPTIONS.get(kind, f"a {kind}")


def check_optional_guards(e: Expr, scope: Scope) -> None:
    """Raises at the first read of an optional attribute's (or tensor's) value that a `where` or a condition
    does not guard with `is not None` (`where(eps is None, x, x + eps)`, `eps is None or eps > 0`).
    Printers read None as 0, so a guarded read computes a value nobody uses."""
    if scope.optional:
        _guarded(e, scope.optional, frozenset())


def _guarded(e: Expr, optional: frozenset[str], present: frozenset[str]) -> None:
    if isinstance(e, Name):
        if e.id in optional and e.id not in present:
            raise ExprError(e.col, f"'{e.id}' may be None here; read it where it is known not to be, e.g. "
                                   f"where({e.id} is None, ..., <uses of {e.id}>) or {e.id} is None or <condition on {e.id}>")
        return
    if isinstance(e, IsNone):
        return
    if isinstance(e, Call) and e.fn == "where":
        c, a, b = e.args
        _guarded(c, optional, present)
        _guarded(a, optional, present | _known(c, True))
        _guarded(b, optional, present | _known(c, False))
        return
    if isinstance(e, BoolOp):
        known = present
        for v in e.values:  # each operand may rely on the ones before it (checks short-circuit)
            _guarded(v, optional, known)
            known = known | _known(v, e.op == "and")
        return
    for child in _CHILDREN[type(e)](e):
        _guarded(child, optional, present)


def _known(c: Expr, holds: bool) -> frozenset[str]:
    """Optional attributes known not to be None where condition ``c`` holds (or fails)."""
    if isinstance(c, IsNone):
        return frozenset() if holds else frozenset({c.operand.id})
    if isinstance(c, Unary) and c.op == "not":
        return _known(c.operand, not holds)
    if isinstance(c, BoolOp) and (c.op == "and") == holds:  # all of `a and b` hold; all of `a or b` fail
        return frozenset().union(*(_known(v, holds) for v in c.values))
    return frozenset()


def is_expr(value: object) -> bool:
    return type(value) in _CHILDREN


def walk(e: Expr) -> list[Expr]:
    """Every node of ``e``, parents before children, left to right."""
    out: list[Expr] = []
    _preorder(e, out)
    return out


def _preorder(e: Expr, out: list[Expr]) -> None:
    out.append(e)
    for child in _CHILDREN[type(e)](e):
        _preorder(child, out)


# A node's children, by the node's class: walks run over every expression many times per op.
_CHILDREN = {
    Num: lambda e: (),
    Str: lambda e: (),
    Name: lambda e: (),
    Unary: lambda e: (e.operand,),
    Binary: lambda e: (e.lhs, e.rhs),
    Compare: lambda e: (e.lhs, e.rhs),
    BoolOp: lambda e: e.values,
    In: lambda e: (e.operand, *e.options),
    IsNone: lambda e: (e.operand,),
    Index: lambda e: (e.obj,),
    Call: lambda e: e.args,
    Method: lambda e: (e.obj, *e.args),
}


def children(e: Expr) -> tuple[Expr, ...]:
    return tuple(_CHILDREN[type(e)](e))


_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _CHILDREN}


def _rebuilt(e: Expr, fn, **changes) -> Expr:
    """``e`` with ``fn`` applied to each child (and ``changes`` to its other fields); ``e`` itself
    when nothing changes (a leaf; a subtree without what ``fn`` replaces), which spares the
    parser's let-inlining most of its copies."""
    values = {}
    same = not changes
    for name in _FIELDS[type(e)]:
        if name in changes:
            continue
        v = getattr(e, name)
        if type(v) is tuple:
            new = tuple(fn(x) for x in v)
            same = same and all(a is b for a, b in zip(new, v))
            v = new
        elif is_expr(v):
            new = fn(v)
            same = same and new is v
            v = new
        values[name] = v
    return e if same else type(e)(**values, **changes)


def replaced(e: Expr, values: dict[Expr, Expr]) -> Expr:
    """``e`` with every sub-expression equal to a key of ``values`` (columns aside) replaced by its value."""
    if e in values:
        return values[e]
    return _rebuilt(e, lambda c: replaced(c, values))


def reads_tensors(e: Expr, scope: Scope, memo: dict[int, bool]) -> bool:
    """Whether ``e`` reads a tensor's elements (else it is uniform: one value per call).
    Printers ask this of every sub-expression; a shared ``memo`` keeps that linear."""
    found = memo.get(id(e))
    if found is None:
        if type(e) is Name:
            found = scope.names.get(e.id) == TENSOR
        elif type(e) is IsNone:  # `bias is None` for a Tensor? input: one answer per call
            found = False
        else:
            found = any(reads_tensors(child, scope, memo) for child in _CHILDREN[type(e)](e))
        memo[id(e)] = found
    return found


def rename(e: Expr, names: dict[str, str]) -> Expr:
    """``e`` with the given names replaced by others, nothing else changed."""
    if type(e) is Name:
        return Name(names[e.id], e.col) if e.id in names else e
    return _rebuilt(e, lambda c: rename(c, names))


def inline(e: Expr, values: dict[str, Expr], used: set[str]) -> Expr:
    """``e`` with each name in ``values`` (a spec's `let:` names) replaced by its expression,
    whose nodes take the use's column, so that an error inside it points at the name that
    brought it in. Adds the names replaced to ``used``."""
    if not values:
        return e
    if type(e) is Name:
        if e.id not in values:
            return e
        used.add(e.id)
        return _moved(values[e.id], e.col)
    held = e.operand if type(e) is IsNone else e.obj if type(e) in (Index, Method) else None
    if held is not None and held.id in values:
        raise ExprError(held.col, _LET_MISUSE[type(e)].format(name=held.id))
    return _rebuilt(e, lambda c: inline(c, values, used))


_LET_MISUSE = {
    IsNone: "'{name}' is a let, a value that is never None; test the optional argument it reads (bias is None)",
    Index: "'{name}' is a let, a single value; index a sized list attribute (betas[0])",
    Method: "'{name}' is a let, a per-element value; size(), dim() and numel() read a tensor input",
}


def _moved(e: Expr, col: int) -> Expr:
    return _rebuilt(e, lambda c: _moved(c, col), col=col)


def softplus_argument(e: Expr) -> Expr | None:
    """``v`` when ``e`` is ``log1p(exp(v))``, log(1 + exp(v)), which the printers and the
    derivative treat as one function (its literal form overflows for large v)."""
    if isinstance(e, Call) and e.fn == "log1p" and isinstance(e.args[0], Call) and e.args[0].fn == "exp":
        return e.args[0].args[0]
    return None


def names_in(e: Expr) -> set[str]:
    return {n.id for n in walk(e) if isinstance(n, Name) and n.id not in ("True", "False")}


_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "neg": 7, "**": 8}


def unparse(e: Expr) -> str:
    """Canonical text of an expression; ``parse_expr(unparse(e)) == e``."""
    return _unparse(e, 0)


def _unparse(e: Expr, parent: int) -> str:
    if isinstance(e, Num):
        s = repr(e.value)
        return f"({s})" if e.value < 0 and parent > 0 else s
    if isinstance(e, Str):
        return repr(e.value)
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Unary) and e.op == "not" and isinstance(e.operand, IsNone):
        p = _PREC["cmp"]
        s = f"{e.operand.operand.id} is not None"
    elif isinstance(e, Unary):
        p = _PREC["neg" if e.op == "-" else "not"]
        s = ("-" if e.op == "-" else "not ") + _unparse(e.operand, p)
    elif isinstance(e, Binary):
        p = _PREC[e.op]
        if e.op == "**":
            s = f"{_unparse(e.lhs, p + 1)} ** {_unparse(e.rhs, p)}"
        else:
            s = f"{_unparse(e.lhs, p)} {e.op} {_unparse(e.rhs, p + 1)}"
    elif isinstance(e, Compare):
        p = _PREC["cmp"]
        s = f"{_unparse(e.lhs, p + 1)} {e.op} {_unparse(e.rhs, p + 1)}"
    elif isinstance(e, BoolOp):
        p = _PREC[e.op]
        s = f" {e.op} ".join(_unparse(v, p + 1) for v in e.values)
    elif isinstance(e, In):
        p = _PREC["cmp"]
        s = f"{_unparse(e.operand, p + 1)} in [{', '.join(_unparse(o, 0) for o in e.options)}]"
    elif isinstance(e, IsNone):
        p = _PREC["cmp"]
        s = f"{e.operand.id} is None"
    elif isinstance(e, Index):
        return f"{e.obj.id}[{e.index}]"
    elif isinstance(e, Call):
        return f"{e.fn}({', '.join(_unparse(a, 0) for a in e.args)})"
    elif isinstance(e, Method):
        return f"{e.obj.id}.{e.method}({', '.join(_unparse(a, 0) for a in e.args)})"
    else:  # pragma: no cover
        raise TypeError(e)
    return f"({s})" if p < parent or (p == parent and p in (_PREC["cmp"],)) else s
