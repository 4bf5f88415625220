"""Whole-tensor gradient formulas of ops with hand-written kernels, in the spirit of
``derivatives.yaml``: Python syntax over the op's tensors, attributes, ``grad`` and ``result``,
with arithmetic and a whitelist of tensor methods, printed as differentiable ATen C++.

    x: grad.mm(w)
    w: grad.t().mm(x)
    bias: grad.sum(0)

Parsed into frozen dataclasses and checked (names, methods, arity, argument kinds) when the spec
is loaded, so an error points at the column; nothing of the spec text reaches C++ unparsed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Union

from .errors import did_you_mean

# method -> (C++ template over {self} and {0}, {1}..., argument kinds); kinds: T tensor, I int,
# D dims (an int or a list of ints), B bool, N number.
METHODS: dict[str, tuple[str, tuple[str, ...], int]] = {
    # name: (C++ format, argument kinds, number of required arguments)
    "mm": ("{self}.mm({0})", ("T",), 1),
    "matmul": ("{self}.matmul({0})", ("T",), 1),
    "t": ("{self}.t()", (), 0),
    "transpose": ("{self}.transpose({0}, {1})", ("I", "I"), 2),
    "sum": ("{self}.sum({0}, {1})", ("D", "B"), 0),
    "mean": ("{self}.mean({0}, {1})", ("D", "B"), 0),
    "unsqueeze": ("{self}.unsqueeze({0})", ("I",), 1),
    "squeeze": ("{self}.squeeze({0})", ("I",), 1),
    "expand_as": ("{self}.expand_as({0})", ("T",), 1),
    "pow": ("{self}.pow({0})", ("N",), 1),
    "sqrt": ("{self}.sqrt()", (), 0),
    "rsqrt": ("{self}.rsqrt()", (), 0),
    "exp": ("{self}.exp()", (), 0),
    "log": ("{self}.log()", (), 0),
    "abs": ("{self}.abs()", (), 0),
    "sigmoid": ("{self}.sigmoid()", (), 0),
    "tanh": ("{self}.tanh()", (), 0),
    "neg": ("{self}.neg()", (), 0),
    "sign": ("{self}.sign()", (), 0),
    "sin": ("{self}.sin()", (), 0),
    "cos": ("{self}.cos()", (), 0),
    "clamp_min": ("{self}.clamp_min({0})", ("N",), 1),
    "cumsum": ("{self}.cumsum({0})", ("I",), 1),
    "flip": ("{self}.flip({0})", ("D",), 1),
    "permute": ("{self}.permute({0})", ("D",), 1),
    "narrow": ("{self}.narrow({0}, {1}, {2})", ("I", "I", "I"), 3),
    "reshape_as": ("{self}.reshape_as({0})", ("T",), 1),
    "contiguous": ("{self}.contiguous()", (), 0),
    "bmm": ("{self}.bmm({0})", ("T",), 1),
    "outer": ("{self}.outer({0})", ("T",), 1),
    "size": ("c10::Scalar({self}.sym_size({0}))", ("I",), 1),  # a number, symbolic under torch.compile
}
NUMBER_METHODS = ("size",)
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}


class FormulaError(Exception):
    def __init__(self, col: int, message: str) -> None:
        super().__init__(message)
        self.col = col
        self.message = message


@dataclass(frozen=True)
class TName:
    id: str
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TNum:
    value: Union[int, float, bool]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TList:
    values: tuple[int, ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TBinary:
    op: str
    lhs: "TExpr"
    rhs: "TExpr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TNeg:
    operand: "TExpr"
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TMethod:
    obj: "TExpr"
    method: str
    args: tuple["TExpr", ...]
    col: int = field(default=0, compare=False)


@dataclass(frozen=True)
class TIndex:
    """`w[0]`: one element of a sized list attribute, a number (``kind``: number or int)."""
    name: str
    index: int
    kind: str
    col: int = field(default=0, compare=False)


TExpr = Union[TName, TNum, TList, TBinary, TNeg, TMethod, TIndex]

TENSOR, NUMBER, INT, BOOL, LIST = "tensor", "number", "int", "bool", "list"


@dataclass(frozen=True)
class Formula:
    text: str  # canonical text (round-trips through parse)
    expr: TExpr

    def names(self) -> set[str]:
        """The tensors and attributes the formula reads (a list attribute when it reads an element)."""
        return {e.id for e in _nodes(self.expr) if isinstance(e, TName)} | self.indexed()

    def indexed(self) -> set[str]:
        """The list attributes the formula reads elements of."""
        return {e.name for e in _nodes(self.expr) if isinstance(e, TIndex)}


def _nodes(e: TExpr) -> list[TExpr]:
    out, stack = [], [e]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, TBinary):
            stack += [node.lhs, node.rhs]
        elif isinstance(node, TNeg):
            stack.append(node.operand)
        elif isinstance(node, TMethod):
            stack += [node.obj, *node.args]
    return out


def parse_formula(text: str, names: dict[str, str], lists: dict[str, tuple[str, int]] | None = None) -> Formula:
    """Parses and checks ``text``; ``names`` maps each usable name to its kind (tensor, number, int,
    bool), ``lists`` each sized list attribute to its elements' kind and its size."""
    stripped = text.strip()
    lead = len(text) - len(text.lstrip())
    try:
        tree = ast.parse(stripped, mode="eval")
    except SyntaxError as e:
        raise FormulaError((e.offset or 1) - 1 + lead, f"invalid formula syntax: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise FormulaError(0, "formula is too deeply nested") from None
    expr = _Converter(lead, names, lists or {}).convert(tree.body, 0)
    if kind_of(expr, names) != TENSOR:
        raise FormulaError(lead, "a gradient formula computes a tensor, e.g. grad.mm(w)")
    return Formula(unparse(expr), expr)


class _Converter:
    def __init__(self, lead: int, names: dict[str, str], lists: dict[str, tuple[str, int]]) -> None:
        self.lead = lead
        self.names = names
        self.lists = lists

    def convert(self, node: ast.AST, depth: int) -> TExpr:
        col = getattr(node, "col_offset", 0) + self.lead
        if depth > 48:
            raise FormulaError(col, "formula is too deeply nested")
        sub = lambda n: self.convert(n, depth + 1)  # noqa: E731
        if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float)):
            return TNum(node.value, col)
        if isinstance(node, ast.Subscript):
            return self.index(node, col)
        if isinstance(node, ast.Name):
            if node.id in self.lists:
                raise FormulaError(col, f"'{node.id}' is a list ({self.lists[node.id][1]} elements); read one element, e.g. {node.id}[0]")
            if node.id not in self.names:
                known = sorted(self.names)
                raise FormulaError(col, f"unknown name '{node.id}' in gradient formula; known names: {', '.join(known)}{did_you_mean(node.id, known)}")
            return TName(node.id, col)
        if isinstance(node, (ast.List, ast.Tuple)):
            values = []
            for elt in node.elts:
                v = sub(elt)
                if not isinstance(v, TNum) or isinstance(v.value, bool) or not isinstance(v.value, int):
                    raise FormulaError(getattr(elt, "col_offset", 0) + self.lead, "a list in a formula holds integer literals (dims), e.g. [0, -1]")
                values.append(int(v.value))
            return TList(tuple(values), col)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = sub(node.operand)
            if isinstance(operand, TNum) and not isinstance(operand.value, bool):
                return TNum(-operand.value, col)
            return TNeg(operand, col)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return TBinary(_OPS[type(node.op)], sub(node.left), sub(node.right), col)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.keywords:
                raise FormulaError(col, "keyword arguments are not supported in formulas; pass them by position, e.g. x.sum([0], True)")
            method = node.func.attr
            if method not in METHODS:
                raise FormulaError(col, f"unknown tensor method '{method}'; allowed: {', '.join(sorted(METHODS))}{did_you_mean(method, tuple(METHODS))}")
            return TMethod(sub(node.func.value), method, tuple(sub(a) for a in node.args), col)
        if isinstance(node, ast.Call):
            raise FormulaError(col, "call tensor methods, e.g. x.sqrt() or grad.mm(w)")
        raise FormulaError(col, f"unsupported syntax in a formula ({type(node).__name__}); use + - * / **, numbers, names and tensor methods")

    def index(self, node: ast.Subscript, col: int) -> TIndex:
        i = node.slice
        if not (isinstance(node.value, ast.Name) and node.value.id in self.lists):
            raise FormulaError(col, "only a sized list attribute can be indexed, e.g. w[0] for float[2] w")
        name = node.value.id
        kind, size = self.lists[name]
        if not (isinstance(i, ast.Constant) and type(i.value) is int):
            raise FormulaError(getattr(i, "col_offset", 0) + self.lead, f"an index must be a literal integer from 0 to {size - 1}, e.g. {name}[0]")
        if not 0 <= i.value < size:
            raise FormulaError(col, f"index {i.value} is out of range: '{name}' has {size} element(s), {name}[0] to {name}[{size - 1}]")
        return TIndex(name, i.value, kind, col)


