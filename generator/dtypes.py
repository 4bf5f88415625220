"""Dtype names a spec may use, their groups, and their spellings in C++ and Python."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str  # spec and torch spelling: float32
    scalar_type: str  # at::ScalarType enumerator: Float
    cpp: str  # C++ element type: float
    floating: bool

    @property
    def torch(self) -> str:
        return f"torch.{self.name}"


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float32", "Float", "float", True),
        DType("float64", "Double", "double", True),
        DType("float16", "Half", "at::Half", True),
        DType("bfloat16", "BFloat16", "at::BFloat16", True),
        DType("int8", "Char", "int8_t", False),
        DType("int16", "Short", "int16_t", False),
        DType("int32", "Int", "int32_t", False),
        DType("int64", "Long", "int64_t", False),
        DType("uint8", "Byte", "uint8_t", False),
        DType("bool", "Bool", "bool", False),
    )
}

GROUPS: dict[str, tuple[str, ...]] = {
    "floating": ("float32", "float64", "float16", "bfloat16"),
    "reduced_floating": ("float16", "bfloat16"),
    "integral": ("uint8", "int8", "int16", "int32", "int64"),
}

ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32"}


def canonical_order(names: set[str]) -> tuple[DType, ...]:
    """Dtypes in a fixed order, so generated code does not depend on how a spec lists them."""
    return tuple(d for n, d in DTYPES.items() if n in names)
