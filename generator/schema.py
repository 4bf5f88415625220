"""PyTorch function-schema syntax, the language of ``native_functions.yaml`` and ``m.def``.

    weighted_sum(Tensor a, Tensor b, *, float weight=1.0) -> Tensor

``FunctionSchema.parse(text)`` and ``str(schema)`` round-trip. Errors carry the column
inside the signature text so the model can point at the exact character.
"""

from __future__ import annotations

import keyword
import math
import re
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Union

BASE_TYPES = ("Tensor", "int", "float", "bool", "str", "Scalar", "SymInt")
ATTRIBUTE_BASES = ("int", "float", "bool", "str", "Scalar", "SymInt")
LIST_ELEMENT_BASES = ("Tensor", "int", "float", "bool", "SymInt")

# Reserved in C++ and in the generated code's own scope; Python keywords are added below.
CPP_RESERVED = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t
    class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
    decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
    goto if inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private
    protected public register reinterpret_cast requires return short signed sizeof static static_assert
    static_cast struct switch template this thread_local throw true try typedef typeid typename union
    unsigned using virtual void volatile wchar_t while xor xor_eq
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t ptrdiff_t intptr_t uintptr_t
    at c10 std torch opgen result grad scalar_t opmath_t""".split()
)
IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


def reserved_reason(name: str) -> str | None:
    """Why ``name`` can't be an op or argument name, or None if it can."""
    if not IDENTIFIER.match(name):
        return "names must start with a letter and contain only letters, digits and '_'"
    if name.startswith("_") or "__" in name:
        return "names must not start with '_' or contain '__'"
    if keyword.iskeyword(name) or keyword.issoftkeyword(name) or name in ("None", "True", "False"):
        return f"'{name}' is a Python keyword"
    if name in CPP_RESERVED:
        return f"'{name}' is reserved in the generated C++"
    return None


# Names the generated Python package defines beside its ops (generated/python/<ns>/): an op of
# one of these names would shadow it, or be shadowed.
PYTHON_PACKAGE_NAMES = ("load_library", "ops", "return_types", "Tensor", "Optional", "Sequence", "Union", "NamedTuple")


def op_name_reserved_reason(name: str) -> str | None:
    """Why ``name`` can't be an op name, or None if it can: an argument's rules, and the package's own names."""
    if name in PYTHON_PACKAGE_NAMES:
        return f"'{name}' is a name the generated Python package defines (it has {', '.join(PYTHON_PACKAGE_NAMES)})"
    return reserved_reason(name)


class SchemaError(Exception):
    def __init__(self, col: int, message: str) -> None:
        super().__init__(message)
        self.col = col  # 0-based offset into the signature text
        self.message = message


@dataclass(frozen=True)
class Type:
    base: str
    is_list: bool = False
    list_size: int | None = None
    optional: bool = False
    alias: str | None = None  # e.g. "a!" from Tensor(a!)

    def __str__(self) -> str:
        s = self.base
        if self.alias:
            s += f"({self.alias})"
        if self.is_list:
            s += f"[{self.list_size if self.list_size is not None else ''}]"
        if self.optional:
            s += "?"
        return s

    @property
    def is_tensor(self) -> bool:
        return self.base == "Tensor" and not self.is_list

    @property
    def is_tensor_like(self) -> bool:
        return self.base == "Tensor"


Default = Union[int, float, bool, str, None, tuple]


@dataclass(frozen=True)
class Argument:
    name: str
    type: Type
    default: Default = None
    has_default: bool = False
    kwarg_only: bool = False
    col: int = 0  # where the argument starts in the signature; not part of equality

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Argument):
            return NotImplemented
        return (self.name, self.type, self.default, self.has_default, self.kwarg_only) == (
            other.name, other.type, other.default, other.has_default, other.kwarg_only)

    def __hash__(self) -> int:
        return hash((self.name, self.type, self.default, self.has_default, self.kwarg_only))

    def __str__(self) -> str:
        s = f"{self.type} {self.name}"
        if self.has_default:
            s += "=" + format_default(self.default)
        return s

    @property
    def is_tensor(self) -> bool:
        return self.type.base == "Tensor"


@dataclass(frozen=True)
class Return:
    type: Type
    name: str | None = None

    def __str__(self) -> str:
        return f"{self.type} {self.name}" if self.name else str(self.type)