def kind_of(e: TExpr, names: dict[str, str]) -> str:
    if isinstance(e, TNum):
        return BOOL if isinstance(e.value, bool) else (INT if isinstance(e.value, int) else NUMBER)
    if isinstance(e, TName):
        return names[e.id]
    if isinstance(e, TIndex):
        return e.kind
    if isinstance(e, TList):
        return LIST
    if isinstance(e, TNeg):
        k = kind_of(e.operand, names)
        if k not in (TENSOR, NUMBER, INT):
            raise FormulaError(e.col, "'-' needs a tensor or a number")
        return k
    if isinstance(e, TBinary):
        kinds = (kind_of(e.lhs, names), kind_of(e.rhs, names))
        for k, side in zip(kinds, (e.lhs, e.rhs)):
            if k not in (TENSOR, NUMBER, INT):
                raise FormulaError(side.col, f"'{e.op}' needs tensors or numbers")
        if e.op == "**" and kinds[1] == TENSOR:
            raise FormulaError(e.rhs.col, "the exponent of '**' must be a number")
        if TENSOR not in kinds:
            raise FormulaError(e.col, "arithmetic on numbers alone belongs in the spec's attributes; combine it with a tensor")
        return TENSOR
    assert isinstance(e, TMethod)
    if kind_of(e.obj, names) != TENSOR:
        raise FormulaError(e.obj.col, f"'{e.method}' is a tensor method; call it on a tensor")
    _, kinds, required = METHODS[e.method]
    if not required <= len(e.args) <= len(kinds):
        n = f"{required}" if required == len(kinds) else f"{required} to {len(kinds)}"
        raise FormulaError(e.col, f"'{e.method}' takes {n} arguments, got {len(e.args)}")
    for a, want in zip(e.args, kinds):
        got = kind_of(a, names)
        ok = {"T": got == TENSOR, "I": got == INT, "D": got in (INT, LIST), "B": got == BOOL, "N": got in (INT, NUMBER)}[want]
        if not ok:
            what = {"T": "a tensor", "I": "an integer", "D": "a dim or a list of dims", "B": "True or False", "N": "a number"}[want]
            raise FormulaError(a.col, f"argument {e.args.index(a) + 1} of '{e.method}' must be {what}")
    return NUMBER if e.method in NUMBER_METHODS else TENSOR


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "**": 4}


