"""Symbolic differentiation of the expression IR, and the gradient formulas of an op.

``derivative(e, x)`` is d e / d x by the chain rule over the IR, with ATen's subgradient
conventions: ``abs`` uses sign(x) (0 at 0), ``minimum``/``maximum`` split the gradient evenly
on ties, ``clamp`` passes it where ``lo <= x <= hi`` (to ``hi`` when ``lo > hi``), ``a ** b``
and ``atan2`` give 0 where the calculus gives 0 * inf (a zero base or exponent, the origin),
comparisons, ``sign`` and the rounding functions have zero derivative, ``fmod``/``remainder``
pass ``grad`` to ``a`` and ``-q * grad`` to ``b``. Results are simplified (constants folded, zeros dropped) so derived formulas read like
hand-written ones.
"""

from __future__ import annotations

import dataclasses
import math

from . import expr as E
from .model import OpSpec, ReduceKernel

ZERO, ONE = E.Num(0), E.Num(1)


def _is(e: E.Expr, v: float) -> bool:
    return isinstance(e, E.Num) and e.value == v


def add(a: E.Expr, b: E.Expr) -> E.Expr:
    if _is(a, 0):
        return b
    if _is(b, 0):
        return a
    if isinstance(a, E.Num) and isinstance(b, E.Num):
        return E.Num(a.value + b.value)
    if isinstance(b, E.Unary) and b.op == "-":
        return sub(a, b.operand)
    return E.Binary("+", a, b)


def sub(a: E.Expr, b: E.Expr) -> E.Expr:
    if _is(b, 0):
        return a
    if _is(a, 0):
        return neg(b)
    if isinstance(a, E.Num) and isinstance(b, E.Num):
        return E.Num(a.value - b.value)
    return E.Binary("-", a, b)


def mul(a: E.Expr, b: E.Expr) -> E.Expr:
    if _is(a, 0) or _is(b, 0):
        return ZERO
    if _is(a, 1):
        return b
    if _is(b, 1):
        return a
    if _is(a, -1):
        return neg(b)
    if _is(b, -1):
        return neg(a)
    if isinstance(a, E.Num) and isinstance(b, E.Num):
        return E.Num(a.value * b.value)
    return E.Binary("*", a, b)


def div(a: E.Expr, b: E.Expr) -> E.Expr:
    if _is(a, 0):
        return ZERO
    if _is(b, 1):
        return a
    return E.Binary("/", a, b)


def neg(a: E.Expr) -> E.Expr:
    if isinstance(a, E.Num):
        return E.Num(-a.value)
    if isinstance(a, E.Unary) and a.op == "-":
        return a.operand
    return E.Unary("-", a)


def where(c: E.Expr, a: E.Expr, b: E.Expr) -> E.Expr:
    if a == b:
        return a
    return E.Call("where", (c, a, b))


def call(fn: str, *args: E.Expr) -> E.Expr:
    return E.Call(fn, tuple(args))


def depends_on(e: E.Expr, name: str) -> bool:
    return name in E.names_in(e)


def derivative(e: E.Expr, x: str) -> E.Expr:
    """d e / d x, where x names a tensor input (element-wise)."""
    if not depends_on(e, x):
        return ZERO
    if isinstance(e, E.Name):
        return ONE
    if _is_condition(e):  # only ever where()'s first argument, which selects and has no derivative
        return ZERO
    if isinstance(e, E.Unary):
        return neg(derivative(e.operand, x))
    if isinstance(e, E.Binary):
        a, b = e.lhs, e.rhs
        da, db = derivative(a, x), derivative(b, x)
        if e.op == "+":
            return add(da, db)
        if e.op == "-":
            return sub(da, db)
        if e.op == "*":
            return add(mul(da, b), mul(a, db))
        if e.op == "/":
            if _is(db, 0):
                return div(da, b)
            return div(sub(mul(da, b), mul(a, db)), mul(b, b))
        if e.op == "**":
            return _power(a, b, da, db)
    if isinstance(e, E.Call):
        return _call(e, x)
    raise ValueError(f"cannot differentiate {E.unparse(e)}")


def _is_condition(e: E.Expr) -> bool:
    return (isinstance(e, (E.Compare, E.BoolOp, E.In, E.IsNone)) or (isinstance(e, E.Unary) and e.op == "not")
            or (isinstance(e, E.Call) and e.fn == "isfinite"))