@dataclass(frozen=True)
class FunctionSchema:
    name: str
    arguments: tuple[Argument, ...]
    returns: tuple[Return, ...]

    # Derived values are cached on the (immutable) schema: emitters read them many times per op.
    @cached_property
    def tensor_inputs(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.is_tensor)

    @cached_property
    def attributes(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if not a.is_tensor)

    def argument(self, name: str) -> Argument | None:
        return next((a for a in self.arguments if a.name == name), None)

    def __str__(self) -> str:
        return self.text

    @cached_property
    def text(self) -> str:
        parts: list[str] = []
        star = False
        for a in self.arguments:
            if a.kwarg_only and not star:
                parts.append("*")
                star = True
            parts.append(str(a))
        if len(self.returns) == 1 and not self.returns[0].name:
            rets = str(self.returns[0])
        else:
            rets = "(" + ", ".join(str(r) for r in self.returns) + ")"
        return f"{self.name}({', '.join(parts)}) -> {rets}"

    @staticmethod
    def parse(text: str) -> "FunctionSchema":
        return _Parser(text).schema()


def format_default(value: Default) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        r = repr(value)
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    if isinstance(value, str):
        return "'" + value + "'"
    if isinstance(value, tuple):
        return "[" + ", ".join(format_default(v) for v in value) + "]"
    return str(value)


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<arrow>->)
    | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|-?inf)
    | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
    | (?P<string>'[^'\\\n]*'|"[^"\\\n]*")
    | (?P<punct>[()\[\],*=?!])
    )""",
    re.VERBOSE,
)
_STRING_DEFAULT = re.compile(r"[A-Za-z0-9_ .\-]*\Z")


def _int64(text: str, col: int, base: str) -> int:
    """An integer default, which PyTorch reads with std::stoll."""
    value = int(text)
    if not -(2**63) <= value < 2**63:
        article = "an" if base == "int" else "a"
        raise SchemaError(col, f"{article} {base} default must fit in int64, found {text!r} (PyTorch reads defaults "
                               "with std::stoll, and a library with one it can't read aborts when it loads)")
    return value


def _is_normal_double(value: float, text: str) -> bool:
    """Whether std::stod reads ``text`` (the literal of ``value``) without a range error."""
    if value == 0.0:
        return not re.search(r"[1-9]", re.split(r"[eE]", text)[0])  # 0e5, not 1e-400
    return math.isfinite(value) and abs(value) >= sys.float_info.min


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        pos, end = 0, len(text.rstrip())
        while pos < end:
            m = _TOKEN.match(text, pos)
            if not m:
                col = pos + (len(text[pos:]) - len(text[pos:].lstrip()))
                raise SchemaError(col, f"unexpected character {text[col]!r} in signature")
            kind = m.lastgroup
            assert kind is not None
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.tokens.append(("end", "", len(text)))
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i]

    def take(self) -> tuple[str, str, int]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, value: str, what: str | None = None) -> int:
        kind, text, col = self.take()
        if text != value or kind == "string":
            found = "the end of the signature" if kind == "end" else repr(text)
            raise SchemaError(col, f"expected {what or repr(value)}, found {found}")
        return col

    def name(self, what: str) -> tuple[str, int]:
        kind, text, col = self.take()
        if kind != "name":
            found = "the end of the signature" if kind == "end" else repr(text)
            raise SchemaError(col, f"expected {what}, found {found}")
        return text, col

    def schema(self) -> FunctionSchema:
        name, col = self.name("the op name")
        if "." in name:
            raise SchemaError(col, "overload names ('op.overload') are not supported; use a distinct op name")
        self.expect("(")
        args: list[Argument] = []
        kwarg_only = False
        if self.peek()[1] != ")":
            while True:
                kind, text, c = self.peek()
                if text == "*" and kind == "punct":
                    if kwarg_only:
                        raise SchemaError(c, "'*' may appear only once")
                    self.take()
                    kwarg_only = True
                else:
                    args.append(self.argument(kwarg_only))
                if self.peek()[1] == ",":
                    self.take()
                    continue
                break
        self.expect(")", "',' or ')'")
        if self.tokens[self.i - 2][1] == "*":
            raise SchemaError(self.tokens[self.i - 2][2], "'*' must be followed by keyword-only arguments")
        self.expect("->", "'->' and the return type")
        returns = self.returns()
        kind, text, c = self.take()
        if kind != "end":
            raise SchemaError(c, f"unexpected {text!r} after the return type")
        seen: dict[str, Argument] = {}
        defaulted = False
        for a in args:
            if a.name in seen:
                raise SchemaError(a.col, f"duplicate argument name '{a.name}'")
            seen[a.name] = a
            if a.has_default:
                defaulted = True
            elif defaulted and not a.kwarg_only:
                raise SchemaError(a.col, f"positional argument '{a.name}' without a default follows one with a default")
        return FunctionSchema(name, tuple(args), tuple(returns))

    def type(self) -> Type:
        base, col = self.name("a type (Tensor, int, float, bool, str, Scalar, int[], float[], ...)")
        if base not in BASE_TYPES:
            from .errors import did_you_mean

            raise SchemaError(col, f"unknown type '{base}'; types are {', '.join(BASE_TYPES)}" + did_you_mean(base, BASE_TYPES))
        alias = None
        if self.peek()[1] == "(" and base == "Tensor":
            self.take()
            alias, _ = self.name("an alias annotation such as 'a' or 'a!'")
            if self.peek()[1] == "!":
                self.take()
                alias += "!"
            self.expect(")")
        is_list, size = False, None
        if self.peek()[1] == "[":
            self.take()
            is_list = True
            kind, text, c = self.peek()
            if kind == "number":
                self.take()
                if not text.isdigit():
                    raise SchemaError(c, "a list size must be a positive integer")
                size = int(text)
            self.expect("]")
            if base not in LIST_ELEMENT_BASES:
                raise SchemaError(col, f"'{base}[]' is not a supported list type; lists hold {', '.join(LIST_ELEMENT_BASES)}")
        optional = False
        if self.peek()[1] == "?":
            self.take()
            optional = True
        if base == "bool" and is_list and (size is None or optional):
            # the dispatcher hands C++ kernels a bool list only as std::array<bool, N>
            raise SchemaError(col, "a bool list needs a fixed size and can't be optional, as ATen's 'bool[3] output_mask'; "
                                   "or take an 'int[]' of 0s and 1s")
        return Type(base, is_list, size, optional, alias)

    def argument(self, kwarg_only: bool) -> Argument:
        start = self.peek()[2]
        t = self.type()
        name, col = self.name("an argument name")
        reason = reserved_reason(name)
        if reason:
            raise SchemaError(col, f"invalid argument name '{name}': {reason}")
        if self.peek()[1] == "=":
            self.take()
            value = self.default(t)
            return Argument(name, t, value, True, kwarg_only, start)
        return Argument(name, t, None, False, kwarg_only, start)

    def default(self, t: Type) -> Default:
        kind, text, col = self.peek()
        if t.is_list and text == "[":
            self.take()
            items: list[Default] = []
            while self.peek()[1] != "]":
                items.append(self.scalar_default(Type(t.base)))
                if self.peek()[1] == ",":
                    self.take()
                elif self.peek()[1] != "]":
                    self.expect("]", "',' or ']'")
            self.take()
            if t.list_size is not None and len(items) not in (1, t.list_size):
                raise SchemaError(col, f"default has {len(items)} items but the type is {t}")
            return tuple(items)
        if t.is_list and kind == "number" and t.list_size is not None:
            return self.scalar_default(Type(t.base))
        return self.scalar_default(t)

    def scalar_default(self, t: Type) -> Default:
        kind, text, col = self.take()
        if text == "None" and kind == "name":
            if not t.optional:
                raise SchemaError(col, f"default None needs an optional type ('{t}?')")
            return None
        base = t.base
        if t.is_list or base == "Tensor":
            raise SchemaError(col, f"'{t}' arguments can only default to None")
        if base == "bool":
            if text not in ("True", "False"):
                raise SchemaError(col, f"a bool default must be True or False, found {text!r}")
            return text == "True"
        if base in ("int", "SymInt"):
            if kind != "number" or not re.fullmatch(r"-?\d+", text):
                raise SchemaError(col, f"an int default must be an integer, found {text!r}")
            return _int64(text, col, base)
        if base == "float" or base == "Scalar":
            if kind != "number":
                raise SchemaError(col, f"a {base} default must be a number, found {text!r}")
            if base == "Scalar" and re.fullmatch(r"-?\d+", text):
                return _int64(text, col, base)
            value = float(text)
            if not _is_normal_double(value, text):
                raise SchemaError(col, f"a {base} default must be 0 or a normal double, found {text!r} (PyTorch reads "
                                       "defaults with std::stod, and a library with one it can't read aborts when it "
                                       "loads); for no bound use a large number such as 1e30")
            return value
        if base == "str":
            if kind != "string":
                raise SchemaError(col, f"a str default must be quoted, found {text!r}")
            value = text[1:-1]
            if not _STRING_DEFAULT.match(value):
                raise SchemaError(col, "a str default may contain only letters, digits, spaces and '_.-'")
            return value
        raise SchemaError(col, f"unsupported default for '{t}'")

    def returns(self) -> list[Return]:
        if self.peek()[1] == "(":
            self.take()
            rets: list[Return] = []
            if self.peek()[1] == ")":
                raise SchemaError(self.peek()[2], "an op must return at least one tensor")
            while True:
                rets.append(self.one_return())
                if self.peek()[1] == ",":
                    self.take()
                    continue
                break
            self.expect(")", "',' or ')'")
            return rets
        return [self.one_return()]

    def one_return(self) -> Return:
        col = self.peek()[2]
        t = self.type()
        if t.base != "Tensor" or t.is_list or t.optional:
            raise SchemaError(col, f"ops return tensors; '{t}' is not supported as a return type")
        name = None
        if self.peek()[0] == "name":
            name, ncol = self.name("a return name")
            reason = reserved_reason(name)
            if reason:
                raise SchemaError(ncol, f"invalid return name '{name}': {reason}")
        return Return(t, name)