def unparse(e: TExpr, parent: int = 0) -> str:
    if isinstance(e, TNum):
        return repr(e.value)
    if isinstance(e, TName):
        return e.id
    if isinstance(e, TIndex):
        return f"{e.name}[{e.index}]"
    if isinstance(e, TList):
        return "[" + ", ".join(str(v) for v in e.values) + "]"
    if isinstance(e, TNeg):
        s = "-" + unparse(e.operand, 3)
        return f"({s})" if parent > 3 else s
    if isinstance(e, TBinary):
        p = _PREC[e.op]
        right = p + (0 if e.op == "**" else 1)
        left = p + (1 if e.op == "**" else 0)
        s = f"{unparse(e.lhs, left)} {e.op} {unparse(e.rhs, right)}"
        return f"({s})" if p < parent else s
    return f"{unparse(e.obj, 5)}.{e.method}({', '.join(unparse(a) for a in e.args)})"


def cpp(e: TExpr, names: dict[str, str], rename: dict[str, str] | None = None) -> str:
    """C++ over at::Tensor (differentiable ATen calls); numbers as double, dims as IntArrayRef.
    ``rename`` gives the C++ spelling of names bound differently (a list's element, an optional's value)."""
    return _cpp(e, names, rename or {})


def _cpp(e: TExpr, names: dict[str, str], rename: dict[str, str]) -> str:
    cpp = lambda x, n: _cpp(x, n, rename)  # noqa: E731
    if isinstance(e, TNum):
        if isinstance(e.value, bool):
            return "true" if e.value else "false"
        return repr(float(e.value)) if not isinstance(e.value, int) else f"int64_t{{{e.value}}}"
    if isinstance(e, TName):
        return rename.get(e.id, e.id)
    if isinstance(e, TIndex):
        return f"{e.name}[{e.index}]"
    if isinstance(e, TList):
        return "at::IntArrayRef{" + ", ".join(f"int64_t{{{v}}}" for v in e.values) + "}"
    if isinstance(e, TNeg):
        return f"(-{cpp(e.operand, names)})"
    if isinstance(e, TBinary):
        lhs, rhs = cpp(e.lhs, names), cpp(e.rhs, names)
        if e.op == "**":
            return f"{lhs}.pow({_number(e.rhs, rhs, names)})"
        return f"({_number(e.lhs, lhs, names)} {e.op} {_number(e.rhs, rhs, names)})"
    fmt, kinds, _ = METHODS[e.method]
    args = []
    for i, want in enumerate(kinds):
        if i < len(e.args):
            a = e.args[i]
            code = cpp(a, names)
            if want == "D" and kind_of(a, names) == INT:
                code = f"at::IntArrayRef{{{code}}}"
            elif want == "N":
                code = _number(a, code, names)
            args.append(code)
        else:  # optional arguments: sum / mean over every dim, without keepdim
            args.append({"D": "at::IntArrayRef{}", "B": "false"}[want])
    if e.method in ("sum", "mean") and not e.args:
        return f"{cpp(e.obj, names)}.{e.method}()"
    return fmt.format(*args, self=cpp(e.obj, names))


def _number(e: TExpr, code: str, names: dict[str, str]) -> str:
    if isinstance(e, TMethod) and e.method in NUMBER_METHODS:
        return code  # already a c10::Scalar
    return f"static_cast<double>({code})" if kind_of(e, names) in (INT, NUMBER) else code
