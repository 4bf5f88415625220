"""Helpers for testing generated ops: valid attribute values, inputs, references, tolerances.

Used by the project's tests and by generated tests; only this module imports torch eagerly.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import math
import operator
from typing import Any, Callable

from . import expr as E
from .functions import FUNCTIONS, POSITIVE
from .model import OpSpec, PointwiseKernel, ReduceKernel

# Tolerances for comparing an op's output with its float64 reference, by output dtype.
# Kernels compute half/bfloat16 in float32 and round once, so the bound is the dtype's
# rounding (2^-11, 2^-8 relative) plus float32 error in the math.
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
}

_CANDIDATES = {
    "float": (1.0, 0.5, 2.0, -0.5, 0.0, 3.0, -2.0),
    "Scalar": (1.0, 0.5, 2.0, -0.5, 0.0),
    "int": (1, 2, 0, 3, -1),
    "SymInt": (1, 2, 0, 3),
    "bool": (True, False),
}


def evaluate(e: E.Expr, env: dict[str, Any]) -> Any:
    """Evaluates an attribute-only expression (a check without sizes) in Python."""
    return compile_condition(e)(env)


_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul,
           "/": lambda a, b: a / b if b else math.inf, "//": lambda a, b: a // b if b else 0,
           "**": lambda a, b: a ** b if (a or b >= 0) else math.inf}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


def compile_condition(e: E.Expr) -> Callable[[dict[str, Any]], Any]:
    """An attribute-only expression as a Python function of the attribute values, for the many
    assignments the test emitters try (far faster than walking the tree for each)."""
    if isinstance(e, (E.Num, E.Str)):
        value = e.value
        return lambda env: value
    if isinstance(e, E.Name):
        if e.id in ("True", "False"):
            flag = e.id == "True"
            return lambda env: flag
        name = e.id
        return lambda env: env.get(name)
    if isinstance(e, E.Unary):
        operand = compile_condition(e.operand)
        return (lambda env: not operand(env)) if e.op == "not" else (lambda env: -operand(env))
    if isinstance(e, (E.Binary, E.Compare)):
        fn = (_BINARY if isinstance(e, E.Binary) else _COMPARE)[e.op]
        lhs, rhs = compile_condition(e.lhs), compile_condition(e.rhs)
        return lambda env: fn(lhs(env), rhs(env))
    if isinstance(e, E.BoolOp):
        values = [compile_condition(v) for v in e.values]
        combine = all if e.op == "and" else any  # short-circuit, as the C++ checks: `eps is None or eps > 0`
        return lambda env: combine(v(env) for v in values)
    if isinstance(e, E.IsNone):
        name = e.operand.id
        return lambda env: env.get(name) is None
    if isinstance(e, E.Index):
        name, i = e.obj.id, e.index
        return lambda env: env.get(name)[i]
    if isinstance(e, E.In):
        operand, options = compile_condition(e.operand), [compile_condition(o) for o in e.options]
        return lambda env: operand(env) in [o(env) for o in options]
    if isinstance(e, E.Call) and e.fn == "isfinite":
        arg = compile_condition(e.args[0])
        return lambda env: math.isfinite(arg(env))
    raise ValueError(f"cannot evaluate {E.unparse(e)} without tensors")


def attribute_checks(op: OpSpec) -> list[E.Expr]:
    return [c.expr for c in op.checks if not any(isinstance(n, E.Method) for n in E.walk(c.expr))]


def _choices(op: OpSpec, name: str) -> list[Any]:
    arg = op.schema.argument(name)
    assert arg is not None
    options: list[Any] = []
    if arg.has_default:
        sized = arg.type.is_list and arg.type.list_size is not None
        # `int[2] k=1` is [1, 1], as the dispatcher expands it: references read k[0]
        options.append((arg.default,) * arg.type.list_size if sized and isinstance(arg.default, (int, float)) else arg.default)
    if arg.type.base == "str":
        for c in op.checks:
            for n in E.walk(c.expr):
                if isinstance(n, E.In) and isinstance(n.operand, E.Name) and n.operand.id == name:
                    options += [o.value for o in n.options]
                if isinstance(n, E.Compare) and isinstance(n.lhs, E.Name) and n.lhs.id == name and isinstance(n.rhs, E.Str):
                    options.append(n.rhs.value)
    elif name == op.shape.dim:  # a reduction's dims: drawn per shape by the strategies
        options += [(), (0,)] if arg.type.is_list else [0]
    else:
        if arg.type.optional:  # None, then values: kernels must handle both
            options.append(None)
        if arg.type.is_list:  # elements that differ, so a check comparing two of them can pass and fail
            values, n = _CANDIDATES.get(arg.type.base, ()), arg.type.list_size or 1
            options += [tuple(values[(i + k) % len(values)] for i in range(n)) for k in range(2)] if values else []
        else:
            options += list(_CANDIDATES.get(arg.type.base, ()))
    seen: list[Any] = []
    for o in options:
        if o not in seen:
            seen.append(o)
    return seen


def attribute_sets(op: OpSpec, limit: int = 4) -> list[dict[str, Any]]:
    """Up to ``limit`` attribute assignments that pass the op's checks: the first choices (the
    defaults) first, then each attribute's other choices one at a time, then combinations. (The
    product alone would vary only the last attributes within the limit.)"""
    names = [a.name for a in op.attributes]
    choices = [_choices(op, n) for n in names]
    if not all(choices):  # an attribute nothing suggests a value for (a str without default or check)
        return []
    checks = [compile_condition(c) for c in attribute_checks(op)]
    firsts = tuple(c[0] for c in choices)
    one_at_a_time = (firsts[:i] + (v,) + firsts[i + 1:] for i, c in enumerate(choices) for v in c[1:])
    out: list[dict[str, Any]] = []
    for values in itertools.chain([firsts] if names else [()], one_at_a_time, itertools.product(*choices)):
        env = dict(zip(names, values))
        if env not in out and all(c(env) for c in checks):
            out.append(env)
            if len(out) >= limit:
                break
    return out


def invalid_attribute_sets(op: OpSpec) -> list[tuple[dict[str, Any], str]]:
    """For each attribute-only check, one assignment that violates it (and passes the others)."""
    names = [a.name for a in op.attributes]
    checks = attribute_checks(op)
    compiled = [compile_condition(c) for c in checks]
    # An attribute that no check reads can't change an outcome, so the first assignment found is
    # the same with only its first candidate, and the search is the product of the others only.
    read = set().union(*(E.names_in(c) for c in checks))
    candidates = [(_choices(op, n) + _invalid_extras(op, n))[: None if n in read else 1] for n in names]
    out = []
    for i, c in enumerate(compiled):
        others = compiled[:i] + compiled[i + 1:]
        for values in itertools.product(*candidates):
            env = dict(zip(names, values))
            if not c(env) and all(o(env) for o in others):
                out.append((env, E.unparse(checks[i])))
                break
    return out


def call_args(op: OpSpec, tensors: dict, attrs: dict) -> tuple[tuple, dict]:
    """Positional and keyword arguments of a call, in the signature's order and kinds."""
    args, kwargs = [], {}
    for a in op.schema.arguments:
        value = tensors[a.name] if a.is_tensor else attrs[a.name]
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def load_op(project, name: str) -> OpSpec:
    """The validated spec of op ``name`` in ``project`` (for generated tests)."""
    from .config import load_config
    from .library import load_library

    import sys

    config = load_config(project)
    python_dir = str(config.output_dir / "python")  # the references and the typed API
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    return next(op for op in load_library(config).ops if op.name == name)


