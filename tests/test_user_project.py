"""A user's own project, end to end: `opgen init`, a spec dropped into specs/, generate, build,
`opgen.load(DIR)` in a fresh process. Covers what the shipped library does not: explicit shape
rules, size checks, int and Scalar attributes, an op whose gradients are all `grad` itself, a
straight-through estimator."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import torch
import yaml

from opgen import testing
from opgen.build import capabilities

from .test_robustness import HOSTILE_DOC

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_SPECS = ROOT / "tests" / "golden" / "project" / "specs"

BAD_SQUARE = """\
signature: bad_square(Tensor x) -> Tensor
dtypes: [float64]
shape: same(x)
kernel:
  pointwise: x * x
gradient:
  x: grad * x   # wrong on purpose: the derivative of x * x is 2 * x
"""

SCRIPT = r"""
import sys, torch, opgen
ops = opgen.load(sys.argv[1])
x = torch.randn(4, 3, dtype=torch.float64)
s = torch.rand(4, 1, dtype=torch.float64) + 0.5
torch.testing.assert_close(ops.scale_rows(x, s, offset=2, power=3), (x + 2) * s ** 3)
torch.testing.assert_close(ops.scale_rows(x.t().contiguous().t(), s), x * s)
y = ops.scaled_silu(torch.randn(10), alpha=2.0)
assert y.shape == (10,)
for bad, expected in (
    (lambda: ops.scale_rows(x, torch.rand(3, 1)), "check 'scale.dim() == 2 and scale.size(0) == x.size(0) and scale.size(1) == 1' "
                                                  "failed (got scale of shape [3, 1], x of shape [4, 3])"),
    (lambda: ops.scale_rows(x, torch.rand(4)), "scale.dim() == 2"),
    (lambda: ops.scale_rows(x[0], s), "check 'x.dim() == 2' failed (got x of shape [3])"),
    (lambda: ops.scale_rows(x, s, power=-1), "check 'power >= 0' failed (got power=-1)"),
    (lambda: ops.scale_rows(x, s, offset=float("inf")), "check 'isfinite(offset) and offset > (-1000000.0) and offset < 1000000.0' failed (got offset=inf)"),
    (lambda: ops.scale_rows(x, s, offset=-10**7), "check 'isfinite(offset) and offset > (-1000000.0) and offset < 1000000.0' failed (got offset=-10000000)"),
    (lambda: ops.scaled_silu(torch.randn(3), alpha=-1.0), "check 'alpha > 0' failed"),
):
    try:
        bad()
    except (RuntimeError, ValueError) as e:
        assert expected in str(e), str(e)
        assert "scale" in str(e) or "silu" in str(e)
    else:
        raise AssertionError("no error: " + expected)
torch.library.opcheck(ops.scale_rows.default, (x, s), {"offset": 1.5, "power": 2})
row = torch.randn(1, 3)
torch.testing.assert_close(ops.rows_of(row, k=3, d=2), (row + 1).expand(4, 3))
for kwargs, expected in (({"k": 2**32}, "rows_of(): a size expression overflows int64"),
                         ({"d": 0}, "rows_of(): division by zero in a size expression"),
                         ({"k": 3, "d": -2}, "gave a negative size")):
    try:
        ops.rows_of(row, **kwargs)
    except ValueError as e:
        assert expected in str(e), str(e)
    except RuntimeError as e:
        assert expected in str(e) and "negative" in expected, str(e)
    else:
        raise AssertionError("no error for " + str(kwargs))
# an input without a gradient formula: reverse and forward mode both refuse it, naming it
import torch.autograd.forward_ad as fwAD
g = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
xg = x.clone().requires_grad_()
ops.gated(xg, g.detach()).sum().backward()
torch.testing.assert_close(xg.grad, g.detach())
for run in (lambda: ops.gated(x, g).sum().backward(),
            lambda: torch.func.jvp(lambda t: ops.gated(x, t), (g.detach(),), (torch.ones_like(g),))):
    try:
        run()
    except RuntimeError as e:
        assert "gated(): the " in str(e) and "derivative for 'gate' is not implemented" in str(e), str(e)
    else:
        raise AssertionError("no error for the gradient of 'gate'")
with fwAD.dual_level():
    y = ops.gated(fwAD.make_dual(x, torch.ones_like(x)), g.detach())
    torch.testing.assert_close(fwAD.unpack_dual(y).tangent, g.detach())
# every formula passes grad on (derived from `a + b`): the node reduces it, there is no backward op
a, b = torch.randn(4, 3, dtype=torch.float64, requires_grad=True), torch.randn(3, dtype=torch.float64, requires_grad=True)
grad = torch.randn(4, 3, dtype=torch.float64)
grad_a, grad_b = torch.autograd.grad(ops.plus(a, b), (a, b), grad)
assert grad_a.data_ptr() == grad.data_ptr()
torch.testing.assert_close(grad_b, grad.sum(0))
assert not hasattr(ops, "plus_backward")
# argument names shared with the generated code mean the arguments (the generic suite checks the rest)
y = torch.randn(3, 4, dtype=torch.float64)
torch.testing.assert_close(ops.trap_sum(y, [1], a=4.0, b=1.0), (4 * y * y + 1).sum(1) / 4)
yg = y.clone().requires_grad_()
(got,) = torch.autograd.grad(ops.rev_cumsum(yg), yg, torch.ones_like(y))
torch.testing.assert_close(got, torch.arange(1.0, 5.0, dtype=torch.float64).expand(3, 4))
torch.testing.assert_close(ops.trap_names(y, y[0], out=2.0, name=3.0, grads=1.0, tangent=1.0, apply=0.0),
                           6 * y + y[0])
