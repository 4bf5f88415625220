"""The functions a spec expression may call: one table, shared by every backend.

Each C++ backend emits ``opgen::<name>(...)``; ``templates/csrc/opgen_math.h.j2`` defines an
overload for scalars and one for ``at::vec::Vectorized``, ``templates/csrc/opgen_math_cuda.cuh.j2``
a host/device one for CUDA kernels. ``torch`` is the float64
reference used by tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    name: str
    arity: int
    torch: str  # Python reference, formatted with the argument expressions
    doc: str
    # Computed as a polynomial series in ATen's vector math (Sleef and the like), not in one
    # instruction: its cost grows with the elements per vector, so a loop that calls it is bound
    # by arithmetic, not memory, and wider vectors (AVX-512) pay.
    series: bool = False
    # Where tests draw an input passed straight to it (its first argument) when the spec gives no
    # test range: inside the function's domain, so references and gradients are finite.
    test_range: tuple[float, float] | None = None


def _f(name: str, arity: int, torch: str, doc: str, series: bool = False,
       test_range: tuple[float, float] | None = None) -> Function:
    return Function(name, arity, torch, doc, series, test_range)


POSITIVE = (0.1, 3.0)


FUNCTIONS: dict[str, Function] = {
    f.name: f
    for f in (
        _f("exp", 1, "torch.exp({0})", "e to the power x", series=True),
        _f("log", 1, "torch.log({0})", "natural logarithm", series=True, test_range=POSITIVE),
        _f("log1p", 1, "torch.log1p({0})", "log(1 + x), accurate near 0", series=True, test_range=(-0.9, 3.0)),
        _f("expm1", 1, "torch.expm1({0})", "exp(x) - 1, accurate near 0", series=True),
        _f("sqrt", 1, "torch.sqrt({0})", "square root", test_range=POSITIVE),
        _f("rsqrt", 1, "torch.rsqrt({0})", "1 / sqrt(x)", test_range=POSITIVE),
        _f("sin", 1, "torch.sin({0})", "sine", series=True),
        _f("cos", 1, "torch.cos({0})", "cosine", series=True),
        _f("tan", 1, "torch.tan({0})", "tangent", series=True),
        _f("tanh", 1, "torch.tanh({0})", "hyperbolic tangent", series=True),
        _f("sigmoid", 1, "torch.sigmoid({0})", "1 / (1 + exp(-x))", series=True),
        _f("erf", 1, "torch.erf({0})", "error function", series=True),
        _f("erfc", 1, "torch.erfc({0})", "1 - erf(x), accurate where erf(x) is near 1", series=True),
        _f("exp2", 1, "torch.exp2({0})", "2 to the power x", series=True),
        _f("log2", 1, "torch.log2({0})", "base-2 logarithm", series=True, test_range=POSITIVE),
        _f("log10", 1, "torch.log10({0})", "base-10 logarithm", series=True, test_range=POSITIVE),
        _f("asin", 1, "torch.asin({0})", "inverse sine", series=True, test_range=(-0.9, 0.9)),
        _f("acos", 1, "torch.acos({0})", "inverse cosine", series=True, test_range=(-0.9, 0.9)),
        _f("atan", 1, "torch.atan({0})", "inverse tangent", series=True),
        _f("sinh", 1, "torch.sinh({0})", "hyperbolic sine", series=True),
        _f("cosh", 1, "torch.cosh({0})", "hyperbolic cosine", series=True),
        _f("atan2", 2, "torch.atan2({0}, {1})", "atan2(y, x): the angle of the point (x, y), in [-pi, pi]", series=True),
        _f("hypot", 2, "torch.hypot({0}, {1})", "sqrt(a * a + b * b) without overflow or underflow", series=True),
        _f("abs", 1, "torch.abs({0})", "absolute value"),
        _f("sign", 1, "torch.sign({0})", "-1, 0 or 1 (0 for NaN, as torch.sign)"),
        _f("floor", 1, "torch.floor({0})", "round down"),
        _f("ceil", 1, "torch.ceil({0})", "round up"),
        _f("trunc", 1, "torch.trunc({0})", "round toward zero"),
        _f("round", 1, "torch.round({0})", "round to the nearest integer, halves to even (as torch.round)"),
        _f("fmod", 2, "torch.fmod({0}, {1})", "remainder of a / b rounded toward zero: the sign of a (C's fmod)", series=True),
        _f("remainder", 2, "torch.remainder({0}, {1})",
           "remainder of a / b rounded down: the sign of b (Python's %, torch.remainder)", series=True),
        _f("minimum", 2, "torch.minimum({0}, {1})", "elementwise minimum; NaN propagates"),
        _f("maximum", 2, "torch.maximum({0}, {1})", "elementwise maximum; NaN propagates"),
        _f("pow", 2, "torch.pow({0}, {1})", "x to the power y", series=True, test_range=POSITIVE),
        _f("clamp", 3, "torch.clamp({0}, {1}, {2})", "clamp(x, lo, hi) = minimum(maximum(x, lo), hi)"),
        _f("where", 3, "torch.where({0}, {1}, {2})", "where(cond, a, b): a where cond holds, else b"),
        _f("isfinite", 1, "torch.isfinite({0})", "true unless x is NaN or infinite (a condition)"),
    )
}

# Tensor methods allowed in checks and shape rules.
METHODS = {"size": 1, "dim": 0, "numel": 0}