def _invalid_extras(op: OpSpec, name: str) -> list[Any]:
    """Values worth trying only to violate a check: a string no check allows, non-finite floats, a negative size."""
    t = op.schema.argument(name).type
    if t.is_list:
        bad = {"float": [math.inf, math.nan, -1.0], "int": [0, -1], "SymInt": [-1]}.get(t.base, [])
        return [(v,) * (t.list_size or 1) for v in bad]
    return {"str": ["__bad__"], "float": [math.inf, math.nan], "Scalar": [math.inf], "SymInt": [-1]}.get(t.base, [])


def reference_fn(namespace: str, op: OpSpec):
    return getattr(importlib.import_module(f"{namespace}._references"), f"{op.name}_reference")


def input_range(op: OpSpec, name: str) -> tuple[float, float]:
    """The spec's test range for the input; else [-3, 3] narrowed to the domains of the functions
    the kernel passes it to directly (asin(x): [-0.9, 0.9]; log(x), sqrt(x), x ** 0.5: [0.1, 3])."""
    return op.test.range(name) or domain_range(op, name) or (-3.0, 3.0)


@functools.lru_cache(maxsize=1024)  # asked for every tensor a test makes; the spec never changes
def domain_range(op: OpSpec, name: str) -> tuple[float, float] | None:
    if isinstance(op.kernel, PointwiseKernel):
        exprs = op.kernel.exprs
    elif isinstance(op.kernel, ReduceKernel):
        exprs = (op.kernel.map,)
    else:
        return None
    ranges = []
    for node in (n for e in exprs for n in E.walk(e)):
        if isinstance(node, E.Call):
            first, rest = node.args[0], node.args[1:]
            test_range = FUNCTIONS[node.fn].test_range
        elif isinstance(node, E.Binary) and node.op == "**":
            first, rest, test_range = node.lhs, (node.rhs,), POSITIVE
        else:
            continue
        if test_range is None or not (isinstance(first, E.Name) and first.id == name):
            continue
        if _integer_power(node, rest):  # x ** 2, pow(x, 3): any sign
            continue
        ranges.append(test_range)
    if not ranges:
        return None
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    return (lo, hi) if lo < hi else None


