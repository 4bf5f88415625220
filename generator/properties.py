"""The properties that generated tests check, one function each, over a drawn Case.

Generated files (generated/tests/test_<op>.py) draw cases with opgen.strategies and call
these; the generic suite (opgen.op_suite) covers fixed cases of the same properties."""

from __future__ import annotations

import re

import torch

from . import testing
from .model import OpSpec
from .strategies import Case


def call(overload, op: OpSpec, tensors: dict, attrs: dict):
    args, kwargs = testing.call_args(op, tensors, attrs)
    return overload(*args, **kwargs)


def matches_reference(overload, op: OpSpec, namespace: str, case: Case) -> None:
    tensors = case.tensors(op)
    out = call(overload, op, tensors, case.attrs)
    ref = testing.reference_fn(namespace, op)
    expected = call(ref, op, {k: v.to(torch.float64) for k, v in tensors.items()}, case.attrs)
    expected = torch.as_tensor(expected, dtype=torch.float64)
    assert out.shape == expected.shape, f"shape {tuple(out.shape)} != reference {tuple(expected.shape)}"
    assert out.dtype == getattr(torch, case.dtype), f"dtype {out.dtype} != {case.dtype}"
    testing.assert_close_to_reference(out, expected, case.dtype, f"{op.name} {case}")


def meta_matches_cpu(overload, op: OpSpec, case: Case) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    tensors = case.tensors(op)
    real = call(overload, op, tensors, case.attrs)
    with FakeTensorMode() as mode:
        fake = call(overload, op, {k: mode.from_tensor(v) for k, v in tensors.items()}, case.attrs)
    assert (fake.shape, fake.dtype, fake.stride(), fake.device.type) == (real.shape, real.dtype, real.stride(), real.device.type)


def gradients_check(overload, op: OpSpec, case: Case, differentiable: list[str]) -> None:
    tensors = {k: v.detach().requires_grad_(k in differentiable) for k, v in case.tensors(op, dtype=torch.float64).items()}
    names = list(tensors)

    def fn(*ts):
        return call(overload, op, dict(zip(names, ts)), case.attrs)

    assert torch.autograd.gradcheck(fn, tuple(tensors.values()), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, tuple(tensors.values()), check_fwd_over_rev=True)


def opcheck(overload, op: OpSpec, case: Case) -> None:
    args, kwargs = testing.call_args(op, case.tensors(op), case.attrs)
    torch.library.opcheck(overload, args, kwargs)


def rejects_wrong_dtype(overload, op: OpSpec, namespace: str, case: Case, bad_dtype) -> None:
    tensors = case.tensors(op)
    first = op.tensor_inputs[0].name
    tensors[first] = tensors[first].to(bad_dtype) if bad_dtype != torch.bool else tensors[first] > 0
    pattern = rf"{re.escape(namespace)}\.{op.name}\(\): argument '{first}' has dtype {re.escape(str(bad_dtype))}"
    try:
        call(overload, op, tensors, case.attrs)
    except TypeError as e:
        assert re.search(pattern, str(e)), str(e)
    else:
        raise AssertionError(f"{op.name} accepted dtype {bad_dtype}")


def rejects_failed_check(overload, op: OpSpec, namespace: str, case: Case, attrs: dict, check: str) -> None:
    tensors = case.tensors(op)
    try:
        call(overload, op, tensors, attrs)
    except ValueError as e:
        assert f"{namespace}.{op.name}(): check '{check}' failed" in str(e), str(e)
    else:
        raise AssertionError(f"{op.name} accepted {attrs}, which fails '{check}'")