# a straight-through estimator (test.surrogate): bit for bit torch's fake quantization, values and gradients
xq = (torch.randn(100_003) * 5).requires_grad_()
for args in ((0.037, 3, -100, 90), (0.5, 0, -8, 7)):
    mine, theirs = ops.fake_quant(xq, scale=args[0], zero_point=args[1], quant_min=args[2], quant_max=args[3]), \
        torch.fake_quantize_per_tensor_affine(xq, *args)
    assert torch.equal(mine, theirs), args
    gq = torch.randn_like(xq)
    assert torch.equal(torch.autograd.grad(mine, xq, gq)[0], torch.autograd.grad(theirs, xq, gq)[0]), args
# optional bounds, each None or a number, as torch.clamp's; NaN elements and bounds as torch's
xc = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0, float("nan"), float("inf")], dtype=torch.float64)
for bounds in ({"min": -1.0}, {"max": 1.0}, {"min": -1.0, "max": 1.0}, {"min": 0.5, "max": 0.5}, {"min": -1, "max": 2},
               {"min": float("nan")}, {"max": float("nan")}):
    torch.testing.assert_close(ops.clip(xc, **bounds), torch.clamp(xc, **bounds), equal_nan=True, rtol=0, atol=0)
for bounds, expected in (({"min": 1.0, "max": 0.0}, "check 'min is None or max is None or min <= max' failed (got max=0, min=1)"),
                         ({}, "check 'min is not None or max is not None' failed (got max=None, min=None)")):
    try:
        ops.clip(xc, **bounds)
    except ValueError as e:
        assert "clip(): " + expected in str(e), str(e)
    else:
        raise AssertionError("no error for " + expected)
xg = torch.randn(50, dtype=torch.float64, requires_grad=True)
(gmin,) = torch.autograd.grad(ops.clip(xg, min=0.1).sum(), xg)
assert torch.equal(gmin, (xg.detach() >= 0.1).double())
# a SymInt attribute, also from a size under torch.compile(dynamic=True): one graph for every size
import torch._dynamo.testing
xs = torch.randn(4, dtype=torch.float64, requires_grad=True)
torch.testing.assert_close(ops.sym_scale(xs, n=3), (xs * 3).expand(3, 4))
assert torch.autograd.gradcheck(lambda t: ops.sym_scale(t, n=5), (xs,), check_forward_ad=True)
scaled = torch.compile(lambda t, k: ops.sym_scale(t, n=k.shape[0]), fullgraph=True, dynamic=True, backend="aot_eager")
for k in (5, 6):
    torch.testing.assert_close(scaled(xs, torch.zeros(k)), (xs * k).expand(k, 4))
frames = torch._dynamo.testing.CompileCounter()
symbolic = torch.compile(lambda t, k: ops.sym_scale(t, n=k.shape[0]), fullgraph=True, dynamic=True, backend=frames)
for k in (5, 6, 7):
    torch.testing.assert_close(symbolic(xs.detach(), torch.zeros(k)), (xs.detach() * k).expand(k, 4))
assert frames.frame_count == 1, frames.frame_count
try:
    ops.sym_scale(xs, n=0)
except ValueError as e:
    assert "sym_scale(): check 'n > 0' failed (got n=0)" in str(e), str(e)
else:
    raise AssertionError("no error for n=0")
# elements of list attributes: values, their sizes checked, failed checks showing the lists
pm, mm, vm = (torch.randn(6, dtype=torch.float64) for _ in range(3))
vm = vm.abs() + 0.1
torch.testing.assert_close(ops.adam_step(pm, mm, vm, lr=0.01, betas=[0.8, 0.99], eps=1e-6, steps=[3, 5]),
                           pm - 0.01 * (mm / (1 - 0.8 ** 3)) / ((vm / (1 - 0.99 ** 5)).sqrt() + 1e-6))
assert torch.autograd.gradcheck(lambda *t: ops.adam_step(*t, lr=0.1, betas=[0.5, 0.7], steps=[2, 3]),
                                [t.clone().requires_grad_() for t in (pm, mm, vm)], check_forward_ad=True)
