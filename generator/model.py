"""The validated model of one op spec: frozen dataclasses built by ``OpSpec.parse``.

Every rejection carries ``path:line:col`` and says how to fix it. ``OpSpec.to_dict()``
gives back a document that ``parse`` turns into an equal spec (the round-trip).
"""

from __future__ import annotations

import ast
import dataclasses
import keyword
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any, Union

from . import expr as E
from .dtypes import ALIASES, DTYPES, GROUPS, DType, canonical_order
from .errors import SpecError, did_you_mean
from .functions import FUNCTIONS
from .tensor_expr import Formula, FormulaError, parse_formula
from .schema import Argument, FunctionSchema, SchemaError, Type
from .yaml_source import SpecSource

TOP_KEYS = ("signature", "doc", "dtypes", "shape", "checks", "let", "kernel", "gradient", "variants", "autocast", "reference", "test")
# Under torch.autocast, what the floating inputs are cast to (ATen's CastPolicy, autocast_mode.h),
# and the dtypes the op then needs.
AUTOCAST = {"lower_precision": ("autocast's dtype, float16 or bfloat16 (as torch's matmul-like ops)", ("float16", "bfloat16")),
            "fp32": ("float32 (as torch's ops that need the range, e.g. layer_norm on CUDA)", ("float32",)),
            "promote": ("the widest of their dtypes (as torch's ops that take several, e.g. cat)", ("float32", "float16", "bfloat16"))}
# What users write for a policy, from torch's names and dtypes.
AUTOCAST_ALIASES = {"lower_precision_fp": "lower_precision", "fp16": "lower_precision", "bf16": "lower_precision",
                    "float16": "lower_precision", "bfloat16": "lower_precision", "half": "lower_precision",
                    "float32": "fp32", "float": "fp32", "widest": "promote"}
VARIANTS = ("out", "inplace")
# Argument names torch.compile cannot pass to a mutating custom op (torch 2.13): its
# auto_functionalized hands every argument over by keyword to functions whose own first
# parameter has that name ("got multiple values for argument 'mode'").
MUTATION_RESERVED = ("dispatch_key", "mode")
VARIANT_NAMES = {"out": "out=", "inplace": "in-place"}
MAX_SCHEMA_ARGUMENTS = 64  # c10's dispatcher (DispatchKeyExtractor's bitset)
# Names an expression adds to the op's arguments (besides its outputs' names), and what they mean.
EXPRESSION_NAMES = {"acc": "the combined value", "count": "the number of elements reduced into each output element",
                    "ties": "the number of elements whose map equals the result (a max's ties)"}

KERNEL_KEYS = ("pointwise", "reduce", "cpu", "cuda")
CUSTOM_KERNEL_SUFFIXES = {"cpu": (".cpp", ".cc"), "cuda": (".cu",)}
REDUCE_KEYS = ("map", "combine", "identity", "post")
# Built-in combines of a reduction: its identity (None: the reduction of nothing is an error)
# and whether it can return the index of the element it picked.
COMBINES = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": None, "min": None, "logsumexp": -math.inf}
INDEXED_COMBINES = ("max", "min")
TEST_KEYS = ("ranges", "shapes", "surrogate")
MAX_DOC_CHARS = 4000
_CONTROL_CHARS = re.compile(r"[\x00-\x1f]")


# ---- pieces --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeRule:
    kind: str  # 'same' | 'broadcast' | 'explicit' | 'reduce'
    tensors: tuple[str, ...] = ()  # for same / broadcast / reduce
    sizes: tuple[E.Expr, ...] = ()  # for explicit
    dim: str | None = None  # reduce: the int or int[] attribute naming the reduced dims, or an int literal
    keepdim: str | None = None  # reduce: the bool attribute or True/False; None means the dims are dropped

    @property
    def literal_dim(self) -> bool:
        """A reduce rule of a hand-written kernel may fix its dim (`reduce(x, -1, True)`)."""
        return self.dim is not None and not self.dim.isidentifier()

    def __str__(self) -> str:
        if self.kind == "explicit":
            return "[" + ", ".join(E.unparse(s) for s in self.sizes) + "]"
        if self.kind == "reduce":
            return f"reduce({', '.join(n for n in (*self.tensors, self.dim, self.keepdim) if n)})"
        return f"{self.kind}({', '.join(self.tensors)})"


@dataclass(frozen=True)
class Check:
    expr: E.Expr

    @cached_property
    def text(self) -> str:
        return E.unparse(self.expr)


@dataclass(frozen=True)
class PointwiseKernel:
    expr: E.Expr  # the (first) output's expression
    bool_output: bool = False  # a condition (comparison): the output is a bool tensor
    more: tuple[E.Expr, ...] = ()  # the other outputs' expressions, in return order

    # cached: the model is immutable and emitters read these many times per op
    @cached_property
    def exprs(self) -> tuple[E.Expr, ...]:
        return (self.expr, *self.more)

    @cached_property
    def text(self) -> str:
        return "; ".join(E.unparse(e) for e in self.exprs)


@dataclass(frozen=True)
class ReduceKernel:
    """``map`` each element of the reduced input, fold with ``combine``, finish with ``post``."""

    map: E.Expr
    combine: str  # a COMBINES name, or 'custom'
    combine_expr: E.Expr | None = None  # custom: an expression of the accumulators a and b
    identity: float | None = None  # custom: the value of the reduction over no elements
    post: E.Expr | None = None  # an expression of `acc` (the combined value) and attributes

    @cached_property
    def text(self) -> str:
        return E.unparse(self.map)

    @property
    def combine_text(self) -> str:
        return E.unparse(self.combine_expr) if self.combine_expr is not None else self.combine

    @property
    def has_identity(self) -> bool:
        return self.identity is not None if self.combine == "custom" else COMBINES[self.combine] is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"map": E.unparse(self.map), "combine": self.combine_text}
        if self.combine == "custom" and self.identity is not None:
            d["identity"] = _format_float(self.identity)
        if self.post is not None:
            d["post"] = E.unparse(self.post)
        return d


@dataclass(frozen=True)
class CustomKernel:
    """Hand-written kernel bodies, paths relative to the spec's folder; everything else is generated."""

    cpu: str
    cuda: str | None = None

    @property
    def text(self) -> str:
        return "hand-written: " + ", ".join(f"{k} {v}" for k, v in self.files().items())

    def files(self) -> dict[str, str]:
        return {k: v for k, v in (("cpu", self.cpu), ("cuda", self.cuda)) if v is not None}


Kernel = Union[PointwiseKernel, ReduceKernel, CustomKernel]


@dataclass(frozen=True)
class Gradient:
    auto: bool
    formulas: tuple[tuple[str, E.Expr], ...] = ()  # (input, formula), in signature order
    tensor_formulas: tuple[tuple[str, Formula], ...] = ()  # hand-written ops: whole-tensor ATen formulas
    kernel: CustomKernel | None = None  # hand-written ops: a hand-written backward kernel

    def formula(self, name: str) -> E.Expr | None:
        return dict(self.formulas).get(name)