def backward_matches_reference(overload, backward, op: OpSpec, namespace: str, case: Case, plan: dict) -> None:
    """Calls the generated `<op>_backward` op directly: each gradient has its input's shape and
    matches torch.autograd on the float64 reference."""
    tensors = case.tensors(op)
    out = call(overload, op, tensors, case.attrs)
    gen = torch.Generator().manual_seed(case.seed + 1)
    grad = torch.rand(out.shape, generator=gen, dtype=torch.float64).to(out.dtype) * 2 - 1
    env = {**tensors, "result": out}
    args = [grad] + [env[s] for s in plan["saved"]] + [case.attrs[a] for a in plan["attributes"]]
    args += [list(tensors[n].shape) for n in plan["inputs"]]
    grads = backward(*args)
    grads = (grads,) if isinstance(grads, torch.Tensor) else tuple(grads)
    leaves = {k: v.detach().to(torch.float64).requires_grad_(k in plan["inputs"]) for k, v in tensors.items()}
    expected_out = call(testing.reference_fn(namespace, op), op, leaves, case.attrs)
    expected = torch.autograd.grad(expected_out, [leaves[n] for n in plan["inputs"]], grad.to(torch.float64), allow_unused=True)
    for name, got, want in zip(plan["inputs"], grads, expected):
        assert got.shape == tensors[name].shape, f"gradient of '{name}' has shape {tuple(got.shape)}, input has {tuple(tensors[name].shape)}"
        want = torch.zeros_like(leaves[name]) if want is None else want
        atol, rtol = testing.TOLERANCES[case.dtype]
        scale = max(1, out.numel() // max(1, tensors[name].numel()))  # reduced gradients sum many terms
        torch.testing.assert_close(got.to(torch.float64), want, atol=atol * scale, rtol=rtol * scale, equal_nan=True,
                                   msg=lambda m: f"gradient of '{name}': {m}")


def rejects_shape_violation(overload, op: OpSpec, namespace: str, case: Case, bad_index: int) -> None:
    """Input ``bad_index`` gets a last dimension that broadcasts with the first input's: the error names it."""
    tensors = case.tensors(op)
    names = [a.name for a in op.tensor_inputs]
    first = tensors[names[0]]
    if first.dim() == 0:
        first = torch.zeros(3, 5, dtype=first.dtype)
    last = first.shape[-1]
    if last == 1:
        last = 2
        first = torch.zeros(*first.shape[:-1], 2, dtype=first.dtype)
    tensors[names[0]] = first
    bad_name = names[bad_index]
    tensors[bad_name] = torch.zeros(last + 1 if last > 0 else 2, dtype=first.dtype)
    try:
        call(overload, op, tensors, case.attrs)
    except RuntimeError as e:
        assert f"{namespace}.{op.name}(): argument '{bad_name}' has shape" in str(e), str(e)
    else:
        shapes = {k: tuple(v.shape) for k, v in tensors.items()}
        raise AssertionError(f"{op.name} accepted shapes {shapes}, which violate {op.shape}")


def cuda_matches_reference_and_cpu(overload, op: OpSpec, namespace: str, case: Case) -> None:
    """The CUDA kernel on the same case, layouts included: close to the float64 reference and to
    the CPU kernel."""
    gpu = call(overload, op, case.tensors(op, device="cuda"), case.attrs)
    assert gpu.device.type == "cuda", f"result on {gpu.device}"
    tensors = case.tensors(op)
    cpu = call(overload, op, tensors, case.attrs)
    expected = call(testing.reference_fn(namespace, op), op, {k: v.to(torch.float64) for k, v in tensors.items()}, case.attrs)
    assert (gpu.shape, gpu.dtype) == (cpu.shape, cpu.dtype)
    testing.assert_close_to_reference(gpu.cpu(), torch.as_tensor(expected, dtype=torch.float64), case.dtype, f"{op.name} CUDA {case}")
    testing.assert_close_to_reference(gpu.cpu(), cpu.to(torch.float64), case.dtype, f"{op.name} CUDA vs CPU {case}")


def cuda_gradients_match_cpu(overload, op: OpSpec, case: Case, differentiable: list[str]) -> None:
    """loss.backward() through the CUDA forward and fused backward kernels against the CPU ones."""
    grads = {}
    for device in ("cpu", "cuda"):
        tensors = {k: v.detach().requires_grad_(k in differentiable) for k, v in case.tensors(op, device=device).items()}
        out = call(overload, op, tensors, case.attrs)
        gen = torch.Generator().manual_seed(case.seed + 1)
        cotangent = (torch.rand(out.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(device=device, dtype=out.dtype)
        out.backward(cotangent)
        grads[device] = {n: tensors[n].grad for n in differentiable}
    atol, rtol = testing.TOLERANCES[case.dtype]
    for name in differentiable:
        got, want = grads["cuda"][name], grads["cpu"][name]
        assert got.device.type == "cuda" and got.shape == want.shape, f"gradient of '{name}': {got.device} {tuple(got.shape)}"
        scale = max(1, out.numel() // max(1, want.numel()))  # reduced gradients sum many terms, in another order
        torch.testing.assert_close(got.cpu().to(torch.float64), want.to(torch.float64), atol=atol * scale, rtol=rtol * scale,
                                   equal_nan=True, msg=lambda m: f"gradient of '{name}' on CUDA vs CPU: {m}")
