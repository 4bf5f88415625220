"""Every function of the expression language, compiled: tests/math_specs/ gives each its own
output of two ops (unary_math, binary_math), built as a user project. At every CPU capability, on
the flat vectorized loop and on the TensorIterator's strided one, each output must match torch's
function of the same name at the same dtype, special values included (NaN, infinities, signed
zeros, halves for round), and each derived gradient torch.autograd's. Then `opgen test` runs the
generic suite and the generated property tests on both ops (gradcheck, gradgradcheck, jvp, vmap,
opcheck, float64 references). .ci/cuda compiles the same two specs with nvcc."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opgen import testing
from opgen.build import capabilities

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "tests" / "math_specs"

SCRIPT = r"""
import math, sys, torch, opgen
ops = opgen.load(sys.argv[1])
UNARY = ["exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos",
         "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "abs", "sign", "floor", "ceil", "trunc", "round", "softplus"]
# torch's function of each name; log1p(exp(x)) against logaddexp(x, 0), exact where exp(x) overflows,
# computed in float64 and rounded: torch's float32 logaddexp at AVX2 is an ulp off where the result
# is subnormal (softplus(-100) = 26.5 * 2^-149 gives 28 of them), and a relative tolerance there asks
# for every bit
UNARY_FN = {**{name: getattr(torch, name) for name in UNARY[:-1]},
            "softplus": lambda t: torch.logaddexp(t.double(), torch.zeros((), dtype=torch.float64)).to(t.dtype)}
BINARY = {"minimum": torch.minimum, "maximum": torch.maximum, "pow": lambda x, y: torch.pow(y, x), "atan2": torch.atan2,
          "hypot": torch.hypot, "fmod": torch.fmod, "remainder": torch.remainder, "clamp": lambda x, y: torch.clamp(x, -y, y),
          "clamp_attr": lambda x, y: torch.clamp(x, -1.0, 1.0), "where": lambda x, y: torch.where(x > y, x, y)}
EXACT = {"abs", "sign", "floor", "ceil", "trunc", "round", "minimum", "maximum", "fmod", "remainder", "clamp", "clamp_attr", "where"}
SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0, 3.0, -3.0,
           1e-30, -1e-30, 0.99, -0.99, 1.01, 100.0, -100.0, 1e30, -1e30]
RTOL = {torch.float32: 5e-7, torch.float64: 1e-14}  # a few ulps: SLEEF's vector functions and glibc's differ


# The elements compared: all, but for fmod and remainder, whose vectors go through SLEEF's fmod
# (at::vec's, as torch.fmod's vector loop does): NaN once a / b overflows the dtype.
def compared(name, inputs):
    if name not in ("fmod", "remainder"):
        return torch.ones(inputs[0].shape, dtype=torch.bool)
    u, v = inputs
    return ~((u.double() / v.double()).abs() > torch.finfo(u.dtype).max)