def _tests_none(c: E.Expr, x: str) -> bool | None:
    """Whether ``c`` holds when ``x`` (a Tensor? input) is given: False for `x is None`, True for
    `x is not None`; None for any other condition."""
    if isinstance(c, E.IsNone) and c.operand.id == x:
        return False
    if isinstance(c, E.Unary) and c.op == "not" and isinstance(c.operand, E.IsNone) and c.operand.operand.id == x:
        return True
    return None


def _power(a: E.Expr, b: E.Expr, da: E.Expr, db: E.Expr) -> E.Expr:
    """d(a ** b) with torch's conventions at a zero base, where the calculus is 0 * inf: the
    base's term is 0 where b == 0, the exponent's where a == 0 and b >= 0 (torch's
    pow_backward_self / pow_backward_exponent), not NaN."""
    if isinstance(b, E.Num):
        n = b.value
        if n == 0:
            return ZERO
        lowered = ONE if n == 1 else (a if n == 2 else E.Binary("**", a, E.Num(n - 1)))
        return mul(mul(E.Num(n), lowered), da)
    base = ZERO if _is(da, 0) else mul(where(E.Compare("==", b, ZERO), ZERO, mul(b, E.Binary("**", a, sub(b, ONE)))), da)
    if _is(db, 0):
        return base
    at_zero = E.BoolOp("and", (E.Compare("==", a, ZERO), E.Compare(">=", b, ZERO)))
    exponent = mul(where(at_zero, ZERO, mul(E.Binary("**", a, b), call("log", a))), db)
    return add(base, exponent)


def _call(e: E.Call, x: str) -> E.Expr:
    args = e.args
    d = [derivative(a, x) for a in args]
    u = args[0]
    du = d[0]
    fn = e.fn
    if fn == "exp":
        return mul(e, du)
    if fn == "log":
        return div(du, u)
    if fn == "log1p":
        if (v := E.softplus_argument(e)) is not None:  # exp(v) / (1 + exp(v)) is inf / inf for large v
            return mul(call("sigmoid", v), derivative(v, x))
        return div(du, add(ONE, u))
    if fn == "expm1":
        return mul(call("exp", u), du)
    if fn == "sqrt":
        return div(du, mul(E.Num(2), e))
    if fn == "rsqrt":
        return mul(mul(E.Num(-0.5), mul(mul(e, e), e)), du)  # torch's form: +inf, not -inf, at -0
    if fn == "sin":
        return mul(call("cos", u), du)
    if fn == "cos":
        return neg(mul(call("sin", u), du))
    if fn == "tan":
        return mul(add(ONE, mul(e, e)), du)
    if fn == "tanh":
        return mul(sub(ONE, mul(e, e)), du)
    if fn == "sigmoid":
        return mul(mul(e, sub(ONE, e)), du)
    if fn == "erf":
        return mul(mul(E.Num(2 / math.sqrt(math.pi)), call("exp", neg(mul(u, u)))), du)
    if fn == "erfc":
        return mul(mul(E.Num(-2 / math.sqrt(math.pi)), call("exp", neg(mul(u, u)))), du)
    if fn == "exp2":
        return mul(mul(e, E.Num(math.log(2))), du)
    if fn in ("log2", "log10"):
        return div(du, mul(u, E.Num(math.log(2 if fn == "log2" else 10))))
    if fn in ("asin", "acos"):
        d_asin = mul(call("rsqrt", sub(ONE, mul(u, u))), du)
        return d_asin if fn == "asin" else neg(d_asin)
    if fn == "atan":
        return div(du, add(ONE, mul(u, u)))
    if fn == "sinh":
        return mul(call("cosh", u), du)
    if fn == "cosh":
        return mul(call("sinh", u), du)
    if fn == "atan2":  # atan2(y, x)
        y, x_ = args
        # times 1 / (x^2 + y^2), or 0 where that is 0 (at the origin, and below it: torch's atan2_backward)
        norm = add(mul(x_, x_), mul(y, y))
        return mul(sub(mul(x_, d[0]), mul(y, d[1])), where(E.Compare("==", norm, ZERO), ZERO, div(ONE, norm)))
    if fn == "hypot":
        a, b = args
        return div(add(mul(a, d[0]), mul(b, d[1])), e)
    if fn in ("fmod", "remainder"):  # a - q * b with q = trunc(a / b) or floor(a / b), piecewise constant
        a, b = args
        return sub(d[0], mul(call("trunc" if fn == "fmod" else "floor", div(a, b)), d[1]))
    if fn == "abs":
        return mul(call("sign", u), du)
    if fn in ("floor", "ceil", "trunc", "round", "sign"):
        return ZERO
    if fn in ("minimum", "maximum"):
        a, b = args
        wins = "<" if fn == "minimum" else ">"
        share_a = where(E.Compare(wins, a, b), ONE, where(E.Compare("==", a, b), E.Num(0.5), ZERO))
        share_b = where(E.Compare(wins, b, a), ONE, where(E.Compare("==", a, b), E.Num(0.5), ZERO))
        return add(mul(share_a, d[0]), mul(share_b, d[1]))
    if fn == "clamp":
        v, lo, hi = args
        inside = where(E.Compare(">=", v, lo), where(E.Compare("<=", v, hi), d[0], ZERO), ZERO)
        # lo > hi gives hi everywhere, so hi gets the gradient (torch's clamp_backward_min_max)
        below = ZERO if _is(d[1], 0) else where(E.BoolOp("and", (E.Compare("<", v, lo), E.Compare("<", lo, hi))), d[1], ZERO)
        above = ZERO if _is(d[2], 0) else where(E.BoolOp("or", (E.Compare(">", v, hi), E.Compare("<", hi, lo))), d[2], ZERO)
        return add(add(inside, below), above)
    if fn == "where":
        # x's gradient exists only where x is given: `where(x is None, ...)` is its second branch
        given = _tests_none(args[0], x)
        if given is not None:
            return d[1] if given else d[2]
        return where(args[0], d[1], d[2])
    if fn == "pow":
        return _power(args[0], args[1], d[0], d[1])
    raise ValueError(f"no derivative for {fn}()")