@dataclass(frozen=True)
class TestConfig:
    ranges: tuple[tuple[str, float, float], ...] = ()
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # one example shape per tensor input
    # inputs whose gradient is deliberately not the kernel's derivative (a straight-through
    # estimator): checked against the reference's autograd, not finite differences
    surrogate: tuple[str, ...] = ()

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
    variants: tuple[str, ...] = ("out",)  # extra overloads: out= (`<op>.out`), in-place (`<op>_`)
    output_shapes: tuple[ShapeRule, ...] = ()  # hand-written ops: one rule per output (`shape: {y: ..., mean: ...}`)
    autocast: str | None = None  # a key of AUTOCAST: how torch.autocast casts the floating inputs; None: it leaves them

    def __hash__(self) -> int:
        # Emitters memoize per op (functools.lru_cache); hashing every field of the tree on each
        # lookup cost more than the work saved. Equal specs share name and path, so this agrees
        # with the generated __eq__.
        return hash((self.name, self.path))

    @cached_property
    def shapes(self) -> tuple[ShapeRule, ...]:
        """The shape rule of each output, in return order."""
        return self.output_shapes or (self.shape,) * len(self.schema.returns)

    @cached_property
    def output_names(self) -> tuple[str, ...]:
        """The outputs' names in generated code: `out` for a single output, else the schema's names."""
        if len(self.schema.returns) == 1:
            return ("out",)
        return tuple(r.name or f"out{i}" for i, r in enumerate(self.schema.returns))

    @cached_property
    def grad_names(self) -> tuple[str, ...]:
        """How gradient formulas and backward kernels name the incoming gradients: `grad` for one
        output, `grad_<output>` for each of several."""
        return ("grad",) if len(self.output_names) == 1 else tuple(f"grad_{n}" for n in self.output_names)

    @cached_property
    def result_names(self) -> tuple[str, ...]:
        """How gradient formulas and backward kernels name the outputs: `result`, or each by name."""
        return ("result",) if len(self.output_names) == 1 else self.output_names

    @property
    def multi_output(self) -> bool:
        """Several outputs, each with its own gradient (max/min's indices are not one of these)."""
        return len(self.schema.returns) > 1 and not self.is_reduction

    @property
    def tensor_inputs(self) -> tuple[Argument, ...]:
        return self.schema.tensor_inputs

    @property
    def attributes(self) -> tuple[Argument, ...]:
        return self.schema.attributes

    @property
    def is_pointwise(self) -> bool:
        return isinstance(self.kernel, PointwiseKernel)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.kernel, ReduceKernel)

    @property
    def is_custom(self) -> bool:
        return isinstance(self.kernel, CustomKernel)

    @property
    def has_indices(self) -> bool:
        """A max/min reduction that also returns where it found each value."""
        return len(self.schema.returns) == 2 and self.is_reduction

    @staticmethod
    def parse(source: SpecSource) -> "OpSpec":
        return _SpecParser(source).parse()

    def to_dict(self) -> dict[str, Any]:
        """A spec document equal in meaning to the parsed file (keys in canonical order)."""
        d: dict[str, Any] = {"signature": str(self.schema)}
        if self.doc:
            d["doc"] = self.doc
        d["dtypes"] = [t.name for t in self.dtypes]
        if self.output_shapes:
            d["shape"] = {n: _shape_value(r) for n, r in zip(self.output_names, self.output_shapes)}
        else:
            d["shape"] = _shape_value(self.shape)
        if self.checks:
            d["checks"] = [c.text for c in self.checks]
        if isinstance(self.kernel, ReduceKernel):
            d["kernel"] = {"reduce": self.kernel.to_dict()}
        elif isinstance(self.kernel, CustomKernel):
            d["kernel"] = self.kernel.files()
        elif self.kernel.more:
            d["kernel"] = {"pointwise": {n: E.unparse(e) for n, e in zip(self.output_names, self.kernel.exprs)}}
        else:
            d["kernel"] = {"pointwise": self.kernel.text}
        if self.gradient is not None:
            g = self.gradient
            if g.kernel is not None:
                d["gradient"] = {"kernel": g.kernel.files()}
            elif g.tensor_formulas:
                d["gradient"] = {n: f.text for n, f in g.tensor_formulas}
            else:
                d["gradient"] = "auto" if g.auto else {n: E.unparse(f) for n, f in g.formulas}
        if self.variants != (("out",) if len(self.schema.returns) == 1 else ()):
            d["variants"] = list(self.variants)
        if self.autocast is not None:
            d["autocast"] = self.autocast
        if self.reference is not None:
            d["reference"] = self.reference
        if self.test != TestConfig():
            d["test"] = {}
            if self.test.ranges:
                d["test"]["ranges"] = {n: [lo, hi] for n, lo, hi in self.test.ranges}
            if self.test.shapes:
                d["test"]["shapes"] = {n: list(s) for n, s in self.test.shapes}
            if self.test.surrogate:
                d["test"]["surrogate"] = list(self.test.surrogate)
        return d


def _shape_value(rule: ShapeRule) -> Any:
    return [E.unparse(s) for s in rule.sizes] if rule.kind == "explicit" else str(rule)


# ---- parsing --------------------------------------------------------------------------------


TENSOR_KIND = "tensor"


_FORMULA_KINDS = {"float": "number", "Scalar": "number", "int": "int", "SymInt": "int", "bool": "bool", "str": None}


def _formula_kind(a: Argument) -> str | None:
    """How a whole-tensor formula sees an attribute (None: it can't use it; a list: by element)."""
    if a.type.is_list or a.type.optional:
        return None
    return _FORMULA_KINDS[a.type.base]


def reduction_derivable(kernel: ReduceKernel, indexed: bool) -> bool:
    """Whether ``gradient: auto`` can derive this reduction's gradient."""
    return indexed or (kernel.post is None and kernel.combine in ("sum", "mean", "logsumexp"))


def attribute_kind(a: Argument) -> str:
    """The kind of the attribute's value in expressions; of one element for a list (`betas[0]`)."""
    t = a.type
    if t.is_list and a.name not in list_attributes((a,)):
        return "unusable"
    if t.optional and t.base not in OPTIONAL_ATTRIBUTE_BASES:
        return "unusable"
    return {"float": E.NUM, "Scalar": E.NUM, "int": E.INT, "SymInt": E.INT, "bool": E.BOOL, "str": E.STR}[t.base]


# Lists whose elements expressions may read: sized, never None, of plain numbers or flags; and in
# checks and shape rules, of sizes (a SymInt[] element is symbolic, where kernels need a number).
INDEXABLE_LIST_BASES = ("float", "int", "bool")


def list_attributes(arguments, *, sizes: bool = False) -> dict[str, int]:
    """Sized list attributes expressions may index: name -> size (``sizes``: SymInt[N] too)."""
    bases = INDEXABLE_LIST_BASES + (("SymInt",) if sizes else ())
    return {a.name: a.type.list_size for a in arguments
            if a.type.is_list and a.type.list_size is not None and not a.type.optional and a.type.base in bases}


