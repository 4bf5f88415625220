"""The validated model of one op spec: frozen dataclasses built by ``OpSpec.parse``.

Every rejection carries ``path:line:col`` and says how to fix it. ``OpSpec.to_dict()``
gives back a document that ``parse`` turns into an equal spec (the round-trip).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Union

from . import expr as E
from .dtypes import ALIASES, DTYPES, GROUPS, DType, canonical_order
from .errors import SpecError, did_you_mean
from .schema import Argument, FunctionSchema, SchemaError
from .yaml_source import SpecSource

TOP_KEYS = ("signature", "doc", "dtypes", "shape", "checks", "kernel", "gradient", "reference", "test")
KERNEL_KEYS = ("pointwise",)
TEST_KEYS = ("ranges", "shapes")
MAX_DOC_CHARS = 4000


# ---- pieces --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeRule:
    kind: str  # 'same' | 'broadcast' | 'explicit'
    tensors: tuple[str, ...] = ()  # for same / broadcast
    sizes: tuple[E.Expr, ...] = ()  # for explicit

    def __str__(self) -> str:
        if self.kind == "explicit":
            return "[" + ", ".join(E.unparse(s) for s in self.sizes) + "]"
        return f"{self.kind}({', '.join(self.tensors)})"


@dataclass(frozen=True)
class Check:
    expr: E.Expr

    @property
    def text(self) -> str:
        return E.unparse(self.expr)


@dataclass(frozen=True)
class PointwiseKernel:
    expr: E.Expr

    @property
    def text(self) -> str:
        return E.unparse(self.expr)


Kernel = Union[PointwiseKernel]


@dataclass(frozen=True)
class Gradient:
    auto: bool
    formulas: tuple[tuple[str, E.Expr], ...] = ()  # (input, formula), in signature order

    def formula(self, name: str) -> E.Expr | None:
        return dict(self.formulas).get(name)


@dataclass(frozen=True)
class TestConfig:
    ranges: tuple[tuple[str, float, float], ...] = ()
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # one example shape per tensor input

    def range(self, name: str) -> tuple[float, float] | None:
        for n, lo, hi in self.ranges:
            if n == name:
                return lo, hi
        return None


@dataclass(frozen=True)
class OpSpec:
    name: str
    path: str  # display path of the spec file, relative to the project
    schema: FunctionSchema
    doc: str
    dtypes: tuple[DType, ...]
    shape: ShapeRule
    checks: tuple[Check, ...]
    kernel: Kernel
    gradient: Gradient | None
    reference: str | None  # canonical torch expression, or None: the kernel in float64
    test: TestConfig

    @property
    def tensor_inputs(self) -> tuple[Argument, ...]:
        return self.schema.tensor_inputs

    @property
    def attributes(self) -> tuple[Argument, ...]:
        return self.schema.attributes

    @staticmethod
    def parse(source: SpecSource) -> "OpSpec":
        return _SpecParser(source).parse()

    def to_dict(self) -> dict[str, Any]:
        """A spec document equal in meaning to the parsed file (keys in canonical order)."""
        d: dict[str, Any] = {"signature": str(self.schema)}
        if self.doc:
            d["doc"] = self.doc
        d["dtypes"] = [t.name for t in self.dtypes]
        d["shape"] = str(self.shape)
        if self.checks:
            d["checks"] = [c.text for c in self.checks]
        d["kernel"] = {"pointwise": self.kernel.text}
        if self.gradient is not None:
            d["gradient"] = "auto" if self.gradient.auto else {n: E.unparse(f) for n, f in self.gradient.formulas}
        if self.reference is not None:
            d["reference"] = self.reference
        if self.test.ranges or self.test.shapes:
            d["test"] = {}
            if self.test.ranges:
                d["test"]["ranges"] = {n: [lo, hi] for n, lo, hi in self.test.ranges}
            if self.test.shapes:
                d["test"]["shapes"] = {n: list(s) for n, s in self.test.shapes}
        return d


# ---- parsing --------------------------------------------------------------------------------


def attribute_kind(a: Argument) -> str:
    t = a.type
    if t.is_list or t.optional:
        return "unusable"
    return {"float": E.NUM, "Scalar": E.NUM, "int": E.INT, "SymInt": E.INT, "bool": E.BOOL, "str": E.STR}[t.base]


class _SpecParser:
    def __init__(self, source: SpecSource) -> None:
        self.src = source
        self.d = source.data

    def err(self, path: tuple, message: str, *, key: bool = False) -> SpecError:
        return self.src.error(path, message, key=key)

    def parse(self) -> OpSpec:
        if not isinstance(self.d, dict):
            raise self.err((), "a spec must be a mapping with at least 'signature', 'dtypes', 'shape' and 'kernel'")
        self.check_keys((), self.d, TOP_KEYS)
        for required in ("signature", "dtypes", "shape", "kernel"):
            if required not in self.d:
                raise self.err((), f"missing required key '{required}'")
        schema = self.signature()
        self.schema = schema
        doc = self.doc()
        dtypes = self.dtypes()
        shape = self.shape()
        checks = self.checks()
        kernel = self.kernel(dtypes, shape)
        gradient = self.gradient()
        reference = self.reference()
        test = self.test()
        return OpSpec(schema.name, self.src.path, schema, doc, dtypes, shape, checks, kernel, gradient, reference, test)

    def check_keys(self, path: tuple, mapping: dict, allowed: tuple[str, ...]) -> None:
        for key in mapping:
            if key not in allowed:
                raise self.err(path + (key,), f"unknown key '{key}'; allowed keys: {', '.join(allowed)}{did_you_mean(key, allowed)}", key=True)

    def string(self, path: tuple, what: str) -> str:
        value = self.get(path)
        if not isinstance(value, str):
            raise self.err(path, f"{what} must be a string, got {_type_name(value)}")
        return value

    def get(self, path: tuple) -> Any:
        v = self.d
        for p in path:
            v = v[p]
        return v

    # -- fields

    def signature(self) -> FunctionSchema:
        text = self.string(("signature",), "'signature'")
        try:
            schema = FunctionSchema.parse(text)
        except SchemaError as e:
            raise SpecError(self.src.inner_location(("signature",), e.col), e.message) from None
        stem = PurePosixPath(self.src.path).stem
        if schema.name != stem:
            raise SpecError(self.src.inner_location(("signature",), 0),
                            f"op name '{schema.name}' must equal the file name '{stem}'; rename the file to {schema.name}.yaml or the op to {stem}")
        from .schema import reserved_reason

        reason = reserved_reason(schema.name)
        if reason:
            raise SpecError(self.src.inner_location(("signature",), 0), f"invalid op name '{schema.name}': {reason}")
        return schema

    def doc(self) -> str:
        if "doc" not in self.d:
            return ""
        doc = self.string(("doc",), "'doc'")
        doc = " ".join(doc.split())
        if len(doc) > MAX_DOC_CHARS:
            raise self.err(("doc",), f"'doc' is {len(doc)} characters; keep it to one paragraph under {MAX_DOC_CHARS}")
        if any(ord(c) < 32 for c in doc):
            raise self.err(("doc",), "'doc' must not contain control characters")
        return doc

    def dtypes(self) -> tuple[DType, ...]:
        value = self.d["dtypes"]
        if isinstance(value, str):
            value = [value]
            paths = [("dtypes",)]
        elif isinstance(value, list) and value:
            paths = [("dtypes", i) for i in range(len(value))]
        else:
            raise self.err(("dtypes",), "'dtypes' must be a non-empty list such as [float32, float64] or [floating]")
        names: set[str] = set()
        choices = tuple(DTYPES) + tuple(GROUPS)
        for item, path in zip(value, paths):
            if not isinstance(item, str):
                raise self.err(path, f"a dtype must be a name, got {_type_name(item)}")
            if item in GROUPS:
                names.update(GROUPS[item])
            elif item in DTYPES:
                names.add(item)
            elif item in ALIASES:
                raise self.err(path, f"write '{ALIASES[item]}' instead of '{item}'")
            else:
                raise self.err(path, f"unknown dtype '{item}'; use one of {', '.join(choices)}{did_you_mean(item, choices)}")
        return canonical_order(names)

    def scope(self, *, elementwise: bool, what: str, extra: dict[str, str] | None = None) -> E.Scope:
        names = {a.name: E.TENSOR for a in self.schema.tensor_inputs}
        names.update({a.name: attribute_kind(a) for a in self.schema.attributes})
        names.update(extra or {})
        return E.Scope(names, elementwise, what)

    def expression(self, path: tuple, scope: E.Scope) -> tuple[E.Expr, str]:
        text = self.get(path)
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise self.err(path, f"expected an expression, got {_type_name(text)}")
        text = str(text)
        try:
            e = E.parse_expr(text)
            kind = E.typecheck(e, scope)
            for node in E.walk(e):
                if isinstance(node, E.Name) and scope.names.get(node.id) == "unusable":
                    raise E.ExprError(node.col, f"'{node.id}' is a list or optional attribute and can't be used in an expression")
                if isinstance(node, E.Num) and isinstance(node.value, float) and not math.isfinite(node.value):
                    raise E.ExprError(node.col, "numeric literals must be finite")
        except E.ExprError as ex:
            raise SpecError(self.src.inner_location(path, ex.col), ex.message) from None
        return e, kind

    def shape(self) -> ShapeRule:
        path = ("shape",)
        value = self.d["shape"]
        tensors = [a.name for a in self.schema.tensor_inputs]
        if isinstance(value, list) or (isinstance(value, str) and value.strip().startswith("[")):
            return self.explicit_shape(path, value)
        if not isinstance(value, str):
            raise self.err(path, "'shape' must be same(x), broadcast(a, b, ...) or a list of sizes like [a.size(0), b.size(1)]")
        try:
            e = E.parse_expr(value)
        except E.ExprError as ex:
            raise SpecError(self.src.inner_location(path, ex.col), ex.message) from None
        if not isinstance(e, E.Call) or e.fn not in ("same", "broadcast"):
            col = e.col if isinstance(e, E.Call) else 0
            fn = e.fn if isinstance(e, E.Call) else value
            hint = did_you_mean(fn, ("same", "broadcast"))
            raise SpecError(self.src.inner_location(path, col),
                            f"unknown shape rule '{value}'; use same(x), broadcast(a, b, ...) or [size, ...]{hint}")
        if not e.args:
            raise SpecError(self.src.inner_location(path, e.col), f"{e.fn}() needs at least one tensor argument")
        if e.fn == "same" and len(e.args) != 1:
            raise SpecError(self.src.inner_location(path, e.args[1].col), "same() takes one tensor; use broadcast(a, b) for several")
        names: list[str] = []
        for a in e.args:
            if not isinstance(a, E.Name) or a.id not in tensors:
                raise SpecError(self.src.inner_location(path, a.col),
                                f"{e.fn}() takes tensor inputs; tensor inputs are: {', '.join(tensors) or 'none'}"
                                + (did_you_mean(a.id, tuple(tensors)) if isinstance(a, E.Name) else ""))
            if a.id in names:
                raise SpecError(self.src.inner_location(path, a.col), f"'{a.id}' is listed twice")
            names.append(a.id)
        return ShapeRule(e.fn, tuple(names))

    def explicit_shape(self, path: tuple, value: Any) -> ShapeRule:
        scope = self.scope(elementwise=False, what="shape rule")
        sizes: list[E.Expr] = []
        if isinstance(value, str):
            raise self.err(path, "write an explicit shape as an unquoted YAML list: shape: [a.size(0), b.size(1)]")
        if not value:
            return ShapeRule("explicit", (), ())
        for i in range(len(value)):
            e, kind = self.expression(path + (i,), scope)
            if kind != E.INT:
                raise self.err(path + (i,), f"a size must be an integer expression such as x.size(0), got a {kind}")
            sizes.append(e)
        return ShapeRule("explicit", (), tuple(sizes))

    def checks(self) -> tuple[Check, ...]:
        if "checks" not in self.d:
            return ()
        value = self.d["checks"]
        if not isinstance(value, list):
            raise self.err(("checks",), "'checks' must be a list of conditions such as [\"eps > 0\"]")
        scope = self.scope(elementwise=False, what="check")
        out = []
        for i in range(len(value)):
            e, kind = self.expression(("checks", i), scope)
            if kind != E.BOOL:
                raise self.err(("checks", i), f"a check must be a condition such as 'eps > 0', got a {kind}")
            out.append(Check(e))
        return tuple(out)

    def kernel(self, dtypes: tuple[DType, ...], shape: ShapeRule) -> Kernel:
        path = ("kernel",)
        value = self.d["kernel"]
        if not isinstance(value, dict) or not value:
            raise self.err(path, "'kernel' must be a mapping such as {pointwise: a + b}")
        self.check_keys(path, value, KERNEL_KEYS)
        if len(self.schema.returns) != 1:
            raise self.err(("signature",), "a pointwise kernel returns exactly one Tensor")
        for a in self.schema.arguments:
            if a.is_tensor and (a.type.optional or a.type.is_list or a.type.alias):
                raise SpecError(self.src.inner_location(("signature",), a.col),
                                f"pointwise kernels take plain 'Tensor' inputs; '{a.type} {a.name}' is not supported by a pointwise kernel")
        if not self.schema.tensor_inputs:
            raise self.err(("signature",), "a pointwise op needs at least one Tensor input")
        for d in dtypes:
            if not d.floating:
                raise self.err(("dtypes",), f"pointwise kernels compute in floating point; '{d.name}' is not supported (use floating dtypes)")
        e, kind = self.expression(path + ("pointwise",), self.scope(elementwise=True, what="kernel expression"))
        if kind != E.ELEM:
            if kind == E.MASK:
                raise self.err(path + ("pointwise",), "the kernel must compute a number; wrap a condition as where(cond, 1.0, 0.0)")
            raise self.err(path + ("pointwise",), "the kernel expression must use at least one tensor input")
        return PointwiseKernel(e)

    def gradient(self) -> Gradient | None:
        if "gradient" not in self.d:
            return None
        path = ("gradient",)
        value = self.d["gradient"]
        if value == "auto":
            return Gradient(auto=True)
        tensors = tuple(a.name for a in self.schema.tensor_inputs)
        if not isinstance(value, dict) or not value:
            raise self.err(path, "'gradient' must be 'auto' or a mapping from tensor inputs to formulas, e.g. {a: grad * weight}")
        scope = self.scope(elementwise=True, what="gradient formula", extra={"grad": E.TENSOR, "result": E.TENSOR})
        formulas = {}
        for name in value:
            if name not in tensors:
                raise self.err(path + (name,), f"'{name}' is not a tensor input; gradients are for: {', '.join(tensors)}{did_you_mean(name, tensors)}", key=True)
            e, kind = self.expression(path + (name,), scope)
            if kind != E.ELEM:
                raise self.err(path + (name,), "a gradient formula must be a per-element expression, usually involving grad")
            formulas[name] = e
        return Gradient(False, tuple((n, formulas[n]) for n in tensors if n in formulas))

    def reference(self) -> str | None:
        if "reference" not in self.d:
            return None
        path = ("reference",)
        text = self.string(path, "'reference'")
        allowed = {a.name for a in self.schema.arguments} | {"torch"}
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            raise SpecError(self.src.inner_location(path, (e.offset or 1) - 1), f"invalid reference expression: {e.msg}") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in allowed:
                raise SpecError(self.src.inner_location(path, node.col_offset),
                                f"unknown name '{node.id}' in reference; use the op's arguments and torch{did_you_mean(node.id, tuple(sorted(allowed)))}")
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                raise SpecError(self.src.inner_location(path, node.col_offset), "private attributes are not allowed in a reference")
            if not isinstance(node, _REFERENCE_NODES):
                raise SpecError(self.src.inner_location(path, getattr(node, "col_offset", 0)),
                                f"'{type(node).__name__}' is not allowed in a reference expression")
        return ast.unparse(tree)

    def test(self) -> TestConfig:
        if "test" not in self.d:
            return TestConfig()
        value = self.d["test"]
        if not isinstance(value, dict):
            raise self.err(("test",), "'test' must be a mapping such as {ranges: {x: [0.01, 10]}}")
        self.check_keys(("test",), value, TEST_KEYS)
        ranges = value.get("ranges", {})
        if not isinstance(ranges, dict):
            raise self.err(("test", "ranges"), "'ranges' maps tensor inputs to [low, high]")
        tensors = tuple(a.name for a in self.schema.tensor_inputs)
        out = []
        for name, r in ranges.items():
            p = ("test", "ranges", name)
            if name not in tensors:
                raise self.err(p, f"'{name}' is not a tensor input{did_you_mean(name, tensors)}", key=True)
            if (not isinstance(r, list) or len(r) != 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r)
                    or not all(math.isfinite(v) for v in r) or not r[0] < r[1]):
                raise self.err(p, "a range is [low, high] with finite numbers and low < high")
            out.append((name, float(r[0]), float(r[1])))
        shapes = value.get("shapes", {})
        if not isinstance(shapes, dict):
            raise self.err(("test", "shapes"), "'shapes' maps every tensor input to an example shape, e.g. {x: [4, 3]}")
        example = []
        for name, shape in shapes.items():
            p = ("test", "shapes", name)
            if name not in tensors:
                raise self.err(p, f"'{name}' is not a tensor input{did_you_mean(name, tensors)}", key=True)
            if not isinstance(shape, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 4096 for v in shape) or len(shape) > 8:
                raise self.err(p, "a shape is a list of at most 8 sizes between 0 and 4096, e.g. [4, 3]")
            example.append((name, tuple(shape)))
        if example and len(example) != len(tensors):
            missing = [t for t in tensors if t not in dict(example)]
            raise self.err(("test", "shapes"), f"give a shape for every tensor input; missing: {', '.join(missing)}")
        order = {t: i for i, t in enumerate(tensors)}
        return TestConfig(tuple(sorted(out)), tuple(sorted(example, key=lambda e: order[e[0]])))


_REFERENCE_NODES = (
    ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.BinOp, ast.UnaryOp,
    ast.Compare, ast.BoolOp, ast.IfExp, ast.List, ast.Tuple, ast.Subscript, ast.Slice,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub, ast.UAdd, ast.Not,
    ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.And, ast.Or,
)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
