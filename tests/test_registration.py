"""The dispatcher-facing side of generated ops: opcheck, FakeTensor/Meta, torch.compile,
error messages for bad calls, and both CPU capability builds of every kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from opgen import testing

from .conftest import ROOT
from .test_ops import OPS


@pytest.fixture(params=OPS)
def op(request, shipped_library):
    return next(o for o in shipped_library.ops if o.name == request.param)


def _call_args(op, tensors, attrs):
    args, kwargs = [], {}
    for a in op.schema.arguments:
        value = tensors[a.name] if a.is_tensor else attrs[a.name]
        (kwargs.__setitem__(a.name, value) if a.kwarg_only else args.append(value))
    return tuple(args), kwargs


def _sample(op, shapes=None, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = shapes or [(3, 4)] * len(op.tensor_inputs)
    tensors = {a.name: testing.make_tensor(op, a.name, s, dtype, gen) for a, s in zip(op.tensor_inputs, shapes)}
    return tensors


def test_opcheck(op, built_ops):
    overload = getattr(built_ops, op.name).default
    broadcast = [(2, 1, 4)] + [(3, 1)] * (len(op.tensor_inputs) - 1)
    for shapes in (None, broadcast, [()] * len(op.tensor_inputs)):
        for attrs in testing.attribute_sets(op, limit=2):
            args, kwargs = _call_args(op, _sample(op, shapes), attrs)
            torch.library.opcheck(overload, args, kwargs)


def test_fake_tensor_matches_cpu(op, built_ops):
    from torch._subclasses.fake_tensor import FakeTensorMode

    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    tensors = _sample(op, [(5, 1, 3)] + [(4, 1)] * (len(op.tensor_inputs) - 1))
    real = overload(*_call_args(op, tensors, attrs)[0], **_call_args(op, tensors, attrs)[1])
    with FakeTensorMode() as mode:
        fake_tensors = {k: mode.from_tensor(v) for k, v in tensors.items()}
        args, kwargs = _call_args(op, fake_tensors, attrs)
        fake = overload(*args, **kwargs)
    assert (fake.shape, fake.dtype, fake.stride()) == (real.shape, real.dtype, real.stride())


def test_compile_fullgraph_two_ops(built_ops):
    ops = built_ops

    def f(a, b):
        return ops.gelu(ops.weighted_sum(a, b, weight=0.5), approximate="tanh")

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    a, b = torch.randn(8, 16), torch.randn(16)
    torch.testing.assert_close(compiled(a, b), f(a, b))
    a2, b2 = torch.randn(3, 5), torch.randn(3, 5)
    torch.testing.assert_close(compiled(a2, b2), f(a2, b2))


def test_export_records_the_op(built_ops):
    class M(torch.nn.Module):
        def forward(self, x, y):
            return built_ops.add(built_ops.relu(x), y, alpha=2.0)

    ep = torch.export.export(M(), (torch.randn(4, 4), torch.randn(4)))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "opgen_ops.relu.default" in targets and "opgen_ops.add.default" in targets
    x, y = torch.randn(4, 4), torch.randn(4)
    torch.testing.assert_close(ep.module()(x, y), torch.relu(x) + 2 * y)


# ---- bad calls ---------------------------------------------------------------------------


def test_wrong_dtype_names_op_and_argument(op, built_ops):
    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    first = op.tensor_inputs[0].name
    tensors = _sample(op)
    tensors[first] = torch.arange(12).reshape(3, 4)
    args, kwargs = _call_args(op, tensors, attrs)
    with pytest.raises(TypeError, match=rf"opgen_ops\.{op.name}\(\): argument '{first}' has dtype torch\.int64"):
        overload(*args, **kwargs)


def test_broadcast_violation_names_argument(op, built_ops):
    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    if len(op.tensor_inputs) < 2:
        pytest.skip("needs two tensor inputs")
    tensors = _sample(op, [(3, 4)] + [(5,)] * (len(op.tensor_inputs) - 1))
    args, kwargs = _call_args(op, tensors, attrs)
    second = op.tensor_inputs[1].name
    with pytest.raises(RuntimeError, match=rf"opgen_ops\.{op.name}\(\): argument '{second}' has shape \[5\]"):
        overload(*args, **kwargs)


def test_failed_checks_name_the_condition(op, built_ops):
    overload = getattr(built_ops, op.name).default
    bad = testing.invalid_attribute_sets(op)
    if not op.checks:
        pytest.skip("no checks")
    assert bad, f"could not build a violating call for {op.name}'s checks"
    for attrs, text in bad:
        args, kwargs = _call_args(op, _sample(op), attrs)
        with pytest.raises(ValueError) as info:
            overload(*args, **kwargs)
        assert f"opgen_ops.{op.name}(): check '{text}' failed" in str(info.value)


def test_device_mismatch_names_argument(built_ops):
    with pytest.raises(RuntimeError, match=r"opgen_ops\.weighted_sum\(\): argument 'b' is on meta but argument 'a' is on cpu"):
        built_ops.weighted_sum(torch.randn(3), torch.randn(3, device="meta"))


def test_wrong_argument_types_name_op_and_argument(built_ops, typed_api):
    with pytest.raises(RuntimeError, match=r"weighted_sum.*weight"):
        built_ops.weighted_sum(torch.randn(3), torch.randn(3), weight="heavy")
    with pytest.raises(TypeError, match="weight"):
        typed_api.weighted_sum(torch.randn(3), torch.randn(3), 2.0)  # keyword-only
    with pytest.raises(RuntimeError, match=r"clamp.*min"):
        built_ops.clamp(torch.randn(3), max=1.0)


def test_undefined_tensor_is_rejected(built_ops):
    with pytest.raises((ValueError, RuntimeError), match="relu"):
        built_ops.relu(None)


# ---- both kernel builds ----------------------------------------------------------------------

_CAPABILITY_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {python!r})
import opgen
from opgen import testing
from opgen.config import load_config
from opgen.library import load_library
cfg = load_config({root!r})
opgen.load({root!r})
import importlib
api = importlib.import_module(cfg.namespace)
from torch._C import _get_cpu_capability
print("capability", _get_cpu_capability())
gen = torch.Generator().manual_seed(0)
for op in load_library(cfg).ops:
    attrs = testing.attribute_sets(op)[0]
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16"), (torch.float64, "float64")):
        tensors = [testing.make_tensor(op, a.name, (37, 29), dtype, gen) for a in op.tensor_inputs]
        kwargs = {{a.name: attrs[a.name] for a in op.attributes}}
        out = getattr(api, op.name)(*tensors, **kwargs)
        ref = testing.reference_fn(cfg.namespace, op)(*[t.double() for t in tensors], **kwargs)
        testing.assert_close_to_reference(out, ref, name, op.name)
print("ok")
"""


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_each_cpu_capability_kernel(capability, built_ops):
    if capability == "avx2" and "AVX2" not in torch.backends.cpu.get_cpu_capability() and "AVX512" not in torch.backends.cpu.get_cpu_capability():
        pytest.skip("this CPU has no AVX2")
    script = _CAPABILITY_SCRIPT.format(python=str(ROOT / "generated" / "python"), root=str(ROOT))
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"capability {capability.upper()}" in proc.stdout and "ok" in proc.stdout