torch.testing.assert_close(ops.adam_step(pm, mm, vm), ops.adam_step(pm, mm, vm, steps=[1, 1]), rtol=0, atol=0)
adam = torch.compile(lambda *t: ops.adam_step(*t, betas=[0.5, 0.5]), fullgraph=True, backend="aot_eager")
torch.testing.assert_close(adam(pm, mm, vm), ops.adam_step(pm, mm, vm, betas=[0.5, 0.5]))
# optional tensors: every combination present or None, against torch; gradients only for those given
from torch.library import opcheck
def _gelu(t): return torch.nn.functional.gelu(t, approximate="tanh")
xb = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
bb = torch.randn(4, dtype=torch.float64, requires_grad=True)
rb = torch.randn(2, 1, 1, dtype=torch.float64, requires_grad=True)
for bias, residual in ((None, None), (bb, None), (None, rb), (bb, rb)):
    args = (xb, bias, residual)
    expected = 2 * _gelu(xb if bias is None else xb + bias) + (0 if residual is None else residual)
    torch.testing.assert_close(ops.bias_gelu(*args, scale=2.0), expected)
    given = [t for t in args if t is not None]
    grads = torch.autograd.grad(ops.bias_gelu(*args, scale=2.0).sum(), given)
    torch.testing.assert_close(grads, torch.autograd.grad(expected.sum(), given))
    slots = [i for i, t in enumerate(args) if t is not None]
    def placed(*t, slots=slots):
        full = [None] * 3
        for i, v in zip(slots, t):
            full[i] = v
        return ops.bias_gelu(*full)
    assert torch.autograd.gradcheck(placed, given, check_forward_ad=True)
    detached = tuple(t.detach() if t is not None else None for t in args)
    assert opcheck(torch.ops.myops.bias_gelu.default, detached, {"scale": 2.0})["test_aot_dispatch_dynamic"] == "SUCCESS"
    with torch.device("meta"):
        assert ops.bias_gelu(*(torch.empty(t.shape) if t is not None else None for t in args)).shape == expected.shape
    biased = torch.compile(lambda *t: ops.bias_gelu(*t, scale=2.0), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(biased(*detached), expected.detach())
assert ops.bias_gelu(xb, None).grad_fn is not None and ops.bias_gelu(xb.detach(), bb).grad_fn is not None
torch.testing.assert_close(torch.vmap(ops.bias_gelu, in_dims=(0, None))(xb.detach(), None), _gelu(xb.detach()))
xi = xb.detach().clone()
ops.bias_gelu_(xi, None, rb.detach()[0])
torch.testing.assert_close(xi, _gelu(xb.detach()) + rb.detach()[0])
try:
    ops.bias_gelu(xb, torch.ones(3, 4, dtype=torch.float64))
except RuntimeError as e:
    assert "bias_gelu(): check 'bias is None or bias.dim() <= 1' failed (got bias of shape [3, 4])" in str(e), str(e)
else:
    raise AssertionError("no error for a 2-d bias")
assert torch.equal(ops.pad_rows(torch.arange(3.0), [2, 1], [True, True]), torch.tensor([1.0, 1, 0, 1, 2, 1]))
with torch.device("meta"):
    assert ops.pad_rows(torch.empty(4), [2, 3]).shape == (9,)
frames = torch._dynamo.testing.CompileCounter()
padded = torch.compile(lambda t, k: ops.pad_rows(t, [k.shape[0], 1]), fullgraph=True, dynamic=True, backend=frames)
for k in (2, 3, 4):
    assert torch.equal(padded(torch.ones(3), torch.zeros(k)), ops.pad_rows(torch.ones(3), [k, 1]))
assert frames.frame_count == 1, frames.frame_count  # the pad from a size stays symbolic
# no gradient in the spec: backward raises, naming the op (torch's default warns and gives None)
xr = torch.ones(3, requires_grad=True)
try:
    torch.autograd.grad(ops.pad_rows(xr).sum(), xr)
except RuntimeError as e:
    assert "derivative for myops::pad_rows is not implemented" in str(e), str(e)
else:
    raise AssertionError("backward through pad_rows, which has no gradient, passed")
for call, expected in ((lambda: ops.adam_step(pm, mm, vm, betas=[0.9]), "adam_step(): argument 'betas' must have 2 elements, "
                        "as its type float[2] says (got 1)"),
                       (lambda: ops.adam_step(pm, mm, vm, steps=[1, 2, 3]), "adam_step(): argument 'steps' must have 2 elements"),
                       (lambda: ops.adam_step(pm, mm, vm, betas=[0.9, 1.5]), "adam_step(): check 'betas[0] >= 0 and betas[0] < 1 "
                        "and betas[1] >= 0 and betas[1] < 1' failed (got betas=[0.9, 1.5])"),
                       (lambda: ops.pad_rows(torch.ones(2), [1, -1]), "check 'pad[0] >= 0 and pad[1] >= 0' failed (got pad=[1, -1])"),
                       (lambda: ops.pad_rows(torch.ones(2), fill=[False, True]), "check 'fill[0] or not fill[1]' failed "
                        "(got fill=[False, True])")):
    try:
        call()
    except ValueError as e:
        assert expected in str(e), str(e)
    else:
        raise AssertionError("no error for " + expected)
# every kind of attribute, none at its default; the node keeps its own copies of the lists
xa = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
ya = ops.every_attribute(xa, [1], True, w=list([3.0]), v=[1.0, 2.0], k=[2], s=[1], flags=[False, True], pair=[4, 5],
                         eps=0.5, how="up", sc=2, name="b", t=3)
torch.testing.assert_close(ya, xa.detach().sum(1, keepdim=True) * -6 + (0.5 + 2 + 5 + 2 + 1 + 3 + 1 + 1))
torch.testing.assert_close(torch.autograd.grad(ya.sum(), xa)[0], torch.full_like(xa, -6.0))
torch.testing.assert_close(ops.every_attribute(xa.detach()), xa.detach().sum() * 2 + 3)
torch.autograd.gradcheck(lambda t: ops.every_attribute(t, None, w=[1.5], v=[1.0], pair=[1, 2], sc=1.5), (xa,))
sys.path.insert(0, sys.argv[1] + "/generated/python")
import myops
assert myops.hostile_doc.__doc__.startswith(sys.argv[2]), myops.hostile_doc.__doc__
assert torch.equal(myops.hostile_doc(torch.ones(3)), torch.full((3,), 2.0))
print("user project ok")
"""


# opgen's own vectorized float tanh, erf, exp and softplus (opgen_math.h) against float64's,
# rounded: within 1 ulp (softplus below -1: 3) over every 61st float32 below 128 in magnitude and
# every 256th beyond, of either sign, every float32 near tanh's and erf's switches between formulas
# (0.625, 0.9), where exp's results leave the normal range or overflow, and the special values; `x`
# is contiguous, so all but a tail of 7 go through the vector code.
ELEMENTARY_SCRIPT = r"""
import sys, torch, opgen
ops = opgen.load(sys.argv[1])
def float_bits(lo, hi, step=1):
    lo, hi = torch.tensor([lo, hi]).view(torch.int32).tolist()
    return torch.arange(lo, hi, step, dtype=torch.int64)
bits = torch.cat([float_bits(0.0, 128.0, 61), float_bits(128.0, float("inf"), 256), float_bits(0.6, 0.65), float_bits(0.88, 0.92),
                  float_bits(87.0, 87.5), float_bits(88.6, 88.8), float_bits(103.0, 104.5)])
x = bits.to(torch.int32).view(torch.float32)
x = torch.cat([x, -x, torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-30, -1e-30])])
for fn in ("tanh", "erf", "exp", "softplus"):
    y = ops.elementary(x, fn=fn)
    ref = (torch.logaddexp(x.double(), torch.zeros(())) if fn == "softplus" else getattr(torch, fn)(x.double())).float()
    ulp = torch.nextafter(ref.abs(), torch.tensor(float("inf"))) - ref.abs()
    ulps = torch.where(x < -1, 3, 1) if fn == "softplus" else 1  # below -1 softplus is exp(x), rounded, times ~1
    bad = ~(((y - ref).abs() <= ulps * ulp) | (y == ref) | (y.isnan() & ref.isnan()))
    bound = "3 ulps below -1 or 1 ulp" if fn == "softplus" else "1 ulp"
    assert not bad.any(), f"{fn} off by more than {bound} at {x[bad][:8].tolist()}: {y[bad][:8].tolist()} vs {ref[bad][:8].tolist()}"
    keep = ~ref.isnan()
    assert torch.equal(y[keep].signbit(), ref[keep].signbit()), f"{fn} lost a sign"