def derived_formulas(op: OpSpec) -> tuple[tuple[str, E.Expr], ...]:
    """grad * d(kernel)/d(input) for every tensor input; with several outputs, the sum over outputs
    of grad_<output> * d(output)/d(input). An input the kernel reads only through rounding
    functions or conditions gets 0: it is differentiable, its gradient zeros (as torch.round's)."""
    grads = [E.Name(g) for g in op.grad_names]
    out = []
    for a in op.tensor_inputs:
        f: E.Expr = ZERO
        for grad, e in zip(grads, op.kernel.exprs):
            f = add(f, mul(grad, derivative(e, a.name)))
        out.append((a.name, f))
    return tuple(out)


def substitute(e: E.Expr, names: dict[str, E.Expr]) -> E.Expr:
    """``e`` with the given names replaced, simplified like derived formulas (so a name replaced
    by 0 drops the terms it multiplies)."""
    if isinstance(e, E.Name):
        return names.get(e.id, e)
    if isinstance(e, E.Binary) and e.op in ("+", "-", "*", "/"):
        simplify = {"+": add, "-": sub, "*": mul, "/": div}[e.op]
        return simplify(substitute(e.lhs, names), substitute(e.rhs, names))
    if isinstance(e, E.Unary) and e.op == "-":
        return neg(substitute(e.operand, names))
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            changes[f.name] = tuple(substitute(x, names) for x in v)
        elif dataclasses.is_dataclass(v):
            changes[f.name] = substitute(v, names)
    return dataclasses.replace(e, **changes)


def given_flag(grad: str) -> str:
    """The name of the bool that says whether an incoming gradient was given (`__` is reserved)."""
    return f"{grad}__given"


def gradient_pieces(f: E.Expr, grads: tuple[str, ...]) -> tuple[bool, tuple[tuple[str, int, E.Expr], ...]]:
    """``f`` as a signed sum of one piece per incoming gradient, each piece reading only that one:
    (exact, ((grad, sign, piece), ...)). Exact when every additive term of ``f`` reads exactly one
    gradient (every derived formula, `grad_y * x - grad_x * y`): the pieces are those terms, and
    their sum is ``f`` itself. Otherwise (`(grad_x + grad_y) * e`) each piece is ``f`` with the
    other gradients 0, which sum to ``f`` because gradient formulas are linear in the gradients."""
    terms = list(_additive_terms(f, 1))
    reads = [[g for g in grads if depends_on(t, g)] for _, t in terms]
    if all(len(r) == 1 for r in reads):
        grouped: dict[str, list[tuple[int, E.Expr]]] = {}
        for (sign, t), (g,) in zip(terms, reads):
            grouped.setdefault(g, []).append((sign, t))
        pieces = []
        for g, ts in grouped.items():
            lead = ts[0][0]
            piece: E.Expr = ZERO
            for sign, t in ts:
                piece = add(piece, t) if sign == lead else sub(piece, t)
            pieces.append((g, lead, piece))
        return True, tuple(pieces)
    pieces = ((g, 1, substitute(f, {o: ZERO for o in grads if o != g})) for g in grads)
    return False, tuple(p for p in pieces if not _is(p[2], 0))