def size_lists(arguments) -> dict[str, str]:
    """The kinds of SymInt[N] attributes in checks and shape rules, where their elements are sizes."""
    return {name: E.INT for name in list_attributes(arguments, sizes=True).keys() - list_attributes(arguments).keys()}


def expression_scope(attributes, names: dict[str, str], *, elementwise: bool, what: str,
                     absent: frozenset[str] = frozenset()) -> E.Scope:
    """What expressions see: ``names`` (tensors, and what the context adds) and the op's
    attributes, optional ones and list elements among them; SymInt[N] elements only where sizes
    are read (not elementwise: checks and shape rules). ``absent``: the optional tensors among
    ``names`` (a pointwise op's `Tensor? bias`), read like optional attributes, guarded."""
    kinds = {**names, **{a.name: attribute_kind(a) for a in attributes}}
    if not elementwise:
        kinds.update(size_lists(attributes))
    return E.Scope(kinds, elementwise, what, optional=optional_attributes(attributes) | absent,
                   lists=list_attributes(attributes, sizes=not elementwise), absent=absent)


def optional_tensors(op_or_schema) -> frozenset[str]:
    """The `Tensor?` inputs a pointwise op's expressions may read (guarded by `is None` tests)."""
    return frozenset(a.name for a in op_or_schema.tensor_inputs if a.type.optional and not a.type.is_list)


# Optional attributes expressions may read, guarded by `is None` tests.
OPTIONAL_ATTRIBUTE_BASES = ("float", "Scalar", "int", "bool", "str")