print("elementary ok", torch.backends.cpu.get_cpu_capability(), x.numel())
"""


# minimum / maximum against a per-call number take a one-instruction form when that number is not
# NaN (opgen_math.h: maximum_uniform); a NaN attribute must still give NaN everywhere, NaN in x must
# propagate, on the contiguous loop and the TensorIterator path, at every capability.
BOUNDED = {"signature": "bounded(Tensor x, *, float lo=0.0) -> Tensor", "dtypes": ["float32", "float64", "bfloat16"],
           "shape": "same(x)", "kernel": {"pointwise": "minimum(maximum(x, lo), 1)"},
           "reference": "torch.clamp(x, min=lo, max=1.0)"}

# Per-element `and`, `or`, `not` and isfinite(), mixed with per-call conditions (a bool attribute):
# lane masks on vectors, bools on scalars, a bool output when the whole kernel is a condition.
BAND = {"signature": "band(Tensor x, Tensor y, *, float lo=-1.0, float hi=1.0, bool invert=False) -> Tensor",
        "dtypes": ["float32", "float64", "bfloat16"], "shape": "broadcast(x, y)",
        "kernel": {"pointwise": "where((not (x < lo or x > hi) and not invert or invert and (x < lo or x > hi)) "
                                 "and isfinite(y) or y == 0 and not invert, x, y)"},
        "gradient": "auto"}
OUTSIDE = {"signature": "outside(Tensor x, *, float lo=-1.0, float hi=1.0, bool strict=False) -> Tensor",
           "dtypes": ["float32", "float64", "bfloat16"], "shape": "same(x)",
           "kernel": {"pointwise": "x < lo or x > hi or strict and not isfinite(x)"}}

BOUNDED_SCRIPT = r"""
import sys, torch, opgen
ops = opgen.load(sys.argv[1])
for dtype in (torch.float32, torch.float64, torch.bfloat16):
    x = torch.randn(203, dtype=dtype) * 2
    y = torch.randn(203, dtype=dtype)
    x[::5], x[1::9], x[2::9] = float("nan"), float("inf"), -float("inf")
    y[::7], y[3::11], y[4::13] = float("nan"), float("inf"), 0.0
    for t, u in ((x, y), (x[::2], y[::2]), (x.view(7, 29).t(), y[:7])):  # flat loop, strided, broadcast
        for invert in (False, True):
            inside = ~((t < -0.5) | (t > 0.75))
            keep = ((inside != invert) & u.isfinite()) | ((u == 0) & (not invert))
            got = ops.band(t, u, lo=-0.5, hi=0.75, invert=invert)
            assert torch.equal(got.nan_to_num(), torch.where(keep, t, u).nan_to_num()), (dtype, invert)
            assert torch.equal(got.isnan(), torch.where(keep, t, u).isnan()), (dtype, invert)
            want = (t < -0.5) | (t > 0.75) | (invert & ~t.isfinite())
            assert torch.equal(ops.outside(t, lo=-0.5, hi=0.75, strict=invert), want), (dtype, invert)
for dtype in (torch.float32, torch.float64, torch.bfloat16):
    x = torch.randn(203, dtype=dtype) * 2
    x[::5] = float("nan")
    x[1], x[2], x[3], x[4] = float("inf"), -float("inf"), -0.0, 1.0
    for lo in (0.25, -0.0, 3.0, -float("inf"), float("inf"), float("nan")):
        for t in (x, x[::2]):  # the flat contiguous loop, then a strided TensorIterator
            got = ops.bounded(t, lo=lo)
            want = torch.minimum(torch.maximum(t, torch.tensor(lo, dtype=dtype)), torch.tensor(1.0, dtype=dtype))
            assert torch.equal(got.isnan(), want.isnan()), (dtype, lo, got, want)
            assert torch.equal(got.nan_to_num(), want.nan_to_num()), (dtype, lo, got, want)
