"""Translation of spec types and values into C++ spellings."""

from __future__ import annotations

import re
import unicodedata

from ..capabilities import CPU_CAPABILITIES
from ..schema import Argument, FunctionSchema, Type

_SCALAR_TYPES = {"int": "int64_t", "SymInt": "c10::SymInt", "float": "double", "bool": "bool", "str": "c10::string_view", "Scalar": "at::Scalar"}
_LIST_TYPES = {"int": "at::IntArrayRef", "SymInt": "c10::SymIntArrayRef", "float": "at::ArrayRef<double>", "Tensor": "at::TensorList"}
# as torchgen spells them: the dispatcher knows `float[]?` only as std::optional<ArrayRef<double>>
_OPTIONAL_LIST_TYPES = {"int": "at::OptionalIntArrayRef", "SymInt": "at::OptionalSymIntArrayRef",
                        "float": "std::optional<at::ArrayRef<double>>"}


def argument_type(t: Type) -> str:
    """The C++ parameter type the dispatcher hands a kernel for schema type ``t``."""
    if t.base == "Tensor" and not t.is_list:
        return "const std::optional<at::Tensor>&" if t.optional else "const at::Tensor&"
    if t.is_list and t.base == "bool":
        return f"std::array<bool, {t.list_size}>"
    if t.is_list:
        inner = _LIST_TYPES[t.base]
        return _OPTIONAL_LIST_TYPES[t.base] if t.optional and t.base != "Tensor" else inner
    inner = _SCALAR_TYPES[t.base]
    if t.base == "Scalar":
        return "const std::optional<at::Scalar>&" if t.optional else "const at::Scalar&"
    return f"std::optional<{inner}>" if t.optional else inner


_MEMBER_TYPES = {"float": "double", "int": "int64_t", "bool": "bool", "str": "std::string", "Scalar": "double", "SymInt": "c10::SymInt"}


def member_type(t: Type) -> str:
    """The type an autograd node keeps an attribute in: owning, since the call's lists and strings
    are views that die with the call (a `Scalar` is kept as the double the formulas compute with,
    a `SymInt` as the int64_t: backward runs on real tensors)."""
    if t.is_list and t.base == "bool":
        return argument_type(t)
    if t == Type("SymInt"):
        return "int64_t"
    inner = f"std::vector<{_MEMBER_TYPES[t.base]}>" if t.is_list else _MEMBER_TYPES[t.base]
    return f"std::optional<{inner}>" if t.optional else inner


def to_member(t: Type, name: str) -> str:
    """C++ turning argument ``name`` into its ``member_type``."""
    if t.is_list or t.optional:
        return f"opgen::owned({name})"
    return {"Scalar": f"{name}.toDouble()", "str": f"std::string({name})",
            "SymInt": f"{name}.guard_int(__FILE__, __LINE__)"}.get(t.base, name)


def from_member(t: Type, member: str) -> tuple[str, str]:
    """The type and C++ of a kept attribute as the dispatcher's argument type accepts it: only an
    optional list needs converting (there is no conversion from std::optional<std::vector<T>>)."""
    if t.is_list and t.optional:
        return argument_type(t), f"opgen::borrowed({member})"
    return member_type(t), member


def returns_type(schema: FunctionSchema) -> str:
    if len(schema.returns) == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join("at::Tensor" for _ in schema.returns) + ">"


def parameters(args: tuple[Argument, ...]) -> str:
    return ", ".join(f"{argument_type(a.type)} {a.name}" for a in args)


def names(args: tuple[Argument, ...]) -> str:
    return ", ".join(a.name for a in args)


_PRINTABLE = re.compile(r"[ -~]*\Z")  # printable ASCII
_LITERAL_SAFE = re.compile("[" + re.escape("".join(c for c in map(chr, range(0x20, 0x7F)) if c not in '"\\?')) + r"]*\Z")


def nested_call(fn: str, operands: list[str]) -> str:
    """`fn(a, fn(b, c))`: a two-operand C++ function over several operands (`x and y and z`)."""
    *rest, text = operands
    for operand in reversed(rest):
        text = f"{fn}({operand}, {text})"
    return text


def string_literal(text: str) -> str:
    """A C++ string literal holding exactly ``text`` (printable ASCII kept, the rest escaped)."""
    if _LITERAL_SAFE.match(text):
        return f'"{text}"'
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "?":
            out.append("\\?")  # no trigraphs, whatever the standard
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            for b in ch.encode("utf-8"):
                out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def comment(text: str) -> str:
    """``text`` made safe for a ``//`` comment: one line, no trailing backslash, and invisible
    format characters (bidirectional overrides, zero-width marks) spelled out as ``<U+202E>``:
    compilers reject unpaired bidi controls (-Wbidi-chars) and readers can't see them."""
    line = " ".join(text.split())
    if not _PRINTABLE.match(line):
        line = "".join(c if " " <= c <= "~" or (ord(c) > 127 and not invisible(c)) else (f"<U+{ord(c):04X}>" if invisible(c) else " ")
                       for c in line)
    while line.endswith("\\"):
        line = line[:-1] + "(backslash)"
    return line


def invisible(c: str) -> bool:
    """Characters that change how text around them displays without showing themselves."""
    return c not in "\n\t" and unicodedata.category(c) in ("Cf", "Cc", "Co", "Cs", "Zl", "Zp")


def float_literal(value: float | int) -> str:
    r = repr(float(value))
    return r if ("e" in r or "." in r) else r + ".0"


def cpu_kernel_choice(function: str, avx512_in_cache: bool = True) -> str:
    """The expression that picks, once at run time, the built variants of the CPU kernel
    ``function`` (declared in ``cpu::<capability>``) that its calls choose from by their data
    (``.for_data(dtype, numel)``): opgen::pick_cpu_kernel takes one per capability, null where
    OPGEN_HAVE_<capability> says it was not built; ``avx512_in_cache=False`` keeps float32 / float64
    data that fits in cache off AVX-512 (a memory-bound loop)."""
    lines = [f"opgen::pick_cpu_kernel(&cpu::DEFAULT::{function}"]
    for cap in CPU_CAPABILITIES[1:]:
        lines += [f"#if defined(OPGEN_HAVE_{cap})", f"      , &cpu::{cap}::{function}", "#else",
                  f"      , decltype(&cpu::DEFAULT::{function}){{}}", "#endif"]
    return "\n".join([*lines, "      )" if avx512_in_cache else "      , /*avx512_in_cache=*/false)"])