def _additive_terms(e: E.Expr, sign: int):
    if isinstance(e, E.Binary) and e.op in ("+", "-"):
        yield from _additive_terms(e.lhs, sign)
        yield from _additive_terms(e.rhs, sign if e.op == "+" else -sign)
    elif isinstance(e, E.Unary) and e.op == "-":
        yield from _additive_terms(e.operand, -sign)
    else:
        yield sign, e


def masked_by_given_gradients(f: E.Expr, grads: tuple[str, ...]) -> E.Expr:
    """``f`` for a fused kernel of an op with several outputs, where an output that got no gradient
    (it was not used) must contribute nothing: not 0 * its derivative, which is NaN where that
    derivative is not finite (sqrt's at 0). Each gradient's piece sits under a `where` on its
    given-flag, a per-call condition, so only the chosen branch runs."""
    exact, pieces = gradient_pieces(f, grads)
    masked: E.Expr = ZERO
    for g, sign, piece in pieces:
        term = where(E.Name(given_flag(g)), piece, ZERO)
        masked = add(masked, term) if sign > 0 else sub(masked, term)
    if exact:
        return masked
    every = E.BoolOp("and", tuple(E.Name(given_flag(g)) for g in grads))
    return where(every, f, masked)  # the formula as written when every gradient is given


def gradient_formulas(op: OpSpec) -> tuple[tuple[str, E.Expr], ...]:
    """The formulas the backward uses: the spec's, or derived when it says ``auto``."""
    if op.gradient is None:
        return ()
    if op.gradient.auto:
        return reduction_formulas(op) if op.is_reduction else derived_formulas(op)
    return op.gradient.formulas


def differentiable_inputs(op: OpSpec) -> tuple[str, ...]:
    """The tensor inputs autograd differentiates: those with a formula (given, derived, or
    whole-tensor for a hand-written kernel); every one with a hand-written backward kernel."""
    if op.gradient is None:
        return ()
    if op.gradient.kernel is not None:
        return tuple(a.name for a in op.tensor_inputs)
    if op.gradient.tensor_formulas:
        return tuple(n for n, _ in op.gradient.tensor_formulas)
    return tuple(n for n, _ in gradient_formulas(op))


def zero_gradient_inputs(op: OpSpec) -> tuple[str, ...]:
    """The differentiable inputs whose gradient is 0 (formula `0`, given or derived)."""
    if op.gradient is None or op.gradient.kernel is not None or op.gradient.tensor_formulas or op.is_reduction:
        return ()
    return tuple(n for n, f in gradient_formulas(op) if _is(f, 0))


# torch.autograd.gradgradcheck(check_fwd_over_rev=True) compares the forward-mode Jacobian of every
# first derivative with the numerical one of only those that require grad: a zero gradient (which
# does not) shifts the two lists apart, and `torch.round(a) + b` fails it as our ops do.
def fwd_over_rev_checkable(op: OpSpec) -> bool:
    return not zero_gradient_inputs(op)


def reduction_formulas(op: OpSpec) -> tuple[tuple[str, E.Expr], ...]:
    """The derived gradient of a reduction, in terms of `grad` and `result` broadcast back over the
    reduced dims. With indices, `grad` goes to the chosen elements (the emitter routes it)."""
    k = op.kernel
    assert isinstance(k, ReduceKernel)
    x = op.shape.tensors[0]
    grad = E.Name("grad")
    if op.has_indices:
        return ((x, grad),)
    d = derivative(k.map, x)
    if k.combine == "sum":
        f = mul(grad, d)
    elif k.combine == "mean":
        f = div(mul(grad, d), E.Name("count"))
    elif k.combine == "logsumexp":
        f = mul(mul(grad, d), call("exp", sub(k.map, E.Name("result"))))
    else:
        raise ValueError(f"{op.name}: no derived gradient for combine '{k.combine}'")
    return () if _is(d, 0) else ((x, f),)