print("bounded ok", torch.backends.cpu.get_cpu_capability())
"""


# Argument names that are also names in the generated code (the autograd node's members and
# methods, its locals, the accumulators of a reduction): they must compile and mean the argument.
TRAP_NAMES = {"signature": "trap_names(Tensor x, Tensor other, *, float out=1.5, float name=2.0, float grads=0.5, "
                           "float tangent=-1.0, float apply=3.0, float grad_fn=0.25, float forward_op=2.0, "
                           "float task_should_compute_output=0.5) -> Tensor",
              "dtypes": ["float32", "float64"], "shape": "broadcast(x, other)",
              "kernel": {"pointwise": "x * out * name + other * grads * tangent + apply * grad_fn * forward_op * "
                                      "task_should_compute_output"},
              "gradient": {"x": "grad * out * name", "other": "grad * grads * tangent"}, "variants": ["inplace"]}
# A straight-through estimator: the gradient is deliberately not the kernel's (zero) derivative, so
# `opgen test` checks it against the reference's autograd (PyTorch's idiom for one), not finite
# differences; rounding, clamping to int attributes and `and` of masks on the way.
FAKE_QUANT = {
    "signature": "fake_quant(Tensor x, *, float scale=0.1, int zero_point=0, int quant_min=-128, int quant_max=127) -> Tensor",
    "dtypes": ["floating"], "shape": "same(x)",
    "checks": ["scale > 0", "quant_min < quant_max", "zero_point >= quant_min and zero_point <= quant_max"],
    "kernel": {"pointwise": "(clamp(round(x * (1 / scale)) + zero_point, quant_min, quant_max) - zero_point) * scale"},
    "gradient": {"x": "where(round(x * (1 / scale)) + zero_point >= quant_min and "
                      "round(x * (1 / scale)) + zero_point <= quant_max, grad, 0)"},
    "reference": "torch.where(torch.logical_and(torch.round(x * (1 / scale)) + zero_point >= quant_min, "
                 "torch.round(x * (1 / scale)) + zero_point <= quant_max), x, x.detach()) + "
                 "((torch.clamp(torch.round(x * (1 / scale)) + zero_point, quant_min, quant_max) - zero_point) * scale - x).detach()",
    "test": {"surrogate": ["x"]}}
TRAP_SUM = {"signature": "trap_sum(Tensor x, int[1] dim, bool keepdim=False, *, Scalar a=2.0, float b=0.5) -> Tensor",
            "dtypes": ["float32", "float64"], "shape": "reduce(x, dim, keepdim)", "checks": ["a != 0"],
            "kernel": {"reduce": {"map": "a * x * x + b", "combine": "a + b", "identity": 0, "post": "acc / a"}},
            "gradient": {"x": "2 * a * x * grad / a"}}  # a Scalar read by the check, map, post and the formula


# torch.clamp's optional bounds, its `Scalar?` signature: `is None` tests select the branch, reads
# guarded by them (float? attributes: OPTIONALS).
CLIP = {"signature": "clip(Tensor x, *, Scalar? min=None, Scalar? max=None) -> Tensor", "dtypes": ["floating"],
        "shape": "same(x)", "checks": ["min is not None or max is not None", "min is None or max is None or min <= max"],
        "kernel": {"pointwise": "where(max is None, where(min is None, x, maximum(x, min)), "
                                "minimum(where(min is None, x, maximum(x, min)), max))"},
        "gradient": "auto", "reference": "torch.clamp(x, min=min, max=max)", "variants": ["out", "inplace"]}

# Optional attributes of the other kinds, in kernels and in checks (the generic suite tries each
# as None and as values, and each check's violation).
OPTIONALS = {"signature": "optionals(Tensor x, Tensor y, *, bool? flag=None, str? how=None, int? k=None, float? eps=None) -> Tensor",
             "dtypes": ["float32", "float64"], "shape": "broadcast(x, y)",
             "checks": ["k is None or k > 0", "how is None or how in ['add', 'sub']", "eps is None or isfinite(eps)"],
             "kernel": {"pointwise": "where(flag is not None and flag, x, -x) + where(how is None or how == 'add', y, -y) "
                                     "+ where(k is None, 0, x * k) + where(eps is not None and x > eps, eps, 0)"},
             "gradient": "auto"}

# A SymInt attribute read by the kernel and the gradient (concrete there: guard_int) and by a check
# and the shape rule (symbolic there, as sizes: torch.compile(dynamic=True) need not specialize).
SYM_SCALE = {"signature": "sym_scale(Tensor x, *, SymInt n=2) -> Tensor", "dtypes": ["float32", "float64"],
             "shape": ["n * 1 + 0", "x.size(0)"], "checks": ["x.dim() == 1", "n > 0"], "kernel": {"pointwise": "x * n"},
             "gradient": {"x": "grad * n"}, "test": {"shapes": {"x": [4]}}}

# Elements of sized list attributes (betas[0]) in a kernel, its derived gradient and checks: an Adam
# step, with torch.optim.Adam's float[2] betas; `int[2] steps=1` is [1, 1], as the dispatcher expands it.
ADAM_STEP = {"signature": "adam_step(Tensor p, Tensor m, Tensor v, *, float lr=0.001, float[2] betas=[0.9, 0.999], "
                          "float eps=1e-8, int[2] steps=1) -> Tensor",
             "dtypes": ["float32", "float64"], "shape": "broadcast(p, m, v)",
             "checks": ["betas[0] >= 0 and betas[0] < 1 and betas[1] >= 0 and betas[1] < 1", "steps[0] > 0 and steps[1] > 0"],
             "kernel": {"pointwise": "p - lr * (m / (1 - betas[0] ** steps[0])) / (sqrt(v / (1 - betas[1] ** steps[1])) + eps)"},
             "gradient": "auto", "test": {"ranges": {"v": [0.01, 2]}}}

# Optional tensors in a pointwise kernel (an absent one gets a stand-in the kernel never uses); under
# autocast, promoted with the others (the generated test gives x the autocast dtype, them float32).
_BIASED = "where(bias is None, x, x + bias)"
BIAS_GELU = {"signature": "bias_gelu(Tensor x, Tensor? bias=None, Tensor? residual=None, *, float scale=1.0) -> Tensor",
             "doc": "scale * gelu(x + bias) + residual, GELU's tanh form; bias and residual are optional.",
             "dtypes": ["floating"], "shape": "broadcast(x, bias, residual)",
             "checks": ["bias is None or bias.dim() <= 1"],
             "kernel": {"pointwise": f"scale * 0.5 * {_BIASED} * (1 + tanh(0.7978845608028654 * ({_BIASED} + 0.044715 * "
                                     f"{_BIASED} ** 3))) + where(residual is None, 0, residual)"},
             "gradient": "auto", "variants": ["out", "inplace"], "autocast": "promote",
             "test": {"shapes": {"x": [3, 4], "bias": [4], "residual": [3, 1]}}}

# A product both gradient formulas share, added in one (an FMA candidate when that loop runs alone)
# and multiplied in the other: the generic suite's "each gradient alone the same bit for bit as all
# together" failed on it until kernels were compiled with -ffp-contract=off.
SHARED_PRODUCT = {"signature": "shared_product(Tensor a, Tensor b) -> Tensor", "dtypes": ["float32", "float64"],
                  "shape": "broadcast(a, b)", "kernel": {"pointwise": "a * a * b / 2 + a"},
                  "gradient": {"a": "grad * a * b + grad", "b": "grad * a * b * a / (2 * b)"},
                  "test": {"ranges": {"b": [0.5, 2]}}}

# ... and in a shape rule and checks of a hand-written kernel: a SymInt[2], whose elements are sizes
# there (symbolic under torch.compile), and a bool[2].
PAD_ROWS = {"signature": "pad_rows(Tensor x, SymInt[2] pad=[1, 1], bool[2] fill=[True, False]) -> Tensor",
            "dtypes": ["float32", "float64"], "shape": ["x.size(0) + pad[0] + pad[1]"],
            "checks": ["x.dim() == 1", "pad[0] >= 0 and pad[1] >= 0", "fill[0] or not fill[1]"],
            "kernel": {"cpu": "pad_rows.cpu.cpp"},
            "reference": "torch.nn.functional.pad(x, (pad[0], pad[1]), value=1.0 if fill[1] else 0.0)",
            "test": {"shapes": {"x": [5]}}}
PAD_ROWS_KERNEL = """#include "kernels/pad_rows_kernel.h"