def optional_attributes(arguments) -> frozenset[str]:
    return frozenset(a.name for a in arguments if a.type.optional and not a.type.is_list and a.type.base in OPTIONAL_ATTRIBUTE_BASES)


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
        self.lets: dict[str, E.Expr] = {}
        self.let_kinds: dict[str, str] = {}
        self.used_lets: set[str] = set()
        self.let_definitions()
        doc = self.doc()
        dtypes = self.dtypes()
        output_shapes = self.rules = self.output_shapes()
        shape = output_shapes[0] if output_shapes else self.shape(("shape",))
        checks = self.checks()
        kernel = self.kernel(dtypes, shape)
        gradient = self.gradient(kernel)
        reference = self.reference()
        test = self.test(gradient, reference)
        variants = self.variants(kernel, shape)
        autocast = self.autocast(dtypes)
        self.check_argument_count(kernel, gradient, variants)
        if output_shapes and not isinstance(kernel, CustomKernel):
            raise self.err(("shape",), "one shape rule per output is for hand-written kernels; a pointwise op's outputs share "
                                       "one shape, e.g. shape: broadcast(a, b)")
        for name in self.lets:
            if name not in self.used_lets:
                raise self.err(("let", name), f"let '{name}' is never used; use it in an expression or remove it", key=True)
        return OpSpec(schema.name, self.src.path, schema, doc, dtypes, shape, checks, kernel, gradient, reference, test, variants,
                      output_shapes, autocast)

    def check_keys(self, path: tuple, mapping: dict, allowed: tuple[str, ...]) -> None:
        for key in mapping:
            if key not in allowed:
                raise self.err(path + (key,), f"unknown key '{key}'; allowed keys: {', '.join(allowed)}"
                                              f"{_cut_at_comma(mapping) or did_you_mean(key, allowed)}", key=True)

    def check_gradient_keys(self, path: tuple, value: dict, inputs: tuple[str, ...]) -> None:
        """Every key of a gradient mapping names a tensor input. Checked before any formula is parsed,
        so a mapping that YAML cut at an expression's commas is explained at the stray key."""
        for name in value:
            if name not in inputs:
                raise self.err(path + (name,), f"'{name}' is not a tensor input; gradients are for: {', '.join(inputs)}"
                                               f"{_cut_at_comma(value) or did_you_mean(name, inputs)}", key=True)

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
        from .schema import op_name_reserved_reason

        if schema.name != stem:
            fix = f"rename the file to {schema.name}.yaml" + ("" if op_name_reserved_reason(stem) else f" or the op to {stem}")
            raise SpecError(self.src.inner_location(("signature",), 0),
                            f"op name '{schema.name}' must equal the file name '{stem}'; {fix}")

        reason = op_name_reserved_reason(schema.name)
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
        if _CONTROL_CHARS.search(doc):
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

    def optional_tensors(self, what: str = "") -> frozenset[str]:
        """The Tensor? inputs expressions may read, guarded by `is None` tests: a pointwise op's
        (the generated code gives an absent one a stand-in and tells kernels it is None), and in
        checks a hand-written op's."""
        kernel = self.d.get("kernel")
        if not isinstance(kernel, dict):
            return frozenset()
        if "pointwise" in kernel or (what == "check" and ("cpu" in kernel or "cuda" in kernel)):
            return optional_tensors(self.schema)
        return frozenset()

    def scope(self, *, elementwise: bool, what: str, extra: dict[str, str] | None = None, sizes_only: bool = False) -> E.Scope:
        """``sizes_only``: explicit shape rules, which read no optional tensor (its sizes may not exist)."""
        absent = frozenset() if sizes_only else self.optional_tensors(what)
        names = {a.name: "unusable" if (a.type.optional or a.type.is_list) and a.name not in absent else E.TENSOR
                 for a in self.schema.tensor_inputs}
        for name in extra or {}:
            if self.schema.argument(name) is not None:
                raise self.argument_error(self.schema.argument(name), f"argument name '{name}' is taken: in the {what} it names "
                                                                      f"{EXPRESSION_NAMES.get(name, 'an output')}; rename the argument")
        names.update(extra or {})
        return expression_scope(self.schema.attributes, names, elementwise=elementwise, what=what, absent=absent)

    def unusable(self, a: Argument) -> str:
        """Why an expression can't read argument ``a``, and what would work."""
        t = a.type
        if t.is_list and t.base == "SymInt" and t.list_size is not None and not t.optional:
            return (f"'{a.name}' ({t}) holds sizes, which checks and shape rules read ({a.name}[0]); a kernel "
                    f"reads an int[{t.list_size}] instead")
        if t.is_list and t.base in INDEXABLE_LIST_BASES + ("SymInt",) and t.list_size is None and not t.optional:
            return f"'{a.name}' is a list without a size ({t}); declare one to read its elements, e.g. {t.base}[2] {a.name}, then {a.name}[0]"
        if t.is_list:
            return (f"'{a.name}' ({t}) can't be used in an expression; elements of sized {', '.join(INDEXABLE_LIST_BASES[:-1])} "
                    f"and {INDEXABLE_LIST_BASES[-1]} lists can (float[2] betas, then betas[0])")
        if t.base == "Tensor" and t.optional and not t.is_list and self.optional_tensors():
            return f"'{a.name}' ({t}) may be None, so a shape rule can't read its sizes; broadcast({a.name}, ...) can take it"
        if t.base == "Tensor" and t.optional and not t.is_list:
            return (f"'{a.name}' ({t}) can't be used in this expression; pointwise kernels read optional tensors "
                    f"(where({a.name} is None, ..., <uses of {a.name}>)), checks after a test ({a.name} is None or "
                    f"{a.name}.dim() == 1), hand-written kernels take them as arguments")
        if t.base == "Tensor":
            return f"'{a.name}' ({t}) can't be used in an expression; plain Tensor inputs can"
        return (f"'{a.name}' ({t}) can't be used in an expression; optional {', '.join(OPTIONAL_ATTRIBUTE_BASES[:-1])} and "
                f"{OPTIONAL_ATTRIBUTE_BASES[-1]} attributes can, guarded by 'is None' tests")

    def argument_error(self, a: Argument, message: str) -> SpecError:
        """An error located at the argument's name in the signature."""
        col = re.compile(rf"\b{a.name}\b").search(self.d["signature"], a.col).start()
        return SpecError(self.src.inner_location(("signature",), col), message)

    def expression(self, path: tuple, scope: E.Scope, *, lets: bool = True) -> tuple[E.Expr, str]:
        """The expression at ``path``, its `let:` names replaced by what they name (``lets``)."""
        text = self.get(path)
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            raise self.err(path, f"expected an expression, got {_type_name(text)}")
        text = str(text)
        written = None
        try:
            e = written = E.parse_expr(text)
            if lets and self.lets:
                scope = dataclasses.replace(scope, lets=tuple(self.lets))
                e = E.inline(e, self.lets, self.used_lets)
            for node in E.walk(e):  # before the type check, which would only say the name isn't a number
                if isinstance(node, E.Name) and scope.names.get(node.id) == "unusable":
                    raise E.ExprError(node.col, self.unusable(self.schema.argument(node.id)))
                if isinstance(node, E.Num) and isinstance(node.value, float) and not math.isfinite(node.value):
                    raise E.ExprError(node.col, "numeric literals must be finite")
            kind = E.typecheck(e, scope)
            E.check_optional_guards(e, scope)
        except E.ExprError as ex:
            within = self.let_at(written, scope, ex) if lets and written is not None else None
            raise SpecError(self.src.inner_location(path, ex.col), ex.message + (f" (inside let '{within}')" if within else "")) from None
        return e, kind

    def let_at(self, written: E.Expr, scope: E.Scope, error: E.ExprError) -> str | None:
        """The let whose expression ``error`` (at a use of the let) is about, if it is not about the
        expression as written: checked again with each let standing for a value of its kind."""
        uses = {n.col: n.id for n in E.walk(written) if isinstance(n, E.Name) and n.id in self.lets}
        if error.col not in uses:
            return None
        try:
            E.typecheck(written, scope.extended(self.let_kinds))
        except E.ExprError as again:
            if again.col == error.col:
                return None
        return uses[error.col]

    def let_definitions(self) -> None:
        """`let: {u: where(bias is None, x, x + bias)}`: names for sub-expressions, each read by the
        expressions after it (lets below it, kernel, gradients, checks) as if written out there.
        A let reads the op's arguments and the lets above it, and is checked where it is written."""
        if "let" not in self.d:
            return
        value = self.d["let"]
        if not isinstance(value, dict) or not value:
            raise self.err(("let",), "'let' is a mapping from names to expressions, e.g. {u: where(bias is None, x, x + bias)}")
        kernel = self.d.get("kernel")
        if isinstance(kernel, dict) and ("cpu" in kernel or "cuda" in kernel):
            raise self.err(("let",), "'let' names sub-expressions of kernel expressions; a hand-written op has none", key=True)
        names = list(value)
        for name in names:  # all before any expression: YAML may have cut a flow mapping at commas into stray keys
            reason = self.let_name_taken(name)
            if reason:
                raise self.err(("let", name), f"can't name a let '{name}': {reason}{_cut_at_comma(value)}", key=True)
        for i, name in enumerate(names):
            path = ("let", name)
            scope = self.scope(elementwise=True, what=f"let '{name}'")
            scope.hints.update({later: f"'{later}' is a let below this one; a let reads only the lets above it"
                                for later in names[i + 1:]})
            scope.hints[name] = "a let can't read itself; it names one expression of the arguments and the lets above it"
            scope.hints.update({n: f"a let reads the op's arguments and the lets above it; '{n}' belongs to gradient formulas"
                                for n in ("grad", "result", *self.result_names())})
            e, kind = self.expression(path, scope)
            if kind not in (E.ELEM, E.MASK, E.NUM, E.INT, E.BOOL):
                raise self.err(path, "a let names a number or a condition, not a string; compare with the string instead "
                                     "(tanh_form: approximate == 'tanh')")
            self.lets[name] = e
            self.let_kinds[name] = kind

    def let_name_taken(self, name: Any) -> str:
        """Why ``name`` can't name a let ('' if it can)."""
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or keyword.iskeyword(name):
            return "a let's name is an identifier such as u or scaled_x"
        if self.schema.argument(name) is not None:
            return "an argument of the signature has that name"
        if name in FUNCTIONS:
            return f"{name}() is a function"
        if name in ("grad", "result", "out", *EXPRESSION_NAMES, *(r.name for r in self.schema.returns if r.name)) or name.startswith("grad_"):
            return "expressions already use that name (grad, grad_<output>, result, out, an output's name, acc, count, ties)"
        return ""

    def output_shapes(self) -> tuple[ShapeRule, ...]:
        """`shape: {out0: rule, out1: rule}`: one rule per output of a multi-output op ({} if one rule)."""
        value = self.d["shape"]
        if not isinstance(value, dict):
            return ()
        names = [r.name for r in self.schema.returns]
        if len(names) < 2:
            raise self.err(("shape",), "a mapping of shape rules is for ops with several outputs; give one rule, e.g. same(x)")
        self.check_output_names()
        self.check_keys(("shape",), value, tuple(names))
        missing = [n for n in names if n not in value]
        if missing:
            raise self.err(("shape",), f"give a shape rule for every output; missing: {', '.join(missing)}")
        return tuple(self.shape(("shape", n)) for n in names)

    def check_output_names(self) -> None:
        """Outputs of a multi-output op are named: the names become kernel parameters, `grad_<name>`
        and formula variables, so they must not collide with the arguments."""
        args = {a.name for a in self.schema.arguments}
        seen: set[str] = set()
        for r in self.schema.returns:
            if not r.name:
                raise self.err(("signature",), "name every output of a multi-output op, e.g. -> (Tensor y, Tensor mean)")
            clash = (r.name in args or r.name in seen or r.name in ("grad", "result", "out")
                     or f"grad_{r.name}" in args or r.name.startswith("grad_"))
            if clash:
                raise self.err(("signature",), f"output name '{r.name}' collides with an argument, another output or a generated "
                                               "name (grad, result, out, grad_<name>); rename it")
            seen.add(r.name)

    def shape(self, path: tuple) -> ShapeRule:
        value = self.get(path)
        tensors = [a.name for a in self.schema.tensor_inputs]
        if isinstance(value, list) or (isinstance(value, str) and value.strip().startswith("[")):
            return self.explicit_shape(path, value)
        if not isinstance(value, str):
            raise self.err(path, "'shape' must be same(x), broadcast(a, b, ...) or a list of sizes like [a.size(0), b.size(1)]")
        try:
            e = E.parse_expr(value)
        except E.ExprError as ex:
            raise SpecError(self.src.inner_location(path, ex.col), ex.message) from None
        if not isinstance(e, E.Call) or e.fn not in ("same", "broadcast", "reduce"):
            col = e.col if isinstance(e, E.Call) else 0
            fn = e.fn if isinstance(e, E.Call) else value
            hint = did_you_mean(fn, ("same", "broadcast", "reduce"))
            raise SpecError(self.src.inner_location(path, col),
                            f"unknown shape rule '{value}'; use same(x), broadcast(a, b, ...), reduce(x, dim, keepdim) or [size, ...]{hint}")
        if e.fn == "reduce":
            return self.reduce_shape(path, e, tensors)
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

    def reduce_shape(self, path: tuple, e: E.Call, tensors: list[str]) -> ShapeRule:
        usage = ("reduce(x, dim) or reduce(x, dim, keepdim): a tensor input, an int, int[] or int[]? attribute (or, for a hand-written "
                 "kernel, an integer such as -1), a bool attribute (or True/False)")
        if not 2 <= len(e.args) <= 3 or not isinstance(e.args[0], E.Name):
            raise SpecError(self.src.inner_location(path, e.col), f"use {usage}")
        x = e.args[0].id
        if x not in tensors:
            raise SpecError(self.src.inner_location(path, e.args[0].col),
                            f"reduce() reduces a tensor input; tensor inputs are: {', '.join(tensors) or 'none'}{did_you_mean(x, tuple(tensors))}")
        dim_arg = e.args[1]
        if isinstance(dim_arg, E.Name):
            dim = dim_arg.id
            arg = self.schema.argument(dim)
            if arg is None or arg.type.base != "int" or (arg.type.optional and not arg.type.is_list):
                raise SpecError(self.src.inner_location(path, dim_arg.col),
                                f"'{dim}' must be an 'int', 'int[]' or 'int[]?' argument of the signature, e.g. 'int[1] dim' "
                                "or 'int[1]? dim=None' (None reduces every dim)")
        else:
            literal = dim_arg.operand if isinstance(dim_arg, E.Unary) and dim_arg.op == "-" else dim_arg
            if not isinstance(literal, E.Num) or not isinstance(literal.value, int):
                raise SpecError(self.src.inner_location(path, dim_arg.col), f"use {usage}")
            dim = E.unparse(dim_arg)
        keepdim = None
        if len(e.args) == 3:
            k = e.args[2]
            if not isinstance(k, E.Name):
                raise SpecError(self.src.inner_location(path, k.col), f"use {usage}")
            keepdim = k.id
            arg = self.schema.argument(keepdim)
            if keepdim not in ("True", "False") and (arg is None or arg.type != Type("bool")):
                raise SpecError(self.src.inner_location(path, k.col),
                                f"'{keepdim}' must be a 'bool' argument of the signature, e.g. 'bool keepdim=False', or True/False")
        return ShapeRule("reduce", (x,), dim=dim, keepdim=keepdim)

    def explicit_shape(self, path: tuple, value: Any) -> ShapeRule:
        scope = self.scope(elementwise=False, what="shape rule", sizes_only=True)
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
            for node in E.walk(e):  # the op file, where checks run, has none of the kernels' math
                if isinstance(node, E.Call) and node.fn != "isfinite":
                    raise SpecError(self.src.inner_location(("checks", i), node.col),
                                    f"checks call no function but isfinite(); compare the values themselves, "
                                    f"e.g. 'scale < 100' rather than 'sqrt(scale) < 10'")
            out.append(Check(e))
        return tuple(out)

    def kernel(self, dtypes: tuple[DType, ...], shape: ShapeRule) -> Kernel:
        path = ("kernel",)
        value = self.d["kernel"]
        if not isinstance(value, dict) or not value:
            raise self.err(path, "'kernel' must be a mapping such as {pointwise: a + b}")
        self.check_keys(path, value, KERNEL_KEYS)
        if len(value) != 1 and set(value) != {"cpu", "cuda"}:
            raise self.err(path, "give one kernel kind: pointwise, reduce, or hand-written files (cpu, and optionally cuda)")
        if "cpu" in value or "cuda" in value:
            return self.custom_kernel(path, value, shape)
        if "reduce" in value or shape.kind == "reduce":
            return self.reduce_kernel(path, value, dtypes, shape)
        returns = self.schema.returns
        if any(r.type != Type("Tensor") for r in returns):
            raise self.err(("signature",), "a pointwise kernel returns 'Tensor' or named tensors, e.g. -> (Tensor x, Tensor y)")
        if len(returns) > 1:
            self.check_output_names()
        for a in self.schema.arguments:
            if a.is_tensor and (a.type.is_list or a.type.alias):
                raise SpecError(self.src.inner_location(("signature",), a.col),
                                f"pointwise kernels take 'Tensor' and 'Tensor?' inputs; '{a.type} {a.name}' is not supported by a pointwise kernel")
        if not self.schema.tensor_inputs:
            raise self.err(("signature",), "a pointwise op needs at least one Tensor input")
        first = self.schema.tensor_inputs[0]
        if first.type.optional:
            raise SpecError(self.src.inner_location(("signature",), first.col),
                            f"a pointwise op's first tensor input is a plain 'Tensor' (the output takes its device); "
                            f"'{first.type} {first.name}' may be None: put it after one")
        for a in self.schema.tensor_inputs:
            if a.type.optional and a.name in shape.tensors and shape.kind != "broadcast":
                raise self.err(("shape",), f"'{a.name}' may be None, so the output can't take its shape: use "
                                           f"broadcast(..., {a.name}), or same() of a plain Tensor")
        for d in dtypes:
            if not d.floating:
                raise self.err(("dtypes",), f"pointwise kernels compute in floating point; '{d.name}' is not supported (use floating dtypes)")
        if len(returns) > 1:
            return self.multi_pointwise(path + ("pointwise",))
        e, kind = self.expression(path + ("pointwise",), self.scope(elementwise=True, what="kernel expression"))
        if kind not in (E.ELEM, E.MASK):
            raise self.err(path + ("pointwise",), "the kernel expression must use at least one tensor input")
        if kind == E.MASK and "gradient" in self.d:
            raise self.err(("gradient",), "a comparison's output is bool and has no gradient; remove 'gradient'", key=True)
        return PointwiseKernel(e, bool_output=kind == E.MASK)

    def multi_pointwise(self, path: tuple) -> PointwiseKernel:
        """`pointwise: {x: r * cos(theta), y: r * sin(theta)}`: one expression per output, one pass."""
        names = tuple(r.name for r in self.schema.returns)
        value = self.get(path)
        if not isinstance(value, dict):
            raise self.err(path, f"an op with several outputs gives one expression per output: {{{names[0]}: ..., {names[1]}: ...}}")
        self.check_keys(path, value, names)
        missing = [n for n in names if n not in value]
        if missing:
            raise self.err(path, f"give an expression for every output; missing: {', '.join(missing)}")
        exprs = []
        for n in names:
            e, kind = self.expression(path + (n,), self.scope(elementwise=True, what="kernel expression"))
            if kind != E.ELEM:
                raise self.err(path + (n,), "each output's expression computes a number from at least one tensor input")
            exprs.append(e)
        return PointwiseKernel(exprs[0], more=tuple(exprs[1:]))

    def custom_files(self, path: tuple, value: dict) -> CustomKernel:
        if "cpu" not in value:
            raise self.err(path, "a hand-written kernel needs at least its CPU file: {cpu: <op>.cpu.cpp}")
        files = {}
        for device in ("cpu", "cuda"):
            if device not in value:
                continue
            name = value[device]
            p = path + (device,)
            if not isinstance(name, str) or not name.strip():
                raise self.err(p, f"'{device}' names a file next to the spec, e.g. {self.schema.name}.{device}{CUSTOM_KERNEL_SUFFIXES[device][0]}")
            rel = PurePosixPath(name)
            if rel.is_absolute() or ".." in rel.parts or "\\" in name or any(c in name for c in "\n\r\t\0\"'"):
                raise self.err(p, "a kernel file is a path relative to the spec's folder, inside it (no '..', no absolute paths)")
            if rel.suffix not in CUSTOM_KERNEL_SUFFIXES[device]:
                raise self.err(p, f"a {device} kernel file ends in {' or '.join(CUSTOM_KERNEL_SUFFIXES[device])}")
            files[device] = rel.as_posix()
        if files.get("cuda") == files["cpu"]:
            raise self.err(path + ("cuda",), "the CUDA kernel needs its own file")
        return CustomKernel(files["cpu"], files.get("cuda"))

    def custom_kernel(self, path: tuple, value: dict, shape: ShapeRule) -> CustomKernel:
        kernel = self.custom_files(path, value)
        if any(r.type != Type("Tensor") for r in self.schema.returns):
            raise self.err(("signature",), "a hand-written kernel returns 'Tensor' or named tensors, e.g. -> (Tensor y, Tensor rstd)")
        if len(self.schema.returns) > 1:
            self.check_output_names()
        elif (a := self.schema.argument("out")) is not None:
            raise self.argument_error(a, f"argument name 'out' is the hand-written kernel's output parameter "
                                         f"(void {self.schema.name}_cpu(const at::Tensor& out, ...)); rename it")
        plain = [a.name for a in self.schema.tensor_inputs if not (a.type.optional or a.type.is_list)]
        lists = [a.name for a in self.schema.tensor_inputs if a.type.is_list]
        same_list = shape.kind == "same" and shape.tensors[0] in lists
        if not plain and not same_list:
            raise self.err(("signature",), "a hand-written op needs a plain 'Tensor' input, or same(xs) over its 'Tensor[]', "
                                           "for its output's device and dtype")
        for a in self.schema.tensor_inputs:
            if a.type.alias:
                raise SpecError(self.src.inner_location(("signature",), a.col), f"'{a.type} {a.name}': in-place arguments are not supported")
        rules = [(("shape", r.name), rule) for r, rule in zip(self.schema.returns, self.rules)] or [(("shape",), shape)]
        for rule_path, rule in rules:
            for t in rule.tensors:
                if t not in plain and not (same_list and rule.kind == "same" and t == shape.tensors[0]):
                    raise self.err(rule_path, f"the shape rule can use plain 'Tensor' inputs, or same(xs) of a 'Tensor[]'; "
                                              f"'{t}' is optional or a list")
        if "reference" not in self.d:
            raise self.err(path, "a hand-written kernel needs a 'reference': the torch expression the tests compare it with", key=False)
        return kernel

    def reduce_kernel(self, path: tuple, value: dict, dtypes: tuple[DType, ...], shape: ShapeRule) -> ReduceKernel:
        if "reduce" not in value:
            raise self.err(path, "a reduce(...) shape rule needs a reduction kernel: kernel: {reduce: {map: x, combine: sum}}")
        if shape.kind != "reduce":
            raise self.err(("shape",), "a reduction kernel needs the shape rule reduce(x, dim, keepdim)")
        if shape.literal_dim or shape.keepdim in ("True", "False"):
            raise self.err(("shape",), "a reduction kernel reduces the dims its caller passes: name an 'int[] dim' and a "
                                       "'bool keepdim' argument in reduce(x, dim, keepdim)")
        path = path + ("reduce",)
        spec = value["reduce"]
        if not isinstance(spec, dict):
            raise self.err(path, "'reduce' is a mapping such as {map: x * x, combine: sum, post: sqrt(acc)}")
        self.check_keys(path, spec, REDUCE_KEYS)
        for required in ("map", "combine"):
            if required not in spec:
                raise self.err(path, f"missing required key '{required}' (e.g. {{map: x * x, combine: sum}})")
        (x,) = shape.tensors
        for a in self.schema.tensor_inputs:
            if a.name != x:
                raise SpecError(self.src.inner_location(("signature",), a.col),
                                f"a reduction reads one tensor input ('{x}'); '{a.name}' is not supported: compute the "
                                f"map of several tensors with a pointwise op and reduce its output, or write a hand-written "
                                f"kernel (kernel: {{cpu: <op>.cpu.cpp}})")
        if self.schema.arguments[0].name != x or any(a.type.optional or a.type.is_list or a.type.alias for a in self.schema.tensor_inputs):
            raise self.err(("signature",), f"a reduction's first argument is the plain 'Tensor {x}' it reduces")
        for d in dtypes:
            if not d.floating:
                raise self.err(("dtypes",), f"reductions accumulate in floating point; '{d.name}' is not supported (use floating dtypes)")
        scope = self.scope(elementwise=True, what="map expression")
        e, kind = self.expression(path + ("map",), scope)
        if kind != E.ELEM:
            raise self.err(path + ("map",), f"the map must compute a number from '{x}', e.g. x * x")
        combine, combine_expr, identity = self.combine(path, spec)
        post = None
        if "post" in spec:
            post_scope = self.scope(elementwise=True, what="post expression", extra={"acc": E.TENSOR})
            post_scope.names.pop(x)
            post_scope.hints["count"] = "the number of elements reduced is known to gradients only; for a mean, write combine: mean"
            post, kind = self.expression(path + ("post",), post_scope)
            if kind != E.ELEM or "acc" not in E.names_in(post):
                raise self.err(path + ("post",), "the post expression finishes the combined value 'acc', e.g. sqrt(acc)")
        returns = self.schema.returns
        indexed = len(returns) == 2
        if len(returns) not in (1, 2) or any(r.type != Type("Tensor") for r in returns):
            raise self.err(("signature",), "a reduction returns 'Tensor', or '(Tensor values, Tensor indices)' for max and min")
        if indexed:
            if combine not in INDEXED_COMBINES:
                raise self.err(path + ("combine",), f"only {' and '.join(INDEXED_COMBINES)} return indices; '{combine}' returns one Tensor")
            if post is not None:
                raise self.err(path + ("post",), "a reduction that returns indices can't have a post expression")
            dim = self.schema.argument(shape.dim or "")
            if dim is None or dim.type != Type("int"):
                raise self.err(("shape",), f"a reduction that returns indices reduces one dimension: declare '{shape.dim}' as 'int'")
        return ReduceKernel(e, combine, combine_expr, identity, post)

    def combine(self, path: tuple, spec: dict) -> tuple[str, E.Expr | None, float | None]:
        value = spec["combine"]
        if not isinstance(value, str):
            raise self.err(path + ("combine",), f"'combine' is one of {', '.join(COMBINES)} or an expression of a and b such as maximum(a, b)")
        if value in COMBINES:
            if "identity" in spec:
                raise self.err(path + ("identity",), f"'{value}' has a built-in identity; 'identity' is for a custom combine", key=True)
            return value, None, None
        if value.isidentifier():
            raise self.err(path + ("combine",), f"unknown combine '{value}'; use one of {', '.join(COMBINES)} or an expression of a and b"
                                                f"{did_you_mean(value, tuple(COMBINES))}")
        scope = E.Scope({"a": E.TENSOR, "b": E.TENSOR}, True, "combine expression")
        e, kind = self.expression(path + ("combine",), scope, lets=False)
        if kind != E.ELEM or E.names_in(e) != {"a", "b"}:
            raise self.err(path + ("combine",), "a custom combine folds two accumulators 'a' and 'b' into one, e.g. maximum(a, b)")
        if "identity" not in spec:
            raise self.err(path, "a custom combine needs an 'identity', its value over no elements (e.g. 0 for maximum(a, b) of "
                                 "absolute values, -inf for maximum(a, b))")
        v = spec["identity"]
        if isinstance(v, str) and v.strip() in ("inf", "-inf"):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise self.err(path + ("identity",), "'identity' is a number (or inf, -inf): the combine's neutral value")
        identity = float(v)
        return "custom", e, identity

    def gradient(self, kernel: Kernel) -> Gradient | None:
        if "gradient" not in self.d:
            return None
        path = ("gradient",)
        value = self.d["gradient"]
        if value is None or value is False or (isinstance(value, str) and value.lower() in ("none", "null", "no")):
            raise self.err(path, "to say the op has no gradient, leave 'gradient' out (backward through it then "
                                 "raises an error naming the op)")
        reduction = isinstance(kernel, ReduceKernel)
        if isinstance(kernel, CustomKernel):
            return self.custom_gradient(path, value, kernel)
        if value == "auto":
            if reduction and not reduction_derivable(kernel, len(self.schema.returns) == 2):
                raise self.err(path, f"'auto' derives gradients of sum, mean and logsumexp without post, and of max/min with indices; "
                                     f"write the formula for this reduction, e.g. {{{self.schema.arguments[0].name}: ...}} "
                                     "(grad and result are broadcast back over the reduced dims)")
            return Gradient(auto=True)
        if reduction and len(self.schema.returns) == 2:
            raise self.err(path, "the gradient of a reduction with indices goes to the chosen elements: write 'gradient: auto'")
        tensors = tuple(a.name for a in self.schema.tensor_inputs)
        if not isinstance(value, dict) or not value:
            raise self.err(path, "'gradient' must be 'auto' or a mapping from tensor inputs to formulas, e.g. {a: grad * weight}")
        extra = {n: E.TENSOR for n in self.result_names()}
        if reduction:
            extra["count"] = E.NUM  # the number of elements reduced into each output element
            extra["ties"] = E.TENSOR  # per output element: how many elements' map equals the result
        scope = self.scope(elementwise=True, what="gradient formula", extra=extra)
        self.check_gradient_keys(path, value, tensors)
        formulas = {}
        for name in value:
            e, kind = self.expression(path + (name,), scope)
            zero = isinstance(e, E.Num) and e.value == 0 and not reduction  # differentiable, its gradient zeros
            if kind != E.ELEM and not zero:
                hint = "" if reduction else " (write 0 for an input whose gradient is zero)"
                raise self.err(path + (name,), f"a gradient formula must be a per-element expression, usually involving grad{hint}")
            formulas[name] = e
        return Gradient(False, tuple((n, formulas[n]) for n in tensors if n in formulas))

    def custom_gradient(self, path: tuple, value: Any, forward: CustomKernel) -> Gradient:
        differentiable = tuple(a.name for a in self.schema.tensor_inputs)
        if not isinstance(value, dict) or not value:
            raise self.err(path, "a hand-written op's gradient is {kernel: {cpu: <op>_backward.cpu.cpp}} or a whole-tensor formula "
                                 "per input, e.g. {x: grad.mm(w)}; 'auto' needs a kernel expression")
        if "kernel" in value:
            if len(value) != 1:
                other = next(k for k in value if k != "kernel")
                raise self.err(path + (other,), "give either a backward kernel or formulas, not both", key=True)
            spec = value["kernel"]
            if not isinstance(spec, dict):
                raise self.err(path + ("kernel",), "'kernel' names the backward's files: {cpu: <op>_backward.cpu.cpp}")
            self.check_keys(path + ("kernel",), spec, ("cpu", "cuda"))
            files = self.custom_files(path + ("kernel",), spec)
            for a in self.schema.tensor_inputs:
                if a.type.is_list:
                    raise self.err(path + ("kernel",), f"a hand-written backward can't take the list '{a.name}'; give whole-tensor formulas instead")
            if set(files.files().values()) & set(forward.files().values()):
                raise self.err(path + ("kernel",), "the backward kernel needs its own files, apart from the forward's")
            return Gradient(False, kernel=files)
        lists = {a.name for a in self.schema.tensor_inputs if a.type.is_list or a.type.optional}
        names = {a.name: TENSOR_KIND for a in self.schema.tensor_inputs if a.name not in lists}
        names.update({a.name: _formula_kind(a) for a in self.schema.attributes if _formula_kind(a)})
        names.update(self.result_names())
        indexable = {a.name: (_FORMULA_KINDS[a.type.base], a.type.list_size)
                     for a in self.schema.attributes if a.name in list_attributes((a,)) and a.type.base != "bool"}
        self.check_gradient_keys(path, value, differentiable)
        formulas = {}
        for name in value:
            text = value[name]
            if isinstance(text, bool) or not isinstance(text, (str, int, float)):
                raise self.err(path + (name,), "a gradient formula is a string such as grad.mm(w)")
            own = dict(names, **({name: TENSOR_KIND} if name in lists else {}))  # a list input's formula sees one element
            try:
                formulas[name] = parse_formula(str(text), own, indexable)
            except FormulaError as e:
                raise SpecError(self.src.inner_location(path + (name,), e.col), e.message) from None
        return Gradient(False, tensor_formulas=tuple((n, formulas[n]) for n in differentiable if n in formulas))

    def result_names(self) -> dict[str, str]:
        """What a gradient formula reads of the outputs: `grad` and `result` for one output; for
        several, each output by name and its incoming gradient as `grad_<name>`."""
        if len(self.schema.returns) == 1:
            return {"grad": TENSOR_KIND, "result": TENSOR_KIND}
        names = {}
        for r in self.schema.returns:
            names[r.name] = TENSOR_KIND
            names[f"grad_{r.name}"] = TENSOR_KIND
        return names

    def autocast(self, dtypes: tuple[DType, ...]) -> str | None:
        if "autocast" not in self.d:
            return None
        path = ("autocast",)
        value = self.d["autocast"]
        policies = tuple(AUTOCAST)
        if not isinstance(value, str) or value not in AUTOCAST:
            hint = ""
            if isinstance(value, str):
                alias = AUTOCAST_ALIASES.get(value.lower())
                hint = f"; did you mean '{alias}'?" if alias else did_you_mean(value, policies)
            raise self.err(path, "'autocast' says what torch.autocast casts the floating inputs to: "
                                 + "; ".join(f"{p}: {what}" for p, (what, _) in AUTOCAST.items()) + hint)
        if not any(a.type.base == "Tensor" for a in self.schema.arguments):
            raise self.err(path, "'autocast' casts tensor inputs, and this op has none; remove it")
        names = {d.name for d in dtypes}
        missing = [n for n in AUTOCAST[value][1] if n not in names]
        if missing:
            raise self.err(path, f"autocast: {value} casts the inputs to {', '.join(missing)}, which 'dtypes' leaves out; "
                                 f"add {' and '.join(missing)} to 'dtypes'")
        return value

    def variants(self, kernel: Kernel, shape: ShapeRule) -> tuple[str, ...]:
        variants = self.listed_variants(kernel)
        fix = "drop the variant" if "variants" in self.d else "add `variants: []` for no out= overload"
        for a in self.schema.arguments:
            if "out" in variants and a.name == "out":
                problem = "is the out= overload's own output argument"
            elif variants and a.name in MUTATION_RESERVED:
                problem = (f"breaks torch.compile of the {' and '.join(VARIANT_NAMES[v] for v in variants)} overload "
                           f"(torch's auto_functionalized passes arguments by name next to a '{a.name}' parameter of its own)")
            else:
                continue
            raise self.argument_error(a, f"argument name '{a.name}' {problem}; rename it, e.g. '{self.schema.name}_{a.name}', or {fix}")
        return variants

    def check_argument_count(self, kernel: Kernel, gradient: Gradient | None, variants: tuple[str, ...]) -> None:
        """Every schema the op registers fits c10's dispatcher, which aborts the process loading a
        library with a schema of more than 64 arguments."""
        args, tensors, outputs = len(self.schema.arguments), len(self.schema.tensor_inputs), len(self.schema.returns)
        schemas = [("the op", args), ("its out= overload", args + 1 if "out" in variants else 0)]
        if gradient is not None and isinstance(kernel, PointwiseKernel):
            # each output's gradient, the saved inputs and outputs, the attributes, each input's shape
            schemas.append(("its backward op", 2 * outputs + 2 * tensors + (args - tensors)))
        if gradient is not None and gradient.kernel is not None:
            # each output's gradient, the arguments, the outputs, which gradients to compute
            schemas.append(("its backward op", 2 * outputs + args + 1))
        what, most = max(schemas, key=lambda s: s[1])
        if most > MAX_SCHEMA_ARGUMENTS:
            count = f"{args} arguments" + ("" if what == "the op" else f", which gives {what} up to {most}")
            raise self.err(("signature",), f"{self.schema.name} has {count}: more than the {MAX_SCHEMA_ARGUMENTS} PyTorch's "
                                           "dispatcher allows in one schema (a library with such a schema aborts when it "
                                           "loads); pass fewer arguments")

    def listed_variants(self, kernel: Kernel) -> tuple[str, ...]:
        default = ("out",) if len(self.schema.returns) == 1 else ()
        if "variants" not in self.d:
            return default
        path = ("variants",)
        value = self.d["variants"]
        if not isinstance(value, list):
            raise self.err(path, "'variants' is a list of extra overloads: [out], [inplace] or [out, inplace] ([] for none)")
        out = []
        for i, v in enumerate(value):
            if v not in VARIANTS:
                raise self.err(path + (i,), f"unknown variant {v!r}; use {' or '.join(VARIANTS)}{did_you_mean(str(v), VARIANTS)}")
            if v in out:
                raise self.err(path + (i,), f"'{v}' is listed twice")
            if len(self.schema.returns) != 1:
                raise self.err(path + (i,), f"the {v} variant is for ops with one output")
            if v == "inplace":
                first = self.schema.arguments[0]
                if not isinstance(kernel, PointwiseKernel) or kernel.bool_output or not first.is_tensor or first.kwarg_only:
                    raise self.err(path + (i,), "an in-place variant writes a pointwise op's result into its first argument, a plain "
                                                "Tensor of the result's dtype; this op has no such argument")
            out.append(v)
        return tuple(v for v in VARIANTS if v in out)

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

    def test(self, gradient: Gradient | None, reference: str | None) -> TestConfig:
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
        surrogate = self.surrogate(value.get("surrogate", []), gradient, reference)
        return TestConfig(tuple(sorted(out)), tuple(sorted(example, key=lambda e: order[e[0]])),
                          tuple(sorted(surrogate, key=order.__getitem__)))

    def surrogate(self, names: Any, gradient: Gradient | None, reference: str | None) -> list[str]:
        path = ("test", "surrogate")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            raise self.err(path, "'surrogate' lists tensor inputs whose gradient is not the kernel's derivative, e.g. [x]")
        given: list[str] = []
        if gradient is not None and gradient.kernel is not None:
            given = [a.name for a in self.schema.tensor_inputs]
        elif gradient is not None and not gradient.auto:
            given = [n for n, _ in gradient.formulas + gradient.tensor_formulas]
        for i, name in enumerate(names):
            if name not in given:
                raise self.err(path + (i,), f"'{name}' has no gradient formula of its own; a surrogate gradient is one the "
                                            f"'gradient' mapping gives{did_you_mean(name, tuple(given))}")
        if names and reference is None:
            raise self.err(path, "a surrogate gradient is checked against the reference's autograd: give a 'reference' whose "
                                 "backward is that surrogate, e.g. x + (torch.round(x) - x).detach() for a straight-through round")
        return names


_REFERENCE_NODES = (
    ast.Expression, ast.Name, ast.Load, ast.Attribute, ast.Call, ast.keyword, ast.Constant, ast.BinOp, ast.UnaryOp,
    ast.Compare, ast.BoolOp, ast.IfExp, ast.List, ast.Tuple, ast.Subscript, ast.Slice,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub, ast.UAdd, ast.Not,
    ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.And, ast.Or,
)


def _format_float(value: float) -> float | str:
    return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _cut_at_comma(mapping: dict) -> str:
    """A hint when a YAML flow mapping (`{map: where(x > 0, 1, 0)}`) split an expression at its
    commas, leaving an unclosed call in one value and the rest as keys."""
    for key, value in mapping.items():
        if isinstance(value, str) and value.count("(") > value.count(")"):
            return (f"; the expression of '{key}' was cut at a comma: in a {{...}} mapping YAML splits at commas, so quote "
                    f"it ({key}: \"{value}, ...)\") or write the mapping as indented lines")
    return ""


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
