"""Every shipped op against its float64 reference: broadcasting, layouts, empty, 0-dim, dtypes."""

from __future__ import annotations

import itertools

import pytest
import torch

from opgen import testing
from opgen.model import OpSpec

from .conftest import ROOT

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _spec_names():
    from opgen.config import load_config
    from opgen.library import load_library

    return [op.name for op in load_library(load_config(ROOT)).ops]


OPS = _spec_names()


@pytest.fixture(params=OPS)
def op(request, shipped_library) -> OpSpec:
    return next(o for o in shipped_library.ops if o.name == request.param)


def _shapes(op: OpSpec) -> list[list[tuple[int, ...]]]:
    """Input shapes per case that satisfy the op's shape rule."""
    n = len(op.tensor_inputs)
    cases = [[(4, 5)] * n, [()] * n, [(0, 3)] * n, [(2, 1, 3)] * n, [(7,)] * n]
    if op.shape.kind == "broadcast" and n >= 2:
        cases += [[(4, 1, 5)] + [(3, 1)] * (n - 1), [(5,)] + [(2, 5)] * (n - 1), [()] + [(3, 2)] * (n - 1),
                  [(0, 4)] + [(4,)] * (n - 1)]
    return cases


def _run(api, spec: OpSpec, namespace, tensors, attrs):
    fn = getattr(api, spec.name)
    args = []
    kwargs = {}
    for a in spec.schema.arguments:
        value = tensors[a.name] if a.is_tensor else attrs[a.name]
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    out = fn(*args, **kwargs)
    ref_args = [t.to(torch.float64) if torch.is_tensor(t) else t for t in args]
    ref_kwargs = {k: v.to(torch.float64) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    expected = testing.reference_fn(namespace, spec)(*ref_args, **ref_kwargs)
    return out, torch.as_tensor(expected, dtype=torch.float64)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_matches_reference(op, dtype, typed_api, project_config):
    if dtype not in [d.name for d in op.dtypes]:
        pytest.skip(f"{op.name} does not support {dtype}")
    gen = torch.Generator().manual_seed(0)
    for shapes, attrs in itertools.product(_shapes(op), testing.attribute_sets(op)):
        tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[dtype], gen) for a, s in zip(op.tensor_inputs, shapes)}
        out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
        assert out.shape == expected.shape, f"{op.name} {shapes}: shape {out.shape} != {expected.shape}"
        assert out.dtype == DTYPES[dtype]
        testing.assert_close_to_reference(out, expected, dtype, f"{op.name} shapes={shapes} attrs={attrs}")


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_non_contiguous_inputs(op, layout, typed_api, project_config):
    gen = torch.Generator().manual_seed(1)
    attrs = testing.attribute_sets(op)[0]
    tensors = {a.name: testing.make_tensor(op, a.name, (6, 9), torch.float32, gen, layout) for a in op.tensor_inputs}
    assert not next(iter(tensors.values())).is_contiguous()
    out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
    testing.assert_close_to_reference(out, expected, "float32", f"{op.name} {layout}")


def test_every_attribute_set(op, typed_api, project_config):
    gen = torch.Generator().manual_seed(2)
    for attrs in testing.attribute_sets(op, limit=12):
        tensors = {a.name: testing.make_tensor(op, a.name, (33,), torch.float64, gen) for a in op.tensor_inputs}
        out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
        testing.assert_close_to_reference(out, expected, "float64", f"{op.name} attrs={attrs}")


def test_large_input_uses_parallel_vector_path(op, typed_api, project_config):
    gen = torch.Generator().manual_seed(3)
    attrs = testing.attribute_sets(op)[0]
    tensors = {a.name: testing.make_tensor(op, a.name, (257, 1031), torch.float32, gen) for a in op.tensor_inputs}
    out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
    testing.assert_close_to_reference(out, expected, "float32", f"{op.name} large")


def test_mixed_dtypes_promote_like_torch(op, typed_api, project_config):
    if len(op.tensor_inputs) < 2:
        pytest.skip("one tensor input")
    gen = torch.Generator().manual_seed(4)
    attrs = testing.attribute_sets(op)[0]
    names = [a.name for a in op.tensor_inputs]
    tensors = {n: testing.make_tensor(op, n, (3, 4), torch.float32 if i == 0 else torch.float64, gen) for i, n in enumerate(names)}
    out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
    assert out.dtype == torch.float64
    # a 0-dim float64 tensor does not promote a float16 tensor, as in torch
    tensors = {n: testing.make_tensor(op, n, (3, 4) if i == 0 else (), torch.float16 if i == 0 else torch.float64, gen)
               for i, n in enumerate(names)}
    out, expected = _run(typed_api, op, project_config.namespace, tensors, attrs)
    assert out.dtype == torch.float16
    testing.assert_close_to_reference(out, expected, "float16", f"{op.name} 0-dim promotion")


def test_typed_wrapper_matches_torch_ops(op, typed_api, built_ops):
    fn = getattr(typed_api, op.name)
    assert op.schema.name in fn.__doc__ or op.doc.split()[0] in fn.__doc__
    assert getattr(built_ops, op.name).default._schema.name.endswith(op.name)
