"""The properties that generated tests check, one function each, over a drawn Case.

Generated files (generated/tests/test_<op>.py) draw cases with opgen.strategies and call
these; the generic suite (opgen.op_suite) covers fixed cases of the same properties."""

from __future__ import annotations

import re

import torch

from . import testing
from .derivatives import fwd_over_rev_checkable
from .model import OpSpec
from .strategies import Case


def call(overload, op: OpSpec, tensors: dict, attrs: dict):
    args, kwargs = testing.call_args(op, tensors, attrs)
    return overload(*args, **kwargs)


def each(tensors: dict, fn) -> dict:
    """``fn`` applied to every tensor argument: inside lists (Tensor[]), skipping absent ones (Tensor?)."""
    def one(v):
        if v is None:
            return None
        if isinstance(v, (list, tuple)):
            return [fn(t) for t in v]
        return fn(v)

    return {k: one(v) for k, v in tensors.items()}


def flat(tensors: dict) -> list[tuple[str, torch.Tensor]]:
    """(argument name, tensor) of every tensor argument, list elements in order."""
    out = []
    for k, v in tensors.items():
        if isinstance(v, (list, tuple)):
            out += [(k, t) for t in v]
        elif v is not None:
            out.append((k, v))
    return out


def unflat(template: dict, leaves) -> dict:
    """``template`` with its tensors replaced, in ``flat`` order, by ``leaves``."""
    it = iter(leaves)
    return each(template, lambda _: next(it))