def _integer_power(node: E.Expr, rest: tuple[E.Expr, ...]) -> bool:
    is_power = (isinstance(node, E.Binary) and node.op == "**") or (isinstance(node, E.Call) and node.fn == "pow")
    return is_power and isinstance(rest[0], E.Num) and float(rest[0].value).is_integer()


def make_tensor(op: OpSpec, name: str, shape, dtype, generator, layout: str = "contiguous", device="cpu"):
    """A tensor for input ``name``: values from the spec's test range, in the requested layout.
    Values are drawn on the CPU, so every device gets the same ones."""
    import torch

    lo, hi = input_range(op, name)
    shape = tuple(shape)

    def draw(base_shape):
        base = torch.rand(base_shape, generator=generator, dtype=torch.float64) * (hi - lo) + lo
        return base.to(device=device, dtype=dtype)

    if layout == "transposed" and len(shape) >= 2:
        return draw(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
    if layout == "sliced" and len(shape) >= 1:
        return draw(shape[:-1] + (shape[-1] * 2,))[..., ::2]
    if layout == "expanded" and len(shape) >= 1:
        return draw((1,) + shape[1:]).expand(shape)
    return draw(shape)


def condition_tensors(op: OpSpec, shape, dtype, generator, layout: str = "contiguous") -> dict:
    """Inputs for a comparison (bool output), by name: values from the test ranges, where every
    third element of each later input equals the first input's (ties, where conditions such as
    `a <= b` or `abs(a - b) <= tol` flip) and every seventh element of each input is NaN, +inf or
    -inf in turn, then put into the requested layout as `make_tensor` does."""
    import torch

    shape = tuple(shape)
    flat = [make_tensor(op, a.name, (math.prod(shape),), torch.float64, generator) for a in op.tensor_inputs]
    for t in flat[1:]:
        t[::3] = flat[0][::3]
    specials = torch.tensor([math.nan, math.inf, -math.inf], dtype=torch.float64)
    for k, t in enumerate(flat):
        positions = torch.arange(k, max(k, t.numel()), 7)
        t[positions] = specials[(positions // 7 + k) % 3]
    tensors = {}
    for a, t in zip(op.tensor_inputs, flat):
        t = t.reshape(shape).to(dtype)
        if layout == "transposed" and len(shape) >= 2:
            t = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif layout == "sliced" and len(shape) >= 1:
            wide = torch.zeros(shape[:-1] + (shape[-1] * 2,), dtype=dtype)
            wide[..., ::2] = t
            t = wide[..., ::2]
        elif layout == "expanded" and len(shape) >= 1:
            t = t[:1].expand(shape)
        tensors[a.name] = t
    return tensors


def assert_close_to_reference(actual, expected64, dtype_name: str, what: str) -> None:
    import torch

    atol, rtol = TOLERANCES[dtype_name]
    torch.testing.assert_close(actual.to(torch.float64), expected64.to(torch.float64), atol=atol, rtol=rtol,
                               equal_nan=True, msg=lambda m: f"{what}: {m}")


def runnable_cpu_capabilities() -> list[str]:
    """The kernel variants this CPU can run (ATEN_CPU_CAPABILITY can select any of them), in
    ATen's names: DEFAULT, then AVX2 and AVX512 where torch found them."""
    import torch

    from .capabilities import CPU_CAPABILITIES

    best = torch.backends.cpu.get_cpu_capability()
    return list(CPU_CAPABILITIES[:CPU_CAPABILITIES.index(best) + 1]) if best in CPU_CAPABILITIES else ["DEFAULT"]