namespace myops {

void pad_rows_cpu(const at::Tensor& out, const at::Tensor& x, c10::SymIntArrayRef pad, std::array<bool, 2> fill) {
  out.fill_(fill[1] ? 1.0 : 0.0);
  out.narrow(0, pad[0].expect_int(), x.size(0)).copy_(x);
}

}  // namespace myops
"""

# A hand-written kernel whose gradient formula reads a Scalar, a SymInt and elements of a float[2]
# attribute (the node keeps a double, an int64_t and a std::vector<double>).
HW_SCALE = {"signature": "hw_scale(Tensor x, *, Scalar s=2, SymInt n=3, float[2] w=[1.0, 0.5]) -> Tensor",
            "dtypes": ["float32", "float64"], "shape": "same(x)", "checks": ["n > 0"], "kernel": {"cpu": "hw_scale.cpu.cpp"},
            "gradient": {"x": "grad * s * n * w[0] * w[1]"}, "reference": "x * s * n * w[0] * w[1]"}
HW_SCALE_KERNEL = """#include "kernels/hw_scale_kernel.h"

#include <ATen/TensorOperators.h>

namespace myops {

void hw_scale_cpu(const at::Tensor& out, const at::Tensor& x, const at::Scalar& s, c10::SymInt n, at::ArrayRef<double> w) {
  out.copy_(x * (s.toDouble() * static_cast<double>(n.expect_int()) * w[0] * w[1]));
}

}  // namespace myops
"""


# A hand-written reduction over `int[1]? dim=None` taking every kind of attribute, with a hand-written
# backward: the C++ types the dispatcher hands kernels (optional lists, bool[N], Scalar?, str?),
# the copies the autograd node keeps of them, and the generic suite's attribute sets, which try
# each attribute's values (None and a value for optional ones) against the reference.
EVERY_ATTRIBUTE = {
    "signature": "every_attribute(Tensor x, int[1]? dim=None, bool keepdim=False, *, float[] w=[1.0, 2.0], "
                 "float[]? v=None, int[] k=[2], SymInt[] s=[2], bool[2] flags=[True, False], int[2]? pair=None, "
                 "float? eps=None, str? how=None, Scalar? sc=None, str name='a', Scalar t=1) -> Tensor",
    "dtypes": ["float32", "float64"], "shape": "reduce(x, dim, keepdim)",
    "kernel": {"cpu": "every_attribute.cpu.cpp"},
    "gradient": {"kernel": {"cpu": "every_attribute_backward.cpu.cpp"}},
    "reference": "torch.sum(x, dim, keepdim) * w[0] * k[0] * (1 if flags[0] else -1) + (0.0 if eps is None else eps) "
                 "+ (0.0 if v is None else v[-1]) + (0.0 if pair is None else pair[1]) + (0.0 if sc is None else sc) "
                 "+ s[0] + t + (1.0 if how == 'up' else 0.0) + (1.0 if name == 'b' else 0.0)",
    "test": {"shapes": {"x": [3, 4]}}}
EVERY_ATTRIBUTE_KERNEL = """#include "kernels/every_attribute_kernel.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>