def outputs(value) -> tuple[torch.Tensor, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def assert_outputs_match(op: OpSpec, got, expected, dtype: str, what: str) -> None:
    """Floating outputs close to the float64 reference within the dtype's tolerance; integer
    outputs (indices) equal."""
    got, expected = outputs(got), outputs(expected)
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, reference has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        e = torch.as_tensor(e)
        assert g.shape == e.shape, f"{what}: output {i} has shape {tuple(g.shape)}, reference {tuple(e.shape)}"
        if g.is_floating_point():
            assert g.dtype == getattr(torch, dtype), f"{what}: output {i} has dtype {g.dtype}, expected {dtype}"
            testing.assert_close_to_reference(g.cpu(), e.to(torch.float64), dtype, what)
        elif e.is_floating_point():  # an integer op: the float64 reference of integer inputs is exact
            assert g.dtype == getattr(torch, dtype), f"{what}: output {i} has dtype {g.dtype}, expected {dtype}"
            torch.testing.assert_close(g.cpu(), e.cpu().to(g.dtype), atol=0, rtol=0, msg=lambda m: f"{what}: output {i}: {m}")
        else:  # indices
            assert g.dtype == e.dtype, f"{what}: output {i} has dtype {g.dtype}, reference {e.dtype}"
            torch.testing.assert_close(g.cpu(), e.cpu(), atol=0, rtol=0, msg=lambda m: f"{what}: output {i}: {m}")


def matches_reference(overload, op: OpSpec, namespace: str, case: Case) -> None:
    tensors = case.tensors(op)
    out = call(overload, op, tensors, case.attrs)
    ref = testing.reference_fn(namespace, op)
    expected = call(ref, op, each(tensors, lambda v: v.to(torch.float64)), case.attrs)
    assert_outputs_match(op, out, expected, case.dtype, f"{op.name} {case}")


def meta_matches_cpu(overload, op: OpSpec, case: Case) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    tensors = case.tensors(op)
    real = outputs(call(overload, op, tensors, case.attrs))
    with FakeTensorMode() as mode:
        fake = outputs(call(overload, op, each(tensors, mode.from_tensor), case.attrs))
    for f, r in zip(fake, real, strict=True):
        assert (f.shape, f.dtype, f.stride(), f.device.type) == (r.shape, r.dtype, r.stride(), r.device.type)


def gradients_check(overload, op: OpSpec, case: Case, differentiable: list[str]) -> None:
    """gradcheck and gradgradcheck over the differentiable inputs but those whose gradient is a
    surrogate (test.surrogate: finite differences cannot check a straight-through estimator)."""
    template = case.tensors(op, dtype=torch.float64)
    checked = [n for n in differentiable if n not in op.test.surrogate]  # the template emits no test when none are left
    leaves = tuple(v.detach().requires_grad_(k in checked) for k, v in flat(template))

    def fn(*ts):
        return call(overload, op, unflat(template, ts), case.attrs)

    # Hand-written kernels have no forward-mode AD, and a hand-written backward no derivative.
    forward_ad = not op.is_custom
    double = not (op.is_custom and op.gradient is not None and op.gradient.kernel is not None)
    assert torch.autograd.gradcheck(fn, leaves, check_forward_ad=forward_ad)
    if double:
        assert torch.autograd.gradgradcheck(fn, leaves, check_fwd_over_rev=forward_ad and fwd_over_rev_checkable(op))


def backward_raises(overload, op: OpSpec, namespace: str, case: Case) -> None:
    """An op without a gradient: its floating outputs take part in autograd, and backward through
    them raises an error naming the op (not torch's warning and a missing gradient)."""
    template = case.tensors(op, dtype=torch.float64)
    leaves = tuple(v.detach().requires_grad_() for _, v in flat(template))
    floating = [o for o in outputs(call(overload, op, unflat(template, leaves), case.attrs)) if o.is_floating_point()]
    assert floating and all(o.requires_grad for o in floating), f"{op.name}: outputs outside autograd"
    try:
        torch.autograd.grad([o.sum() for o in floating], leaves, allow_unused=True)
    except RuntimeError as e:
        assert f"derivative for {namespace}::{op.name} is not implemented" in str(e), str(e)
    else:
        raise AssertionError(f"{op.name} has no gradient, yet backward through it passed")


def _writes_in_place(overload, op: OpSpec, tensors: dict, attrs: dict) -> bool:
    """Whether `<op>_` can write the result into the first argument: it has the result's shape (a
    larger result, a broadcast, is refused; inplace_matches_out_of_place checks that)."""
    return outputs(call(overload, op, tensors, attrs))[0].shape == tensors[op.schema.arguments[0].name].shape


def inplace_gradients_check(overload, inplace, op: OpSpec, case: Case, differentiable: list[str]) -> None:
    """`<op>_` into a copy of its first argument (a leaf can't be written in place) records the op's
    node on it: gradcheck and gradgradcheck through the in-place call, and the same gradients as the
    out-of-place op's."""
    template = case.tensors(op, dtype=torch.float64)
    first = op.schema.arguments[0].name
    if not _writes_in_place(overload, op, template, case.attrs):
        return
    checked = [n for n in differentiable if n not in op.test.surrogate]
    names = [k for k, _ in flat(template)]
    leaves = tuple(v.detach().requires_grad_(k in checked) for k, v in flat(template))

    def written(*ts):
        tensors = unflat(template, ts)
        tensors[first] = tensors[first] * 1  # not a leaf; a leaf that requires grad is refused
        assert call(inplace, op, tensors, case.attrs) is None
        return tensors[first]

    def fn(*ts):  # the first argument laid out as `written` gets it, so both take the same kernel path
        tensors = unflat(template, ts)
        tensors[first] = tensors[first] * 1
        return call(overload, op, tensors, case.attrs)

    assert torch.autograd.gradcheck(written, leaves, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(written, leaves, check_fwd_over_rev=fwd_over_rev_checkable(op))
    wanted = [t for t in leaves if t.requires_grad]
    cotangent = torch.rand(template[first].shape, generator=torch.Generator().manual_seed(case.seed), dtype=torch.float64)
    got = torch.autograd.grad(written(*leaves), wanted, cotangent, allow_unused=True, materialize_grads=True)
    want = torch.autograd.grad(fn(*leaves), wanted, cotangent, allow_unused=True, materialize_grads=True)
    for name, g, w in zip([n for n, t in zip(names, leaves) if t.requires_grad], got, want, strict=True):
        torch.testing.assert_close(g, w, atol=0, rtol=0, equal_nan=True, msg=lambda m: f"{op.name}_: gradient of '{name}': {m}")


def opcheck(overload, op: OpSpec, case: Case) -> None:
    from hypothesis import assume

    args, kwargs = testing.call_args(op, case.tensors(op), case.attrs)
    # opcheck compares eager and traced outputs without equal_nan (aten.mean of an empty tensor
    # fails it too), so cases whose result holds NaN are left to the reference tests.
    assume(not any(o.is_floating_point() and bool(o.isnan().any()) for o in outputs(overload(*args, **kwargs))))
    torch.library.opcheck(overload, args, kwargs)


def _stacked(values):
    """One batched argument from per-sample values (None stays None; Tensor[] elements each)."""
    if values[0] is None:
        return None
    if isinstance(values[0], list):
        return [torch.stack(v) for v in zip(*values)]
    return torch.stack(values)


def vmap_matches_loop(overload, op: OpSpec, case: Case, inplace=None) -> None:
    """torch.vmap over three samples against calling the op on each: every tensor input batched,
    then only the first (the others shared). The generated batching rule (ops that broadcast) and
    functorch's per-sample fallback (the others) must both give what the op gives. With
    ``inplace``, vmap runs `<op>_` into a copy of the first argument instead."""
    import dataclasses

    samples = [dataclasses.replace(case, seed=case.seed + i).tensors(op) for i in range(3)]
    names = [a.name for a in op.tensor_inputs]
    if inplace is not None and not _writes_in_place(overload, op, samples[0], case.attrs):
        return

    def fn(*ts):
        tensors = dict(zip(names, ts))
        if inplace is None:
            return call(overload, op, tensors, case.attrs)
        tensors[names[0]] = tensors[names[0]].clone()
        call(inplace, op, tensors, case.attrs)
        return tensors[names[0]]

    for batched_names in (names, names[:1]):
        per_sample = [{n: s[n] if n in batched_names else samples[0][n] for n in names} for s in samples]
        args = [_stacked([s[n] for s in samples]) if n in batched_names else samples[0][n] for n in names]
        in_dims = tuple(0 if n in batched_names and a is not None else None for n, a in zip(names, args))
        got = outputs(torch.vmap(fn, in_dims=in_dims)(*args))
        want = [outputs(call(overload, op, s, case.attrs)) for s in per_sample]
        for i, g in enumerate(got):
            torch.testing.assert_close(g, torch.stack([w[i] for w in want]), equal_nan=True,
                                       msg=lambda m: f"{op.name}{'_' if inplace else ''}: vmap over {', '.join(batched_names)}, output {i}: {m}")


def autocast_casts_inputs(overload, op: OpSpec, case: Case) -> None:
    """Under torch.autocast on CPU, in bfloat16 and in float16, the op gives exactly what it gives
    on its inputs cast as ATen casts for its `autocast` policy (floating CPU tensors but float64);
    for `promote`, with the first tensor input in the autocast dtype and the others not."""
    tensors = case.tensors(op)
    first = op.tensor_inputs[0].name
    for low in (torch.bfloat16, torch.float16):
        inputs = dict(tensors)
        if op.autocast == "promote":
            inputs[first] = inputs[first].to(low)
        eligible = [t for _, t in flat(inputs) if t.is_floating_point() and t.dtype != torch.float64]
        to = {"lower_precision": low, "fp32": torch.float32,
              "promote": torch.float32 if any(t.dtype == torch.float32 for t in eligible) else low}[op.autocast]
        with torch.autocast("cpu", dtype=low):
            got = outputs(call(overload, op, inputs, case.attrs))
        cast = each(inputs, lambda t: t.to(to) if t.is_floating_point() and t.dtype != torch.float64 else t)
        want = outputs(call(overload, op, cast, case.attrs))
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.dtype == w.dtype, f"{op.name} under autocast({low}): output {i} has dtype {g.dtype}, want {w.dtype}"
            torch.testing.assert_close(g, w, atol=0, rtol=0, equal_nan=True,
                                       msg=lambda m: f"{op.name} under autocast({low}), output {i}: {m}")


def out_opcheck(overload, out_overload, op: OpSpec, case: Case) -> None:
    """opcheck of `<op>.out` into an `out` of the result's shape: its schema, FakeTensor and
    torch.compile's functionalization of the mutation. (Not into an `out` it must resize: torch
    2.14's auto_functionalize copies the result back into the unresized `out` and fails, for any
    custom op; eager resizing is checked by out_variant_matches_functional.)"""
    from hypothesis import assume

    args, kwargs = testing.call_args(op, case.tensors(op), case.attrs)
    (expected,) = outputs(overload(*args, **kwargs))
    assume(not (expected.is_floating_point() and bool(expected.isnan().any())))  # as in opcheck above
    torch.library.opcheck(out_overload, args, {**kwargs, "out": torch.empty_like(expected)})


def rejects_wrong_dtype(overload, op: OpSpec, namespace: str, case: Case, bad_dtype) -> None:
    tensors = case.tensors(op)
    first = op.tensor_inputs[0].name
    convert = (lambda t: t.to(bad_dtype)) if bad_dtype != torch.bool else (lambda t: t > 0)
    tensors[first] = each({first: tensors[first]}, convert)[first]
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
    matches torch.autograd on the float64 reference. With several outputs, also with each output's
    gradient alone given (the others None: outputs that were not used)."""
    tensors = case.tensors(op)
    outs = outputs(call(overload, op, tensors, case.attrs))
    gen = torch.Generator().manual_seed(case.seed + 1)
    cotangents = [torch.rand(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) * 2 - 1 for o in outs]
    env = {**tensors, **dict(zip(plan["results"], outs, strict=True))}
    rest = [env[s] for s in plan["saved"]] + [case.attrs[a] for a in plan["attributes"]]
    rest += [list(tensors[n].shape) if tensors[n] is not None else [] for n in plan["inputs"]]  # an absent Tensor?: []
    leaves = each(tensors, lambda v: v.detach().to(torch.float64))
    leaves = {k: v.requires_grad_(k in plan["inputs"]) if v is not None else None for k, v in leaves.items()}
    present = [n for n in plan["inputs"] if tensors[n] is not None]
    expected_out = outputs(call(testing.reference_fn(namespace, op), op, leaves, case.attrs))
    n = len(plan["inputs"])
    mask = [[True] * n] if n > 1 else []  # output_mask, with several gradients
    given_sets = [range(len(outs))] + ([[i] for i in range(len(outs))] if len(outs) > 1 else [])
    for given in given_sets:
        grads = backward(*[c if i in given else None for i, c in enumerate(cotangents)], *rest, *mask)
        grads = (grads,) if isinstance(grads, torch.Tensor) else tuple(grads)
        expected = dict(zip(present, torch.autograd.grad([expected_out[i] for i in given], [leaves[n] for n in present],
                                                         [cotangents[i].to(torch.float64) for i in given], allow_unused=True,
                                                         retain_graph=True)))
        which = "" if len(given) == len(outs) else f" (only {plan['grads'][given[0]]} given)"
        for name, got in zip(plan["inputs"], grads):
            if name not in expected:  # an absent Tensor?: its gradient is never asked for
                continue
            want = expected[name]
            assert got.shape == tensors[name].shape, f"gradient of '{name}'{which} has shape {tuple(got.shape)}, input has {tuple(tensors[name].shape)}"
            want = torch.zeros_like(leaves[name]) if want is None else want
            atol, rtol = testing.TOLERANCES[case.dtype]
            scale = max(1, outs[0].numel() // max(1, tensors[name].numel()))  # reduced gradients sum many terms
            torch.testing.assert_close(got.to(torch.float64), want, atol=atol * scale, rtol=rtol * scale, equal_nan=True,
                                       msg=lambda m: f"gradient of '{name}'{which}: {m}")
    if n > 1:  # each gradient asked for alone: the others are None, it is the same bit for bit
        full = backward(*cotangents, *rest, [True] * n)
        for i, name in enumerate(plan["inputs"]):
            alone = backward(*cotangents, *rest, [j == i for j in range(n)])
            assert [j for j, g in enumerate(alone) if g is not None] == [i], f"asked for the gradient of '{name}' alone, got {alone}"
            torch.testing.assert_close(alone[i], full[i], atol=0, rtol=0, equal_nan=True,
                                       msg=lambda m: f"gradient of '{name}' asked for alone: {m}")


def gradients_match_reference(overload, op: OpSpec, namespace: str, case: Case, differentiable: list[str]) -> None:
    """torch.autograd.grad through the op against the same through its float64 reference, for
    random cotangents of the outputs both differentiate (a reference such as
    torch.native_layer_norm may not differentiate all): the gradient formula (or backward kernel)
    of ops without a generated backward op, independently of gradcheck's finite differences."""
    template = case.tensors(op, dtype=torch.float64)
    runs = []
    for fn in (overload, testing.reference_fn(namespace, op)):
        leaves = [t.detach().clone().requires_grad_(k in differentiable) for k, t in flat(template)]
        runs.append((leaves, outputs(call(fn, op, unflat(template, leaves), case.attrs))))
    kept = [i for i, (a, b) in enumerate(zip(runs[0][1], runs[1][1], strict=True)) if a.requires_grad and b.requires_grad]
    gen = torch.Generator().manual_seed(case.seed + 2)
    cotangents = [torch.rand(runs[0][1][i].shape, generator=gen, dtype=torch.float64) * 2 - 1 for i in kept]
    grads = []
    for leaves, outs in runs:
        wanted = [t for t in leaves if t.requires_grad]
        got = torch.autograd.grad([outs[i] for i in kept], wanted, cotangents, allow_unused=True) if kept else [None] * len(wanted)
        grads.append([torch.zeros_like(t) if g is None else g for t, g in zip(wanted, got)])
    atol, rtol = testing.TOLERANCES["float64"]
    names = [k for k, _ in flat(template) if k in differentiable]
    for name, ours, want in zip(names, *grads, strict=True):
        torch.testing.assert_close(ours, want, atol=atol, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"{op.name}: gradient of '{name}' against the reference's: {m}")


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
    gpu = outputs(call(overload, op, case.tensors(op, device="cuda"), case.attrs))
    assert all(g.device.type == "cuda" for g in gpu), f"results on {[g.device for g in gpu]}"
    tensors = case.tensors(op)
    cpu = outputs(call(overload, op, tensors, case.attrs))
    expected = call(testing.reference_fn(namespace, op), op, each(tensors, lambda v: v.to(torch.float64)), case.attrs)
    assert [(g.shape, g.dtype) for g in gpu] == [(c.shape, c.dtype) for c in cpu]
    assert_outputs_match(op, gpu, expected, case.dtype, f"{op.name} CUDA {case}")
    assert_outputs_match(op, gpu, tuple(c.to(torch.float64) if c.is_floating_point() else c for c in cpu), case.dtype,
                         f"{op.name} CUDA vs CPU {case}")


def cuda_gradients_match_cpu(overload, op: OpSpec, case: Case, differentiable: list[str]) -> None:
    """loss.backward() through the CUDA forward and fused backward kernels against the CPU ones."""
    grads = {}
    for device in ("cpu", "cuda"):
        tensors = case.tensors(op, device=device)
        leaves = [v.detach().requires_grad_(k in differentiable) for k, v in flat(tensors)]
        out = outputs(call(overload, op, unflat(tensors, leaves), case.attrs))[0]
        gen = torch.Generator().manual_seed(case.seed + 1)
        cotangent = (torch.rand(out.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(device=device, dtype=out.dtype)
        out.backward(cotangent)
        grads[device] = [(k, leaf.grad) for (k, _), leaf in zip(flat(tensors), leaves) if k in differentiable]
    atol, rtol = testing.TOLERANCES[case.dtype]
    for (name, got), (_, want) in zip(grads["cuda"], grads["cpu"], strict=True):
        assert got.device.type == "cuda" and got.shape == want.shape, f"gradient of '{name}': {got.device} {tuple(got.shape)}"
        scale = max(1, out.numel() // max(1, want.numel()))  # reduced gradients sum many terms, in another order
        torch.testing.assert_close(got.cpu().to(torch.float64), want.to(torch.float64), atol=atol * scale, rtol=rtol * scale,
                                   equal_nan=True, msg=lambda m: f"gradient of '{name}' on CUDA vs CPU: {m}")


def out_variant_matches_functional(overload, out_overload, op: OpSpec, namespace: str, case: Case) -> None:
    """`<op>.out` writes what the functional op returns into `out`, whether `out` has the result's
    shape, is empty (resized) or is a non-contiguous view; it returns nothing; an `out` of another
    dtype gets the result cast when it can hold it (float64 for float32, as torch's out=) and is
    refused, naming the op, when it can't (an integer `out` of a float result)."""
    tensors = case.tensors(op)
    (expected,) = outputs(call(overload, op, tensors, case.attrs))
    args, kwargs = testing.call_args(op, tensors, case.attrs)
    reverse = tuple(range(expected.dim() - 1, -1, -1))
    outs = [torch.empty_like(expected), torch.empty(0, dtype=expected.dtype),
            torch.empty(expected.shape[::-1], dtype=expected.dtype).permute(reverse)]
    for out in outs:
        version = out._version
        assert out_overload(*args, **kwargs, out=out) is None
        assert out._version > version, f"{op.name}.out: the version counter of out was not bumped (autograd would miss the write)"
        assert out.shape == expected.shape, f"{op.name}.out: out has shape {tuple(out.shape)}, the result {tuple(expected.shape)}"
        torch.testing.assert_close(out, expected, equal_nan=True, msg=lambda m: f"{op.name}.out: {m}")
    wider = torch.float64 if expected.dtype != torch.float64 else torch.float32
    out = torch.empty(expected.shape, dtype=wider)
    assert out_overload(*args, **kwargs, out=out) is None
    torch.testing.assert_close(out, expected.to(wider), equal_nan=True, msg=lambda m: f"{op.name}.out into {wider}: {m}")
    if expected.dtype == torch.bool:
        return  # a bool result fits any dtype
    other = torch.int32 if expected.is_floating_point() else torch.bool
    try:
        out_overload(*args, **kwargs, out=torch.empty(expected.shape, dtype=other))
    except TypeError as e:
        assert f"{namespace}.{op.name}(): argument 'out' has dtype" in str(e) and "can't hold" in str(e), str(e)
    else:
        raise AssertionError(f"{op.name}.out accepted an out of dtype {other}")


def inplace_matches_out_of_place(overload, inplace, op: OpSpec, namespace: str, case: Case) -> None:
    """`<op>_` writes exactly the out-of-place result into its first argument when that has the
    result's shape, and refuses (naming the argument) when the result is larger (a broadcast)."""
    tensors = case.tensors(op)
    first = op.schema.arguments[0].name
    # the first argument contiguous in both calls, so both take the same kernel path (a vectorized
    # tanh and a scalar one may differ in the last bit)
    tensors[first] = tensors[first].contiguous()
    expected = call(overload, op, tensors, case.attrs)
    target = tensors[first].clone()
    tensors[first] = target
    if expected.shape != target.shape:
        try:
            call(inplace, op, tensors, case.attrs)
        except RuntimeError as e:
            assert f"{namespace}.{op.name}_(): the result has shape" in str(e) and f"of '{first}'" in str(e), str(e)
        else:
            raise AssertionError(f"{op.name}_ wrote a result of shape {tuple(expected.shape)} into '{first}' of shape {tuple(target.shape)}")
        return
    version = target._version
    assert call(inplace, op, tensors, case.attrs) is None
    torch.testing.assert_close(target, expected, atol=0, rtol=0, equal_nan=True)
    assert target._version > version, "the version counter of the tensor written in place was not bumped"