def same(got, fn, inputs, name, where):
    what = f"{name} ({where}, {got.dtype})"
    if name in EXACT:  # bit for bit, zeros' signs included, against float64
        keep = compared(name, inputs)
        got, want = got[keep], fn(*(t.double() for t in inputs)).to(got.dtype)[keep]
        assert torch.equal(got.isnan(), want.isnan()), what
        assert torch.equal(got.nan_to_num(), want.nan_to_num()), (what, got, want)
        assert torch.equal(got.signbit() | got.isnan(), want.signbit() | want.isnan()), what
    else:
        want = fn(*inputs)
        torch.testing.assert_close(got, want, rtol=RTOL[got.dtype], atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


for dtype in (torch.float32, torch.float64):
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(203, generator=gen, dtype=torch.float64) * 8 - 4).to(dtype)  # full vectors of every width and a tail
    x[::4] = torch.tensor(SPECIAL, dtype=dtype).repeat(3)[: len(x[::4])]
    for t, where in ((x, "flat loop"), (x[::2], "strided")):
        for name, got in zip(UNARY, ops.unary_math(t), strict=True):
            same(got, UNARY_FN[name], (t,), name, where)
    grid = torch.tensor(SPECIAL, dtype=dtype)
    a, b = grid[:, None].expand(len(SPECIAL), len(SPECIAL)), grid[None, :].expand(len(SPECIAL), len(SPECIAL))
    for u, v, where in ((a.contiguous(), b.contiguous(), "flat loop"), (a, b, "broadcast")):
        for (name, fn), got in zip(BINARY.items(), ops.binary_math(u, v), strict=True):
            same(got, fn, (u, v), name, where)
        # per-call bounds: a loop for bounds that are not NaN, and one for those that may be
        for lo, hi in ((-0.5, 2.0), (math.nan, 1.0), (-1.0, math.nan), (1.0, -1.0), (-math.inf, math.inf)):
            got = ops.binary_math(u, v, lo=lo, hi=hi)[list(BINARY).index("clamp_attr")]
            same(got, lambda t: torch.clamp(t, torch.tensor(lo, dtype=t.dtype), torch.tensor(hi, dtype=t.dtype)), (u,),
                 "clamp_attr", f"{where}, lo={lo}, hi={hi}")

# Gradients against torch.autograd of torch's functions, each output's alone, over values where
# other outputs' derivatives are not finite (log's at 0, sqrt's below, asin's beyond 1): an output
# that was not used contributes nothing to the fused backward, not 0 * NaN.
gen = torch.Generator().manual_seed(1)
x = (torch.rand(203, generator=gen, dtype=torch.float64) * 8 - 4)
x[:9] = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, 1e-300, -1e-300])  # domain edges, round's ties
x.requires_grad_()
outs = ops.unary_math(x)
for name, out in zip(UNARY, outs, strict=True):
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    (want,) = torch.autograd.grad(UNARY_FN[name](x), x, g)
    for create_graph in (False, True):  # the fused backward op; the formulas as ATen ops
        (got,) = torch.autograd.grad(out, x, g, retain_graph=True, create_graph=create_graph)
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"gradient of {name} ({create_graph=}): {m}")
x = (torch.rand(203, generator=gen, dtype=torch.float64) * 6 - 3).requires_grad_()
y = (torch.rand(203, generator=gen, dtype=torch.float64) * 6 - 3).requires_grad_()
x.data[:5] = y.data[:5]  # ties of minimum / maximum: the gradient is split evenly, as torch's
x.data[5:8], y.data[5:8] = 0.0, 0.0  # atan2's and hypot's derivatives are NaN at the origin
outs = ops.binary_math(x, y)
for (name, fn), out in zip(BINARY.items(), outs, strict=True):
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    got = torch.autograd.grad(out, (x, y), g, retain_graph=True)
    want = torch.autograd.grad(fn(x, y), (x, y), g, allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m: f"gradient of {name}: {m}")
print("functions ok", torch.backends.cpu.get_cpu_capability())
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory, built_ops):  # built_ops: the shipped library's build made the shared precompiled headers
    root = tmp_path_factory.mktemp("math") / "mathfns"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "mathfns"\n')
    for spec in SPECS.glob("*.yaml"):
        shutil.copy(spec, root / "specs")
    opgen = [sys.executable, "-m", "opgen", "--project", str(root)]
    subprocess.run([*opgen, "generate"], check=True, capture_output=True)
    build = subprocess.run([*opgen, "build"], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    return root


def test_every_function_matches_torch_at_every_cpu_capability(project):
    runnable = testing.runnable_cpu_capabilities()
    for capability in [c.lower() for c in capabilities() if c in runnable]:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(project)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-6000:]
        assert f"functions ok {capability.upper()}" in proc.stdout, proc.stdout


def test_generic_suite_and_property_tests_pass_on_every_function(project):
    suite = subprocess.run([sys.executable, "-m", "opgen", "--project", str(project), "test", "-q"],
                           capture_output=True, text=True)
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    assert " passed" in suite.stdout and "failed" not in suite.stdout