namespace myops {

void every_attribute_cpu(const at::Tensor& out, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                         at::ArrayRef<double> w, std::optional<at::ArrayRef<double>> v, at::IntArrayRef k,
                         c10::SymIntArrayRef s, std::array<bool, 2> flags, at::OptionalIntArrayRef pair,
                         std::optional<double> eps, std::optional<c10::string_view> how,
                         const std::optional<at::Scalar>& sc, c10::string_view name, const at::Scalar& t) {
  const double scale = w[0] * static_cast<double>(k[0]) * (flags[0] ? 1 : -1);
  const double shift = eps.value_or(0.0) + (v.has_value() ? v->back() : 0.0) + (pair.has_value() ? (*pair)[1] : 0) +
                       (sc.has_value() ? sc->toDouble() : 0.0) + static_cast<double>(s[0].expect_int()) + t.toDouble() +
                       (how == "up" ? 1.0 : 0.0) + (name == "b" ? 1.0 : 0.0);
  out.copy_(at::sum(x, dim, keepdim) * scale + shift);
}

}  // namespace myops
"""
EVERY_ATTRIBUTE_BACKWARD = """#include "kernels/every_attribute_kernel.h"

#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/WrapDimUtilsMulti.h>

namespace myops {

void every_attribute_backward_cpu(const at::Tensor& grad, const at::Tensor& x, at::OptionalIntArrayRef dim, bool keepdim,
                                  at::ArrayRef<double> w, std::optional<at::ArrayRef<double>> v, at::IntArrayRef k,
                                  c10::SymIntArrayRef s, std::array<bool, 2> flags, at::OptionalIntArrayRef pair,
                                  std::optional<double> eps, std::optional<c10::string_view> how,
                                  const std::optional<at::Scalar>& sc, c10::string_view name, const at::Scalar& t,
                                  const at::Tensor& result, const at::Tensor& grad_x) {
  at::Tensor g = grad;
  if (!keepdim && x.dim() > 0) {
    const auto reduced = at::dim_list_to_bitset(dim.has_value() && !dim->empty() ? *dim : at::IntArrayRef(), x.dim());
    const bool all = !dim.has_value() || dim->empty();
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (all || reduced[d]) {
        g = g.unsqueeze(d);
      }
    }
  }
  grad_x.copy_(g.expand_as(x) * (w[0] * static_cast<double>(k[0]) * (flags[0] ? 1 : -1)));
}

}  // namespace myops
"""


# A hand-written kernel whose gradient formula reads every tensor method added for such formulas;
# all but the first term are multiplied by 0, so gradcheck and gradgradcheck (the generated tests)
# check the formula and the C++ of each method compiles.
REV_CUMSUM = {"signature": "rev_cumsum(Tensor x) -> Tensor", "dtypes": ["float32", "float64"], "shape": "same(x)",
              "kernel": {"cpu": "rev_cumsum.cpu.cpp"},
              "gradient": {"x": "grad.cumsum(-1) + 0 * (x.neg() + x.sign() + x.sin() + x.cos() + x.clamp_min(0) "
                                "+ x.contiguous() + x.permute([1, 0]).flip([0, 1]).t() + x.narrow(-1, 0, 1).expand_as(x) "
                                "+ x.reshape_as(x) + x.unsqueeze(0).bmm(x.t().unsqueeze(0)).squeeze(0).narrow(1, 0, 1).expand_as(x) "
                                "+ x.sum(1).outer(x.sum(0)))"},
              "reference": "x.flip(-1).cumsum(-1).flip(-1)", "test": {"shapes": {"x": [3, 4]}}}
REV_CUMSUM_KERNEL = """#include "kernels/rev_cumsum_kernel.h"

namespace myops {

void rev_cumsum_cpu(const at::Tensor& out, const at::Tensor& x) {
  out.copy_(x.flip(-1).cumsum(-1).flip(-1));
}

}  // namespace myops
"""


def test_init_generate_build_load(tmp_path, built_ops):
    project = tmp_path / "myops"
    opgen = [sys.executable, "-m", "opgen"]
    subprocess.run([*opgen, "init", str(project)], check=True)
    assert (project / "specs" / "scaled_silu.yaml").is_file()
    shutil.copy(GOLDEN_SPECS / "scale_rows.yaml", project / "specs")
    (project / "specs" / "bad_square.yaml").write_text(BAD_SQUARE)
    # a doc with comment terminators, quotes, Jinja and HTML must compile and survive intact
    hostile = {"signature": "hostile_doc(Tensor x) -> Tensor", "doc": HOSTILE_DOC, "dtypes": ["float32"],
               "shape": "same(x)", "kernel": {"pointwise": "x * 2"}, "gradient": "auto"}
    (project / "specs" / "hostile_doc.yaml").write_text(yaml.safe_dump(hostile))
    # size arithmetic in a shape rule: overflow and division by zero must raise, not crash (no
    # checks guard `d`, on purpose, so `opgen test` leaves this op out: its attribute sets try d=0)
    rows_of = {"signature": "rows_of(Tensor x, *, int k=2, int d=1) -> Tensor", "dtypes": ["float32"],
               "shape": ["k * k // d", "x.size(1)"], "checks": ["x.dim() == 2", "x.size(0) == 1"],
               "kernel": {"pointwise": "x + 1"}, "test": {"shapes": {"x": [1, 3]}}}
    (project / "specs" / "rows_of.yaml").write_text(yaml.safe_dump(rows_of))
    gated = {"signature": "gated(Tensor x, Tensor gate) -> Tensor", "dtypes": ["float32", "float64"],
             "shape": "broadcast(x, gate)", "kernel": {"pointwise": "x * gate"}, "gradient": {"x": "grad * gate"}}
    (project / "specs" / "gated.yaml").write_text(yaml.safe_dump(gated))
    # the two autocast policies the shipped library leaves out (linear: lower_precision)
    plus = {"signature": "plus(Tensor a, Tensor b) -> Tensor", "dtypes": ["floating"],
            "shape": "broadcast(a, b)", "kernel": {"pointwise": "a + b"}, "gradient": "auto", "autocast": "promote"}
    (project / "specs" / "plus.yaml").write_text(yaml.safe_dump(plus))
    elementary = {"signature": "elementary(Tensor x, *, str fn='tanh') -> Tensor", "dtypes": ["float32", "float64", "bfloat16", "float16"],
                  "shape": "same(x)", "checks": ["fn in ['tanh', 'erf', 'exp', 'softplus']"],
                  "kernel": {"pointwise": "where(fn == 'erf', erf(x), where(fn == 'exp', exp(x), where(fn == 'softplus', log1p(exp(x)), tanh(x))))"},
                  "gradient": "auto", "autocast": "fp32"}
    (project / "specs" / "elementary.yaml").write_text(yaml.safe_dump(elementary))
    (project / "specs" / "bounded.yaml").write_text(yaml.safe_dump(BOUNDED))
    (project / "specs" / "band.yaml").write_text(yaml.safe_dump(BAND))
    (project / "specs" / "outside.yaml").write_text(yaml.safe_dump(OUTSIDE))
    (project / "specs" / "rev_cumsum.yaml").write_text(yaml.safe_dump(REV_CUMSUM))
    (project / "specs" / "rev_cumsum.cpu.cpp").write_text(REV_CUMSUM_KERNEL)
    (project / "specs" / "trap_names.yaml").write_text(yaml.safe_dump(TRAP_NAMES))
    (project / "specs" / "trap_sum.yaml").write_text(yaml.safe_dump(TRAP_SUM))
    (project / "specs" / "fake_quant.yaml").write_text(yaml.safe_dump(FAKE_QUANT))
    (project / "specs" / "clip.yaml").write_text(yaml.safe_dump(CLIP))
    (project / "specs" / "optionals.yaml").write_text(yaml.safe_dump(OPTIONALS))
    (project / "specs" / "sym_scale.yaml").write_text(yaml.safe_dump(SYM_SCALE))
    (project / "specs" / "hw_scale.yaml").write_text(yaml.safe_dump(HW_SCALE))
    (project / "specs" / "hw_scale.cpu.cpp").write_text(HW_SCALE_KERNEL)
    (project / "specs" / "adam_step.yaml").write_text(yaml.safe_dump(ADAM_STEP))
    (project / "specs" / "bias_gelu.yaml").write_text(yaml.safe_dump(BIAS_GELU))
    (project / "specs" / "shared_product.yaml").write_text(yaml.safe_dump(SHARED_PRODUCT))
    (project / "specs" / "pad_rows.yaml").write_text(yaml.safe_dump(PAD_ROWS))
    (project / "specs" / "pad_rows.cpu.cpp").write_text(PAD_ROWS_KERNEL)
    (project / "specs" / "every_attribute.yaml").write_text(yaml.safe_dump(EVERY_ATTRIBUTE))
    (project / "specs" / "every_attribute.cpu.cpp").write_text(EVERY_ATTRIBUTE_KERNEL)
    (project / "specs" / "every_attribute_backward.cpu.cpp").write_text(EVERY_ATTRIBUTE_BACKWARD)
    subprocess.run([*opgen, "--project", str(project), "generate"], check=True)
    subprocess.run([*opgen, "--project", str(project), "check"], check=True)
    build = subprocess.run([*opgen, "--project", str(project), "build"], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    # the precompiled headers are the shipped library's: generated headers, flags and torch agree
    assert "PCH" not in build.stderr, build.stderr
    shared = [json.loads((p / "build" / "pch.json").read_text()) for p in (project, ROOT)]
    assert shared[0] == shared[1] and len(shared[0]) == len(capabilities()) + 1, shared  # the kernels' per capability, the op files'
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(project), HOSTILE_DOC], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "user project ok" in proc.stdout
    runnable = testing.runnable_cpu_capabilities()
    for capability in [c.lower() for c in capabilities() if c in runnable]:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        proc = subprocess.run([sys.executable, "-c", ELEMENTARY_SCRIPT, str(project)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"elementary ok {capability.upper()}" in proc.stdout, proc.stdout
        proc = subprocess.run([sys.executable, "-c", BOUNDED_SCRIPT, str(project)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"bounded ok {capability.upper()}" in proc.stdout, proc.stdout
    # `opgen test`: the generic property suite on the project's own specs
    suite = subprocess.run([*opgen, "--project", str(project), "test", "-q", "-k", "not bad_square and not rows_of"],
                           capture_output=True, text=True)
    assert suite.returncode == 0, suite.stdout[-4000:] + suite.stderr[-2000:]
    assert " passed" in suite.stdout and "failed" not in suite.stdout
    # ... and it catches the deliberately wrong gradient formula, by two independent tests
    caught = subprocess.run([*opgen, "--project", str(project), "test", "-q", "-k", "bad_square"],
                            capture_output=True, text=True)
    assert caught.returncode == 1, caught.stdout[-4000:]
    assert "FAILED" in caught.stdout and "test_gradcheck[bad_square]" in caught.stdout
    assert "gradient formula for 'x' disagrees with the derivative of the kernel" in caught.stdout
    # a second build has nothing to do
    again = subprocess.run([*opgen, "--project", str(project), "build", "--timings"], check=True, capture_output=True, text=True)
    assert "up to date" in again.stdout
    assert "seconds per step" in again.stdout and "obj/DEFAULT/csrc/ops/scale_rows.cpp.o" in again.stdout, again.stdout
    assert re.search(r"^ +[\d.]+  libmyops\.so$", again.stdout, re.M), again.stdout
