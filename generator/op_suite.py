"""The property suite every opgen project gets for free: `opgen test` runs it against the
project's specs and built extension (and this repository's tests run it on the shipped library).

Each op is checked against its float64 reference on broadcast, transposed, sliced, expanded,
empty, 0-dim and large inputs in every dtype it declares; through `torch.library.opcheck`;
FakeTensor against CPU metadata; bad calls (dtype, shape, failed checks) for their messages;
and each kernel build the CPU can run (DEFAULT, AVX2, AVX512), each in its own process.

The project is the folder in $OPGEN_PROJECT (default: the current folder). The extension is
built first (incrementally) unless OPGEN_SKIP_BUILD=1.
"""

from __future__ import annotations

import importlib
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opgen import expr as E
from opgen import testing
from opgen.config import load_config
from opgen.derivatives import fwd_over_rev_checkable
from opgen.dest import backward, hoist
from opgen.dest.autograd_cpp import node_name
from opgen.library import load_library
from opgen.model import OpSpec

PROJECT = Path(os.environ.get("OPGEN_PROJECT", ".")).resolve()
_CONFIG = load_config(PROJECT)
_LIBRARY = load_library(_CONFIG)
NAMESPACE = _CONFIG.namespace
# Fixed cases for pointwise ops with floating outputs (one or several); comparisons, reductions and hand-written
# kernels get their generated property tests (hypothesis draws the reduced dims per shape, the
# elements of Tensor[] and the presence of Tensor?) and, in this repository, their own tests.
OPS = [op.name for op in _LIBRARY.ops if op.is_pointwise and not op.kernel.bool_output]
# Pointwise comparisons (bool output): their vector loops store masks as bools, checked below.
CONDITIONS = [op.name for op in _LIBRARY.ops if op.is_pointwise and op.kernel.bool_output]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="session")
def built_ops():
    """torch.ops.<namespace> of the project, built incrementally if needed, loaded once."""
    if os.environ.get("OPGEN_SKIP_BUILD") != "1":
        subprocess.run([sys.executable, "-m", "opgen", "--project", str(PROJECT), "build"], check=True)
    import opgen

    return opgen.load(PROJECT)


@pytest.fixture(scope="session")
def typed_api(built_ops):
    python_dir = str(_CONFIG.output_dir / "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    return importlib.import_module(NAMESPACE)


@pytest.fixture(params=OPS)
def op(request) -> OpSpec:
    return next(o for o in _LIBRARY.ops if o.name == request.param)


_call_args = testing.call_args


def _sample(op, shapes=None, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = shapes or _example_shapes(op)
    return {a.name: testing.make_tensor(op, a.name, s, dtype, gen) for a, s in zip(op.tensor_inputs, shapes)}


def _supports(op, dtype_name):
    return dtype_name in [d.name for d in op.dtypes]


def _float_dtype(op):
    return next(d for d in ("float32", "float64", "bfloat16", "float16") if _supports(op, d))

def _constrained(op: OpSpec) -> bool:
    """Shapes are constrained beyond the shape rule (explicit rule or size checks)."""
    from opgen import expr as E

    return op.shape.kind == "explicit" or any(isinstance(n, E.Method) for c in op.checks for n in E.walk(c.expr))


def _example_shapes(op: OpSpec) -> list[tuple[int, ...]]:
    if op.test.shapes:
        return [s for _, s in op.test.shapes]
    return [(3, 4)] * len(op.tensor_inputs)


def _shapes(op: OpSpec) -> list[list[tuple[int, ...]]]:
    """Input shapes per case that satisfy the op's shape rule."""
    n = len(op.tensor_inputs)
    if _constrained(op) or op.test.shapes:
        return [_example_shapes(op)]
    cases = [[(4, 5)] * n, [()] * n, [(0, 3)] * n, [(2, 1, 3)] * n, [(7,)] * n]
    if op.shape.kind == "broadcast" and n >= 2:
        cases += [[(4, 1, 5)] + [(3, 1)] * (n - 1), [(5,)] + [(2, 5)] * (n - 1), [()] + [(3, 2)] * (n - 1),
                  [(0, 4)] + [(4,)] * (n - 1)]
    return cases


def _outs(value) -> tuple[torch.Tensor, ...]:
    """An op's outputs as a tuple, whether it returns one tensor or several."""
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def _total(value, square: bool = False) -> torch.Tensor:
    """A scalar of every output, each weighted differently, so a gradient test sees them all."""
    return sum((i + 1) * (o.pow(2) if square else o).sum() for i, o in enumerate(_outs(value)))


def _run(api, spec: OpSpec, tensors, attrs):
    """(outputs, float64 reference outputs), as tuples."""
    args, kwargs = _call_args(spec, tensors, attrs)
    out = getattr(api, spec.name)(*args, **kwargs)
    ref_args = [t.to(torch.float64) if torch.is_tensor(t) else t for t in args]
    ref_kwargs = {k: v.to(torch.float64) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    expected = testing.reference_fn(NAMESPACE, spec)(*ref_args, **ref_kwargs)
    return _outs(out), tuple(torch.as_tensor(e, dtype=torch.float64) for e in _outs(expected))


def _assert_close(outs, expected, dtype: str, what: str) -> None:
    assert len(outs) == len(expected), f"{what}: {len(outs)} outputs, reference has {len(expected)}"
    for i, (o, e) in enumerate(zip(outs, expected)):
        testing.assert_close_to_reference(o, e, dtype, f"{what} (output {i})" if len(outs) > 1 else what)


def _gradients(fn, op: OpSpec, tensors, wanted, attrs, dtype=None, incoming=None) -> tuple[torch.Tensor, ...]:
    """The gradients of ``wanted`` through ``fn`` (an op or its reference), inputs cast to ``dtype``
    if given: of `_total` of the outputs, or of the outputs with ``incoming`` gradients."""
    leaves = {k: (v.detach() if dtype is None else v.detach().to(dtype)).requires_grad_(k in wanted) for k, v in tensors.items()}
    args, kwargs = _call_args(op, leaves, attrs)
    outs = fn(*args, **kwargs)
    if incoming is None:
        return torch.autograd.grad(_total(outs), [leaves[n] for n in wanted])
    return torch.autograd.grad(_outs(outs), [leaves[n] for n in wanted], [g.to(dtype or g.dtype) for g in incoming])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_matches_reference(op, dtype, typed_api):
    if dtype not in [d.name for d in op.dtypes]:
        pytest.skip(f"{op.name} does not support {dtype}")
    gen = torch.Generator().manual_seed(0)
    for shapes, attrs in itertools.product(_shapes(op), testing.attribute_sets(op)):
        tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[dtype], gen) for a, s in zip(op.tensor_inputs, shapes)}
        outs, expected = _run(typed_api, op, tensors, attrs)
        for out, want in zip(outs, expected):
            assert out.shape == want.shape, f"{op.name} {shapes}: shape {out.shape} != {want.shape}"
            assert out.dtype == DTYPES[dtype]
        _assert_close(outs, expected, dtype, f"{op.name} shapes={shapes} attrs={attrs}")


def test_test_values_lie_in_the_ops_domain(op, typed_api):
    """The float64 reference is finite on the values the tests draw. NaN there (log of a negative
    value) fails gradcheck, opcheck and the rest with nothing said about why; this says what to set."""
    if not any(_supports(op, d) for d in ("float64", "float32", "bfloat16", "float16")):
        pytest.skip(f"{op.name} has no floating dtype")
    _, expected = _run(typed_api, op, _sample(op, dtype=DTYPES[_float_dtype(op)]), testing.attribute_sets(op)[0])
    for i, e in enumerate(expected):
        if e.is_floating_point() and not e.isfinite().all():
            ranges = ", ".join(f"{a.name} in {list(testing.input_range(op, a.name))}" for a in op.tensor_inputs)
            pytest.fail(f"{op.name}: the reference gives {'NaN' if e.isnan().any() else 'infinities'}"
                        f"{f' in output {i}' if len(expected) > 1 else ''} for test values drawn with {ranges}; draw them inside "
                        f"the op's domain with `test: {{ranges: {{{op.tensor_inputs[0].name}: [low, high]}}}}` in the spec")


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_non_contiguous_inputs_and_their_gradients(op, layout, typed_api):
    gen = torch.Generator().manual_seed(1)
    attrs = testing.attribute_sets(op)[0]
    shapes = _example_shapes(op) if _constrained(op) else [(6, 9)] * len(op.tensor_inputs)
    tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[_float_dtype(op)], gen, layout) for a, s in zip(op.tensor_inputs, shapes)}
    if len(shapes[0]) >= 2 and min(shapes[0]) > 1:
        assert not next(iter(tensors.values())).is_contiguous()
    outs, expected = _run(typed_api, op, tensors, attrs)
    _assert_close(outs, expected, _float_dtype(op), f"{op.name} {layout}")
    # the backward too: its loop runs element by element on the TensorIterator's strided rows
    names = _differentiable(op) if op.gradient is not None else []
    if names:
        got = _gradients(getattr(typed_api, op.name), op, tensors, names, attrs)
        want = _gradients(testing.reference_fn(NAMESPACE, op), op, tensors, names, attrs, torch.float64)
        for n, g, w in zip(names, got, want):
            testing.assert_close_to_reference(g, w, _float_dtype(op), f"{op.name} {layout}: gradient of {n}")


_DENSE_LAYOUTS = {
    "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last),
    "permuted": lambda t: t.permute(3, 1, 2, 0).contiguous().permute(3, 1, 2, 0),
}


@pytest.mark.parametrize("layout", list(_DENSE_LAYOUTS))
def test_outputs_and_gradients_keep_a_dense_layout(op, layout, typed_api):
    """Inputs laid out densely but not contiguously (channels_last, a permutation) give outputs laid
    out like them, as ATen's elementwise ops do, so a channels_last network stays channels_last; so
    do the gradients, which autograd then need not copy into the inputs' layout."""
    if _constrained(op):
        pytest.skip(f"{op.name}: shapes constrained")
    gen = torch.Generator().manual_seed(9)
    attrs = testing.attribute_sets(op)[0]
    dtype = _float_dtype(op)
    laid = {a.name: _DENSE_LAYOUTS[layout](testing.make_tensor(op, a.name, (2, 3, 4, 5), DTYPES[dtype], gen))
            for a in op.tensor_inputs}
    strides = torch.empty_like(next(iter(laid.values()))).stride()
    assert strides != (60, 20, 5, 1)
    outs, expected = _run(typed_api, op, laid, attrs)
    assert [o.stride() for o in outs] == [strides] * len(outs), f"{op.name} {layout}"
    _assert_close(outs, expected, dtype, f"{op.name} {layout}")
    differentiable = _differentiable(op) if op.gradient is not None else []
    if not differentiable:
        return
    leaves = {n: t.detach().requires_grad_(n in differentiable) for n, t in laid.items()}
    args, kwargs = _call_args(op, leaves, attrs)
    outs = _outs(getattr(typed_api, op.name)(*args, **kwargs))
    grads = torch.autograd.grad(outs, [leaves[n] for n in differentiable], [torch.randn_like(o) for o in outs])
    for name, g in zip(differentiable, grads):
        assert g.stride() == strides, f"{op.name} {layout}: the gradient of '{name}' has strides {g.stride()}"


def test_broadcast_inputs_beside_a_dense_layout(op, built_ops, typed_api):
    """The first input and the incoming gradients channels_last, the other inputs one value per
    channel of the last dim (a bias, a log-scale): the output and the first input's gradient keep
    the layout, the others' gradients are contiguous, as the Meta kernels say (opcheck), also where
    two inputs' gradients share one formula and so one buffer (bias_gelu's x and bias)."""
    if _constrained(op) or op.shape.kind != "broadcast" or len(op.tensor_inputs) < 2:
        pytest.skip(f"{op.name}: no broadcast of several inputs")
    gen = torch.Generator().manual_seed(12)
    attrs = testing.attribute_sets(op)[0]
    dtype = _float_dtype(op)
    first = op.tensor_inputs[0].name
    tensors = {a.name: testing.make_tensor(op, a.name, (2, 3, 4, 5) if a.name == first else (5,), DTYPES[dtype], gen)
               for a in op.tensor_inputs}
    tensors[first] = tensors[first].contiguous(memory_format=torch.channels_last)
    strides = tensors[first].stride()
    outs, expected = _run(typed_api, op, tensors, attrs)
    assert [o.stride() for o in outs] == [strides] * len(outs), f"{op.name}: output strides"
    _assert_close(outs, expected, dtype, f"{op.name} channels_last with broadcast inputs")
    if op.gradient is None:
        return
    names = _differentiable(op)
    incoming = [torch.randn(o.shape, generator=gen, dtype=o.dtype).contiguous(memory_format=torch.channels_last) for o in outs]
    grads = _gradients(getattr(typed_api, op.name), op, tensors, names, attrs, incoming=incoming)
    want = _gradients(testing.reference_fn(NAMESPACE, op), op, tensors, names, attrs, torch.float64, incoming)
    for n, g, w in zip(names, grads, want):
        assert g.stride() == (strides if n == first else (1,)), f"{op.name}: the gradient of '{n}' has strides {g.stride()}"
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * (1 + w.abs().max().item()),
                                   msg=lambda m: f"{op.name}: gradient of {n}\n{m}")
    args, kwargs = _call_args(op, {n: t.detach().requires_grad_(n in names) for n, t in tensors.items()}, attrs)
    torch.library.opcheck(getattr(built_ops, op.name).default, args, kwargs)


def test_every_attribute_set(op, typed_api):
    gen = torch.Generator().manual_seed(2)
    for attrs in testing.attribute_sets(op, limit=12):
        shapes = _example_shapes(op) if _constrained(op) else [(33,)] * len(op.tensor_inputs)
        tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[_float_dtype(op)], gen) for a, s in zip(op.tensor_inputs, shapes)}
        outs, expected = _run(typed_api, op, tensors, attrs)
        _assert_close(outs, expected, _float_dtype(op), f"{op.name} attrs={attrs}")


def test_large_input_uses_parallel_vector_path(op, typed_api):
    gen = torch.Generator().manual_seed(3)
    attrs = testing.attribute_sets(op)[0]
    shapes = _example_shapes(op) if _constrained(op) else [(257, 1031)] * len(op.tensor_inputs)
    tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[_float_dtype(op)], gen) for a, s in zip(op.tensor_inputs, shapes)}
    outs, expected = _run(typed_api, op, tensors, attrs)
    _assert_close(outs, expected, _float_dtype(op), f"{op.name} large")


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_every_length_through_the_contiguous_loop(op, dtype, typed_api):
    """Lengths 0..40 take every mix of the contiguous loop's two-vector steps, its one-vector
    step and its scalar tail (a vector holds 4 float64, 8 float32, 16 bfloat16 on AVX2; twice that on AVX512)."""
    if _constrained(op) or not _supports(op, dtype):
        pytest.skip(f"{op.name}: shapes constrained or no {dtype}")
    gen = torch.Generator().manual_seed(6)
    attrs = testing.attribute_sets(op)[0]
    for n in range(41):
        tensors = {a.name: testing.make_tensor(op, a.name, (n,), DTYPES[dtype], gen) for a in op.tensor_inputs}
        outs, expected = _run(typed_api, op, tensors, attrs)
        _assert_close(outs, expected, dtype, f"{op.name} length {n}")


def test_mixed_dtypes_promote_like_torch(op, typed_api):
    if _constrained(op) or len(op.tensor_inputs) < 2 or not all(_supports(op, d) for d in ("float16", "float32", "float64")):
        pytest.skip("needs two tensor inputs and float16/32/64")
    gen = torch.Generator().manual_seed(4)
    attrs = testing.attribute_sets(op)[0]
    names = [a.name for a in op.tensor_inputs]
    tensors = {n: testing.make_tensor(op, n, (3, 4), torch.float32 if i == 0 else torch.float64, gen) for i, n in enumerate(names)}
    outs, expected = _run(typed_api, op, tensors, attrs)
    assert all(o.dtype == torch.float64 for o in outs)
    # a 0-dim float64 tensor does not promote a float16 tensor, as in torch
    tensors = {n: testing.make_tensor(op, n, (3, 4) if i == 0 else (), torch.float16 if i == 0 else torch.float64, gen)
               for i, n in enumerate(names)}
    outs, expected = _run(typed_api, op, tensors, attrs)
    assert all(o.dtype == torch.float16 for o in outs)
    _assert_close(outs, expected, "float16", f"{op.name} 0-dim promotion")


def test_opcheck(op, built_ops):
    overload = getattr(built_ops, op.name).default
    broadcast = [(2, 1, 4)] + [(3, 1)] * (len(op.tensor_inputs) - 1)
    for shapes in ((None,) if _constrained(op) else (None, broadcast, [()] * len(op.tensor_inputs))):
        for attrs in testing.attribute_sets(op, limit=2):
            args, kwargs = _call_args(op, _sample(op, shapes, DTYPES[_float_dtype(op)]), attrs)
            torch.library.opcheck(overload, args, kwargs)


def test_absent_optional_tensors(op, built_ops, typed_api):
    """Each Tensor? input None, one at a time and then all: the values against the reference
    (which leaves it out), opcheck, and gradcheck of the inputs given."""
    optional = [a.name for a in op.tensor_inputs if a.type.optional]
    if not optional:
        pytest.skip(f"{op.name} has no Tensor? input")
    dtype = "float64" if _supports(op, "float64") else _float_dtype(op)
    overload = getattr(built_ops, op.name).default
    for absent in [[n] for n in optional] + ([optional] if len(optional) > 1 else []):
        for shapes in [None] + ([] if _constrained(op) else [[(2, 1, 4)] + [(3, 1)] * (len(op.tensor_inputs) - 1)]):
            for attrs in testing.attribute_sets(op, limit=2):
                tensors = {n: None if n in absent else t for n, t in _sample(op, shapes, DTYPES[dtype]).items()}
                outs, expected = _run(typed_api, op, tensors, attrs)
                _assert_close(outs, expected, dtype, f"{op.name} without {', '.join(absent)}")
                args, kwargs = _call_args(op, tensors, attrs)
                torch.library.opcheck(overload, args, kwargs)
                if op.gradient is None or dtype != "float64":
                    continue
                given = {n: t.detach().requires_grad_(n in _differentiable(op)) for n, t in tensors.items() if t is not None}

                def call(*leaves, given=given, absent=absent, attrs=attrs):
                    args, kwargs = _call_args(op, {**dict(zip(given, leaves)), **dict.fromkeys(absent)}, attrs)
                    return overload(*args, **kwargs)

                assert torch.autograd.gradcheck(call, tuple(given.values()), check_forward_ad=True)


def test_fake_tensor_matches_cpu(op, built_ops):
    from torch._subclasses.fake_tensor import FakeTensorMode

    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    tensors = _sample(op, None if _constrained(op) else [(5, 1, 3)] + [(4, 1)] * (len(op.tensor_inputs) - 1),
                      DTYPES[_float_dtype(op)])
    real = _outs(overload(*_call_args(op, tensors, attrs)[0], **_call_args(op, tensors, attrs)[1]))
    with FakeTensorMode() as mode:
        fake_tensors = {k: mode.from_tensor(v) for k, v in tensors.items()}
        args, kwargs = _call_args(op, fake_tensors, attrs)
        fake = _outs(overload(*args, **kwargs))
    assert [(f.shape, f.dtype, f.stride()) for f in fake] == [(r.shape, r.dtype, r.stride()) for r in real]



# ---- comparisons (bool output) --------------------------------------------------------------


@pytest.fixture(params=CONDITIONS or [pytest.param(None, marks=pytest.mark.skip(reason="no comparison ops"))])
def condition(request) -> OpSpec:
    return next(o for o in _LIBRARY.ops if o.name == request.param)


def _check_condition(api, op: OpSpec, tensors: dict, what: str) -> None:
    """Equal to the float64 reference, element for element (ties, NaN and infinities included)."""
    attrs = testing.attribute_sets(op)[0]
    args, kwargs = _call_args(op, tensors, attrs)
    out = getattr(api, op.name)(*args, **kwargs)
    ref_args = [t.to(torch.float64) if torch.is_tensor(t) else t for t in args]
    ref_kwargs = {k: v.to(torch.float64) if torch.is_tensor(v) else v for k, v in kwargs.items()}
    expected = torch.as_tensor(testing.reference_fn(NAMESPACE, op)(*ref_args, **ref_kwargs))
    assert out.dtype == torch.bool and out.shape == expected.shape, f"{what}: {out.dtype} {tuple(out.shape)}"
    wrong = (out != expected).nonzero()
    assert wrong.numel() == 0, f"{what}: {len(wrong)} elements differ from the float64 reference, first at {wrong[0].tolist()}"


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_condition_at_every_length(condition, dtype, typed_api):
    """Lengths 0..70 take every mix of the flat loop's two-vector steps, one-vector step and scalar
    tail (a vector holds up to 32 bfloat16 on AVX512 and a step two vectors)."""
    if _constrained(condition) or not _supports(condition, dtype):
        pytest.skip(f"{condition.name}: shapes constrained or no {dtype}")
    gen = torch.Generator().manual_seed(7)
    for n in range(71):
        tensors = testing.condition_tensors(condition, (n,), DTYPES[dtype], gen)
        _check_condition(typed_api, condition, tensors, f"{condition.name} {dtype} length {n}")


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "broadcast", "broadcast column",
                                    "long broadcast column", "row slices", "large", "large row slices"])
def test_condition_layouts(condition, layout, typed_api):
    """Through the TensorIterator: element by element (transposed, sliced), row by row through the
    vector loop (expanded and broadcast rows, slices of contiguous rows, a broadcast column's value
    repeated in blocks of 256), and the parallel flat loop."""
    if _constrained(condition):
        pytest.skip(f"{condition.name}: shapes constrained")
    gen = torch.Generator().manual_seed(8)
    dtype = DTYPES[_float_dtype(condition)]
    n = len(condition.tensor_inputs)
    if layout in ("transposed", "sliced", "expanded"):
        tensors = testing.condition_tensors(condition, (6, 37), dtype, gen, layout)
    elif layout in ("broadcast", "broadcast column", "long broadcast column"):
        tensors = testing.condition_tensors(condition, (5, 1031) if layout.startswith("long") else (6, 37), dtype, gen)
        if n >= 2 and condition.shape.kind == "broadcast":
            last = condition.tensor_inputs[-1].name
            # (1, 37): stride 0 across rows; (6, 1): stride 0 along them
            tensors[last] = tensors[last][:1, :] if layout == "broadcast" else tensors[last][:, :1].clone()
            if layout != "broadcast":  # ties with the repeated value at every third element
                tensors[condition.tensor_inputs[0].name][:, ::3] = tensors[last]
    elif layout == "large":
        tensors = testing.condition_tensors(condition, (257, 1031), dtype, gen)
    else:
        rows = 5 if layout == "row slices" else 257
        tensors = testing.condition_tensors(condition, (rows, 1031), dtype, gen)
        tensors = {k: v[:, 3:1003] for k, v in tensors.items()}  # rows of 1000 contiguous elements, 1031 apart
        assert not next(iter(tensors.values())).is_contiguous()
    _check_condition(typed_api, condition, tensors, f"{condition.name} {layout}")


# Ops whose loops store several outputs: a forward with several, or a fused backward computing
# several gradients (with output_mask), checked on every kind of TensorIterator row below.
SEVERAL = [op.name for op in _LIBRARY.ops if op.name in OPS and not _constrained(op)
           and (len(op.kernel.exprs) > 1 or len(getattr(backward.plan(op), "fused", ())) > 1)]


@pytest.fixture(params=SEVERAL or [pytest.param(None, marks=pytest.mark.skip(reason="no op stores several outputs"))])
def several(request) -> OpSpec:
    return next(o for o in _LIBRARY.ops if o.name == request.param)


@pytest.mark.parametrize("layout", ["broadcast", "broadcast column", "long broadcast column", "row slices", "transposed"])
def test_several_outputs_layouts(several, layout, typed_api):
    """Loops that store several outputs, through the TensorIterator: rows through the vector loop
    (a broadcast row; a broadcast column's value repeated in blocks of 256; slices of contiguous
    rows), element by element (transposed). Each gradient is asked for alone and all together:
    a gradient not asked for is not returned, and the others are the same bit for bit."""
    op = several
    if layout.endswith("column") and (op.shape.kind != "broadcast" or len(op.tensor_inputs) < 2):
        pytest.skip(f"{op.name}: no second input to broadcast")
    shape = (5, 1031) if layout.startswith("long") or layout == "row slices" else (6, 37)

    def inputs(dtype):
        gen = torch.Generator().manual_seed(9)
        tensors = {a.name: testing.make_tensor(op, a.name, (shape[0], shape[1] + 7) if layout == "row slices" else shape,
                                               DTYPES[dtype], gen, "transposed" if layout == "transposed" else "contiguous")
                   for a in op.tensor_inputs}
        last = op.tensor_inputs[-1].name
        if layout == "broadcast" and op.shape.kind == "broadcast" and len(tensors) > 1:
            tensors[last] = tensors[last][0].clone()  # (37,): stride 0 across rows
        elif layout.endswith("column"):
            tensors[last] = tensors[last][:, :1].clone()  # (rows, 1): stride 0 along them
        elif layout == "row slices":
            tensors = {k: v[:, 3:3 + shape[1]] for k, v in tensors.items()}
        return tensors

    attrs = testing.attribute_sets(op)[0]
    for dtype in [d for d in ("float32", "bfloat16") if _supports(op, d)]:  # bfloat16: computed in float32, rounded once
        outs, expected = _run(typed_api, op, inputs(dtype), attrs)
        _assert_close(outs, expected, dtype, f"{op.name} {layout} {dtype}")
    if op.gradient is None or not _supports(op, "float32"):
        return
    tensors = inputs("float32")
    names = _differentiable(op)
    every = {}
    for wanted in ([names] if len(names) > 1 else []) + [[n] for n in names]:
        got = _gradients(getattr(typed_api, op.name), op, tensors, wanted, attrs)
        want = _gradients(testing.reference_fn(NAMESPACE, op), op, tensors, wanted, attrs, torch.float64)
        for n, g, w in zip(wanted, got, want):
            assert g.shape == tensors[n].shape, f"{op.name} {layout}: gradient of {n} has shape {tuple(g.shape)}"
            if len(wanted) > 1:
                every[n] = g
            elif n in every:
                torch.testing.assert_close(g, every[n], rtol=0, atol=0, equal_nan=True,
                                           msg=lambda m: f"{op.name} {layout}: gradient of {n} alone differs from all together\n{m}")
            # summed over up to 1031 broadcast elements in float32
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * (1 + w.abs().max().item()),
                                       msg=lambda m: f"{op.name} {layout}: gradient of {n} (asked for {wanted})\n{m}")


# Ops whose forward or fused backward has sub-expressions of some inputs that a call
# broadcasting those inputs computes first, once per element of theirs (dest/hoist.py): by the
# inputs each hoists from.
HOISTING = [(op.name, reads) for op in _LIBRARY.ops if op.name in OPS and not _constrained(op) and op.shape.kind == "broadcast"
            for reads in dict.fromkeys(h.reads for h in (hoist.forward(op), hoist.backward_kernel(op)) if h is not None)]


@pytest.fixture(params=HOISTING or [pytest.param(None, marks=pytest.mark.skip(reason="no op hoists sub-expressions"))],
                ids=lambda p: p and f"{p[0]}-{'+'.join(p[1])}")
def hoisting(request) -> tuple[OpSpec, tuple[str, ...]]:
    name, reads = request.param
    return next(o for o in _LIBRARY.ops if o.name == name), reads


@pytest.mark.parametrize("layout", ["row", "column", "strided row", "middle"])
def test_hoisted_sub_expressions(hoisting, layout, typed_api):
    """Inputs that hoisted sub-expressions read, broadcast over an output at least 4 times their
    size and of 16384 elements or more (opgen::hoisted_shape): computed first (contiguous, or
    through a TensorIterator when strided), then the loop reading them. Forward and gradients
    against float64 and against the same call with those inputs expanded (the fused loops as
    written); out= into a transposed buffer; each gradient alone the same bit for bit as all together."""
    op, reads = hoisting
    full, small = {"row": ((128, 160), (160,)), "column": ((128, 160), (128, 1)), "strided row": ((128, 160), (160,)),
                   "middle": ((4, 64, 80), (4, 1, 80))}[layout]

    def inputs(dtype):
        gen = torch.Generator().manual_seed(11)
        tensors = {a.name: testing.make_tensor(op, a.name, small if a.name in reads else full, DTYPES[dtype], gen,
                                               "sliced" if layout == "strided row" and a.name in reads else "contiguous")
                   for a in op.tensor_inputs}
        assert (layout == "strided row") != all(tensors[n].is_contiguous() for n in reads)
        return tensors

    def expanded(tensors):
        return {k: v.expand(full).contiguous() for k, v in tensors.items()}

    # the same arithmetic but for where each value is rounded to the dtype
    tols = {"float32": 2e-6, "float64": 1e-14, "bfloat16": 2e-2}
    attrs = testing.attribute_sets(op)[0]
    for dtype in [d for d in tols if _supports(op, d)]:
        tensors, tol = inputs(dtype), tols[dtype]
        outs, expected = _run(typed_api, op, tensors, attrs)
        _assert_close(outs, expected, dtype, f"{op.name} {layout} {dtype}")
        assert all(o.shape == full for o in outs)
        fused, _ = _run(typed_api, op, expanded(tensors), attrs)
        for o, f in zip(outs, fused):
            torch.testing.assert_close(o, f, rtol=tol, atol=tol, msg=lambda m: f"{op.name} {layout} {dtype}: hoisted vs fused\n{m}")
        if "out" in op.variants:  # into a transposed out= buffer (other loops: rounding may differ), and one resized from empty
            args, kwargs = _call_args(op, tensors, attrs)
            for out in (torch.empty(tuple(reversed(full)), dtype=DTYPES[dtype]).permute(*reversed(range(len(full)))),
                        torch.empty(0, dtype=DTYPES[dtype])):
                getattr(typed_api, op.name)(*args, **kwargs, out=out)
                torch.testing.assert_close(out, outs[0], rtol=tol, atol=tol, msg=lambda m: f"{op.name} {layout} {dtype}: out=\n{m}")
    if op.gradient is None or not _supports(op, "float32"):
        return
    tensors = inputs("float32")
    names = _differentiable(op)
    every = dict(zip(names, _gradients(getattr(typed_api, op.name), op, tensors, names, attrs)))
    want = dict(zip(names, _gradients(testing.reference_fn(NAMESPACE, op), op, tensors, names, attrs, torch.float64)))
    fused = dict(zip(names, _gradients(getattr(typed_api, op.name), op, expanded(tensors), names, attrs)))
    for n in names:
        g, w = every[n], want[n]
        assert g.shape == tensors[n].shape, f"{op.name} {layout}: gradient of {n} has shape {tuple(g.shape)}"
        # summed over up to 128 broadcast elements in float32
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4 * (1 + w.abs().max().item()),
                                   msg=lambda m: f"{op.name} {layout}: gradient of {n}\n{m}")
        torch.testing.assert_close(g, fused[n].sum_to_size(g.shape), rtol=1e-5, atol=1e-5 * (1 + w.abs().max().item()),
                                   msg=lambda m: f"{op.name} {layout}: gradient of {n}, hoisted vs fused\n{m}")
        if len(names) > 1:
            (alone,) = _gradients(getattr(typed_api, op.name), op, tensors, [n], attrs)
            torch.testing.assert_close(alone, g, rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m: f"{op.name} {layout}: gradient of {n} alone differs from all together\n{m}")


# (full shape, the other inputs' shape, which input is full, the others' layout): the repeated
# rows' trailing dims wider than one tile of opgen::rows_summed (1024) and more rows than one block
# (64), a 3-d grad with a [1, C] row, two trailing dims repeated, the full input last; rows copied
# out first (a strided bias, per-channel values of NCHW activations, whose gradients are then
# summed over H and W too). Not by rows (the flat or TensorIterator loop, then sum_to): a row of 8
# columns (too narrow), a column.
_ROW_LAYOUTS = {
    "bias": ((130, 1100), (1100,), 0, "contiguous"),
    "3-d bias": ((3, 50, 40), (1, 40), 0, "contiguous"),
    "two trailing dims": ((3, 50, 40), (50, 40), 0, "contiguous"),
    "full input last": ((70, 1100), (1100,), -1, "contiguous"),
    "strided bias": ((70, 33), (33,), 0, "sliced"),
    "per channel": ((4, 24, 3, 6), (24, 1, 1), 0, "contiguous"),
    "per channel, 4-d": ((5, 24, 3, 6), (1, 24, 1, 1), 0, "contiguous"),
    "narrow": ((70, 8), (8,), 0, "contiguous"),
    "narrow, full input last": ((70, 8), (8,), -1, "contiguous"),
    "column, full input last": ((70, 33), (70, 1), -1, "contiguous"),
}


@pytest.mark.parametrize("layout", list(_ROW_LAYOUTS))
def test_broadcast_gradients_summed_row_by_row(op, layout, typed_api):
    """One input of the output's shape, the others a row repeated over its leading dims (a bias,
    per-channel values), the incoming gradient contiguous: the fused backward goes row by row and
    sums the repeated inputs' gradients as it computes them (opgen::broadcast_rows). Against
    float64, and against the same call with every input expanded to the full shape (the flat loop,
    then sum_to); each gradient alone the same bit for bit as all together, and on one thread as
    on two."""
    if _constrained(op) or op.gradient is None or op.shape.kind != "broadcast" or len(op.tensor_inputs) < 2:
        pytest.skip(f"{op.name}: no broadcast of several inputs")
    full, row, which, row_layout = _ROW_LAYOUTS[layout]
    names = _differentiable(op)
    full_name = op.tensor_inputs[which].name
    attrs = testing.attribute_sets(op)[0]
    for dtype in [d for d in ("float32", "float64") if _supports(op, d)]:
        gen = torch.Generator().manual_seed(13)
        tensors = {a.name: testing.make_tensor(op, a.name, full, DTYPES[dtype], gen) if a.name == full_name
                   else testing.make_tensor(op, a.name, row, DTYPES[dtype], gen, row_layout) for a in op.tensor_inputs}
        assert all(t.is_contiguous() == (row_layout == "contiguous") for n, t in tensors.items() if n != full_name)
        outs, _ = _run(typed_api, op, tensors, attrs)
        incoming = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
        every = dict(zip(names, _gradients(getattr(typed_api, op.name), op, tensors, names, attrs, incoming=incoming)))
        want = _gradients(testing.reference_fn(NAMESPACE, op), op, tensors, names, attrs, torch.float64, incoming)
        expanded = {k: v.expand(full).contiguous() for k, v in tensors.items()}
        flat = _gradients(getattr(typed_api, op.name), op, expanded, names, attrs, incoming=incoming)
        # summed over up to 150 rows
        tol = 1e-4 if dtype == "float32" else 1e-12
        for n, w, f in zip(names, want, flat):
            g = every[n]
            assert g.shape == tensors[n].shape and g.is_contiguous(), f"{op.name} {layout}: gradient of {n}"
            scale = 1 + w.abs().max().item()
            torch.testing.assert_close(g.double(), w, rtol=tol, atol=tol * scale,
                                       msg=lambda m: f"{op.name} {layout} {dtype}: gradient of {n}\n{m}")
            torch.testing.assert_close(g, f.sum_to_size(g.shape), rtol=tol / 10, atol=tol / 10 * scale,
                                       msg=lambda m: f"{op.name} {layout} {dtype}: gradient of {n}, by rows vs flat\n{m}")
            if len(names) > 1:
                (alone,) = _gradients(getattr(typed_api, op.name), op, tensors, [n], attrs, incoming=incoming)
                torch.testing.assert_close(alone, g, rtol=0, atol=0, equal_nan=True,
                                           msg=lambda m: f"{op.name} {layout} {dtype}: gradient of {n} alone differs from all together\n{m}")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            single = _gradients(getattr(typed_api, op.name), op, tensors, names, attrs, incoming=incoming)
        finally:
            torch.set_num_threads(threads)
        for n, s in zip(names, single):
            torch.testing.assert_close(s, every[n], rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m: f"{op.name} {layout} {dtype}: gradient of {n} on one thread differs\n{m}")


# ---- bad calls ------------------------------------------------------------------------------


def test_wrong_dtype_names_op_and_argument(op, built_ops):
    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    first = op.tensor_inputs[0].name
    tensors = _sample(op, dtype=DTYPES[_float_dtype(op)])
    tensors[first] = torch.arange(12).reshape(3, 4)
    args, kwargs = _call_args(op, tensors, attrs)
    with pytest.raises(TypeError, match=rf"{NAMESPACE}\.{op.name}\(\): argument '{first}' has dtype torch\.int64"):
        overload(*args, **kwargs)


def test_broadcast_violation_names_argument(op, built_ops):
    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    if len(op.tensor_inputs) < 2 or _constrained(op):
        pytest.skip("needs two tensor inputs and no size constraints beyond broadcasting")
    tensors = _sample(op, [(3, 4)] + [(5,)] * (len(op.tensor_inputs) - 1), DTYPES[_float_dtype(op)])
    args, kwargs = _call_args(op, tensors, attrs)
    second = op.tensor_inputs[1].name
    with pytest.raises(RuntimeError, match=rf"{NAMESPACE}\.{op.name}\(\): argument '{second}' has shape \[5\]"):
        overload(*args, **kwargs)


def test_failed_checks_name_the_condition(op, built_ops):
    overload = getattr(built_ops, op.name).default
    bad = testing.invalid_attribute_sets(op)
    if not testing.attribute_checks(op):
        pytest.skip("no checks of attributes alone (checks of sizes: the generated tests' shapes satisfy them)")
    assert bad, f"could not build a violating call for {op.name}'s checks"
    for attrs, text in bad:
        args, kwargs = _call_args(op, _sample(op, dtype=DTYPES[_float_dtype(op)]), attrs)
        with pytest.raises(ValueError) as info:
            overload(*args, **kwargs)
        assert f"{NAMESPACE}.{op.name}(): check '{text}' failed" in str(info.value)


# ---- both kernel builds ----------------------------------------------------------------------

_CAPABILITY_SCRIPT = r"""
import sys, torch
sys.path.insert(0, {python!r})
import opgen
from opgen import properties, testing
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
    if op.is_custom:  # hand-written kernels are compiled once, not per capability
        continue
    attrs = testing.attribute_sets(op)[0]
    for name in [d.name for d in op.dtypes if d.name in ("float32", "bfloat16", "float64")]:
        dtype = getattr(torch, name)
        shapes = [s for _, s in op.test.shapes] or [(37, 29)] * len(op.tensor_inputs)
        kwargs = {{a.name: attrs[a.name] for a in op.attributes}}
        if op.is_pointwise and op.kernel.bool_output and not op.test.shapes:
            # whole tensors (the flat loop) and slices of rows (the TensorIterator's vector rows)
            cases = [list(testing.condition_tensors(op, shapes[0], dtype, gen).values())]
            cases.append([t[:, 2:27] for t in cases[0]])
        else:
            cases = [[testing.make_tensor(op, a.name, s, dtype, gen) for a, s in zip(op.tensor_inputs, shapes)]]
        for tensors in cases:
            out = getattr(api, op.name)(*tensors, **kwargs)
            ref = testing.reference_fn(cfg.namespace, op)(*[t.double() for t in tensors], **kwargs)
            properties.assert_outputs_match(op, out, ref, name, op.name)
print("ok")
"""


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_each_cpu_capability_kernel(capability, built_ops):
    if capability.upper() not in testing.runnable_cpu_capabilities():
        pytest.skip(f"this CPU has no {capability.upper()}")
    from opgen.build import capabilities

    if capability.upper() not in capabilities():
        pytest.skip(f"this build has no {capability.upper()} kernels")
    script = _CAPABILITY_SCRIPT.format(python=str(_CONFIG.output_dir / "python"), root=str(PROJECT))
    env = dict(os.environ, ATEN_CPU_CAPABILITY=capability)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"capability {capability.upper()}" in proc.stdout and "ok" in proc.stdout


# ---- gradients ----------------------------------------------------------------------------


def test_vmap_matches_a_loop_over_samples(op, built_ops):
    """torch.vmap over each input's own batch dimension against calling the op per sample;
    broadcasting ops use the generated batching rule, not functorch's per-sample fallback."""
    from opgen.dest.python_api import batches_by_broadcasting

    attrs = testing.attribute_sets(op)[0]
    dtype = DTYPES[_float_dtype(op)]
    tensors = _sample(op, shapes=_example_shapes(op), dtype=dtype)
    names = [a.name for a in op.tensor_inputs]
    batched = {n: torch.stack([t * (1 + 0.1 * i) for i in range(3)], dim=k % (t.dim() + 1))
               for k, (n, t) in enumerate(tensors.items()) if k % 3 != 2}  # every third input unbatched
    in_dims = tuple(k % (tensors[n].dim() + 1) if n in batched else None for k, n in enumerate(names))
    fn = _fn(built_ops, op, attrs)
    args = [batched.get(n, tensors[n]) for n in names]
    got = _outs(torch.vmap(fn, in_dims=in_dims)(*args))
    samples = [_outs(fn(*[a.select(d, i) if d is not None else a for a, d in zip(args, in_dims)])) for i in range(3)]
    # equal_nan: the scaled samples may leave the op's domain (asin of 1.1), alike both ways
    torch.testing.assert_close(got, tuple(torch.stack(per_output) for per_output in zip(*samples)), equal_nan=True)
    has_rule = torch._C._dispatch_has_kernel_for_dispatch_key(f"{NAMESPACE}::{op.name}", "FuncTorchBatched")
    assert has_rule == batches_by_broadcasting(op), f"{op.name}: batching rule registered: {has_rule}"


def _differentiable(op) -> list[str]:
    from opgen.derivatives import differentiable_inputs

    return list(differentiable_inputs(op))


def _grad_case(op, shapes, layout="contiguous", seed=5):
    """float64 inputs, differentiable ones requiring grad; attributes from the first valid set."""
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for a, s in zip(op.tensor_inputs, shapes):
        t = testing.make_tensor(op, a.name, s, torch.float64, gen, layout)
        tensors[a.name] = t.detach().requires_grad_(a.name in _differentiable(op))
    return tensors


def _grad_shapes(op):
    if _constrained(op) or op.test.shapes:
        return [_example_shapes(op)]
    n = len(op.tensor_inputs)
    cases = [[(3, 4)] * n]
    if op.shape.kind == "broadcast" and n >= 2:
        cases.append([(2, 1, 4)] + [(3, 1)] * (n - 1))
    return cases


def _needs_gradient(op):
    if op.gradient is None:
        pytest.skip(f"{op.name} has no gradient")
    if not _supports(op, "float64"):
        pytest.skip(f"{op.name} does not support float64, which gradient checks need")


def _fn(built_ops, op, attrs):
    overload = getattr(built_ops, op.name).default
    names = [a.name for a in op.tensor_inputs]

    def call(*tensors):
        args, kwargs = _call_args(op, dict(zip(names, tensors)), attrs)
        return overload(*args, **kwargs)

    return call


def _finite_difference_case(op, shapes, layout="contiguous"):
    """_grad_case without requires_grad on the inputs whose gradient is a surrogate (a straight-
    through estimator), which finite differences cannot check; skips when that leaves none."""
    tensors = {n: t.detach() if n in op.test.surrogate else t for n, t in _grad_case(op, shapes, layout).items()}
    if not any(t.requires_grad for t in tensors.values()):
        pytest.skip(f"{op.name}: every gradient is a surrogate (test.surrogate), checked against the reference's autograd")
    return tensors


def test_gradcheck(op, built_ops):
    _needs_gradient(op)
    for attrs in testing.attribute_sets(op, limit=2):
        for shapes in _grad_shapes(op):
            for layout in ("contiguous", "transposed"):
                tensors = _finite_difference_case(op, shapes, layout)
                assert torch.autograd.gradcheck(_fn(built_ops, op, attrs), tuple(tensors.values()), check_forward_ad=True)


def test_gradgradcheck(op, built_ops):
    _needs_gradient(op)
    attrs = testing.attribute_sets(op)[0]
    for shapes in _grad_shapes(op):
        tensors = _finite_difference_case(op, shapes)
        assert torch.autograd.gradgradcheck(_fn(built_ops, op, attrs), tuple(tensors.values()),
                                            check_fwd_over_rev=fwd_over_rev_checkable(op))


def test_jvp_matches_reference(op, built_ops, typed_api):
    """torch.func.jvp and torch.autograd.forward_ad against forward-mode AD of the float64 reference."""
    import torch.autograd.forward_ad as fwAD

    _needs_gradient(op)
    attrs = testing.attribute_sets(op)[0]
    names = _differentiable(op)
    reference = testing.reference_fn(NAMESPACE, op)
    for shapes in _grad_shapes(op):
        for layout in ("contiguous", "transposed"):
            tensors = {k: v.detach() for k, v in _grad_case(op, shapes, layout).items()}
            gen = torch.Generator().manual_seed(7)
            tangents = tuple(torch.randn(tensors[n].shape, dtype=torch.float64, generator=gen) for n in names)

            def over(fn):
                def call(*primals):
                    args, kwargs = _call_args(op, {**tensors, **dict(zip(names, primals))}, attrs)
                    return fn(*args, **kwargs)
                return call

            primals = tuple(tensors[n] for n in names)
            out, tangent = torch.func.jvp(over(getattr(built_ops, op.name).default), primals, tangents)
            want_out, want_tangent = torch.func.jvp(over(reference), primals, tangents)
            torch.testing.assert_close(out, want_out)
            torch.testing.assert_close(tangent, want_tangent, msg=lambda m: f"{op.name} {shapes} {layout}: jvp\n{m}")
            with fwAD.dual_level():
                duals = tuple(fwAD.make_dual(p, t) for p, t in zip(primals, tangents))
                got = over(getattr(built_ops, op.name).default)(*duals)
                got = fwAD.unpack_dual(got).tangent if isinstance(got, torch.Tensor) else tuple(fwAD.unpack_dual(g).tangent for g in got)
            torch.testing.assert_close(got, want_tangent, msg=lambda m: f"{op.name} {shapes} {layout}: forward_ad\n{m}")


def _over_first_differentiable(op, built_ops):
    """(x, ours, reference): the op and its reference as functions of the first differentiable
    input alone (the other arguments fixed), for torch.func transforms."""
    attrs = testing.attribute_sets(op)[0]
    name = _differentiable(op)[0]
    tensors = {k: v.detach() for k, v in _grad_case(op, _grad_shapes(op)[-1]).items()}

    def partial(fn):
        def call(t):
            args, kwargs = _call_args(op, {**tensors, name: t}, attrs)
            return fn(*args, **kwargs)
        return call

    return tensors[name], partial(getattr(built_ops, op.name).default), partial(testing.reference_fn(NAMESPACE, op))


def test_second_order_mixed_modes_match_reference(op, built_ops, typed_api):
    """Forward-over-reverse (torch.func.hessian) and reverse-over-forward against the reference."""
    _needs_gradient(op)
    x, ours, ref = _over_first_differentiable(op, built_ops)
    for transform in (torch.func.hessian, lambda f: torch.func.jacrev(torch.func.jacfwd(f))):
        got = transform(lambda t: _total(ours(t)))(x)
        torch.testing.assert_close(got, transform(lambda t: _total(ref(t)))(x), msg=lambda m: f"{op.name}: second derivative\n{m}")


def test_func_grad_vjp_and_vmap_match_reference(op, built_ops, typed_api):
    """torch.func.grad, torch.func.vjp and per-sample gradients (vmap of grad) against the reference."""
    _needs_gradient(op)
    x, ours, ref = _over_first_differentiable(op, built_ops)
    torch.testing.assert_close(torch.func.grad(lambda t: _total(ours(t)))(x), torch.func.grad(lambda t: _total(ref(t)))(x))
    out = ours(x)
    cotangent = torch.randn_like(out) if isinstance(out, torch.Tensor) else tuple(torch.randn_like(o) for o in out)
    torch.testing.assert_close(torch.func.vjp(ours, x)[1](cotangent), torch.func.vjp(ref, x)[1](cotangent))
    batch = torch.stack([x, x * 0.5, x.flip(0)]).contiguous()
    per_sample = torch.func.vmap(torch.func.grad(lambda t: _total(ours(t), square=True)))(batch)
    torch.testing.assert_close(per_sample, torch.func.vmap(torch.func.grad(lambda t: _total(ref(t), square=True)))(batch))


def test_opcheck_with_grad(op, built_ops):
    _needs_gradient(op)
    overload = getattr(built_ops, op.name).default
    attrs = testing.attribute_sets(op)[0]
    for shapes in _grad_shapes(op):
        args, kwargs = _call_args(op, _grad_case(op, shapes), attrs)
        torch.library.opcheck(overload, args, kwargs)


def test_gradients_have_input_shape_and_dtype(op, built_ops):
    _needs_gradient(op)
    attrs = testing.attribute_sets(op)[0]
    shapes = _grad_shapes(op)[-1]
    dtypes = [d for d in ("float32", "float64") if _supports(op, d)]
    gen = torch.Generator().manual_seed(6)
    tensors = {a.name: testing.make_tensor(op, a.name, s, DTYPES[dtypes[i % len(dtypes)]], gen).requires_grad_(a.name in _differentiable(op))
               for i, (a, s) in enumerate(zip(op.tensor_inputs, shapes))}
    _total(_fn(built_ops, op, attrs)(*tensors.values())).backward()
    for name in _differentiable(op):
        t = tensors[name]
        assert t.grad is not None and t.grad.shape == t.shape and t.grad.dtype == t.dtype, name


def test_compiled_backward_matches_eager(op, built_ops):
    _needs_gradient(op)
    attrs = testing.attribute_sets(op)[0]
    shapes = _grad_shapes(op)[-1]
    eager = _grad_case(op, shapes)
    traced = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in eager.items()}
    fn = _fn(built_ops, op, attrs)
    _total(fn(*eager.values())).backward()
    torch._dynamo.reset()  # one lambda's code object for every op: a project of many ops would pass the recompile limit
    torch.compile(lambda *t: _total(fn(*t)), backend="aot_eager", fullgraph=True)(*traced.values()).backward()
    for name in _differentiable(op):
        torch.testing.assert_close(traced[name].grad, eager[name].grad)


def test_explicit_formulas_agree_with_derived(op):
    """A spec's hand-written gradient formulas against symbolic differentiation of its kernel."""
    from opgen.api import python
    from opgen.derivatives import derived_formulas
    from opgen.dest.backward import scope

    if op.gradient is None or op.gradient.auto:
        pytest.skip("no explicit formulas")
    derived = dict(derived_formulas(op))
    kernel_scope = scope(op)
    gen = torch.Generator().manual_seed(7)
    for attrs in testing.attribute_sets(op, limit=4):
        env = {"torch": torch, "_t": lambda v: torch.as_tensor(v, dtype=torch.float64), **attrs}
        env.update({a.name: testing.make_tensor(op, a.name, (257,), torch.float64, gen) for a in op.tensor_inputs})
        for g, r, e in zip(op.grad_names, op.result_names, op.kernel.exprs):
            env[g] = torch.rand(257, generator=gen, dtype=torch.float64) * 2 - 1
            env[r] = eval(python.reference(e, kernel_scope), env)  # noqa: S307 (printed from our IR)
        for name, formula in op.gradient.formulas:
            if name in op.test.surrogate:  # deliberately not the derivative
                continue
            got = eval(python.reference(formula, kernel_scope), env)  # noqa: S307
            want = eval(python.reference(derived.get(name, E.Num(0)), kernel_scope), env)  # noqa: S307
            got, want = (torch.as_tensor(v, dtype=torch.float64).expand(257) for v in (got, want))  # a formula may be a number
            torch.testing.assert_close(got, want, msg=lambda m: f"{op.name}: gradient formula for '{name}' disagrees with the "
                                                                f"derivative of the kernel (a surrogate on purpose, such as a "
                                                                f"straight-through estimator? list it in test: {{surrogate: "
                                                                f"[{name}]}}): {m}")


def test_typed_api_traces_to_the_overloads(op, typed_api):
    """Eagerly the wrappers call the overloads' C++ callables; under torch.compile (fullgraph) they
    must still record the OpOverloads themselves, for every variant, with eager's results."""
    fn, attrs = getattr(typed_api, op.name), testing.attribute_sets(op)[0]
    tensors = _sample(op, dtype=DTYPES[_float_dtype(op)])
    args, kwargs = _call_args(op, tensors, attrs)
    expected = _outs(fn(*args, **kwargs))
    packet = getattr(getattr(torch.ops, NAMESPACE), op.name)
    want = {packet.default}
    if "out" in op.variants:
        want.add(packet.out)
    inplace = getattr(typed_api, f"{op.name}_", None)
    if inplace is not None:
        want.add(getattr(getattr(torch.ops, NAMESPACE), f"{op.name}_").default)
    recorded = set()

    def backend(gm, example_inputs):
        recorded.update(n.target for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    def every_variant(*args):
        results = _outs(fn(*args, **kwargs))
        if "out" in op.variants:
            out = torch.empty_like(results[0])
            fn(*args, **kwargs, out=out)
            results += (out,)
        if inplace is not None:
            first = args[0].clone()
            inplace(first, *args[1:], **kwargs)
            results += (first,)
        return results

    torch._dynamo.reset()
    got = torch.compile(every_variant, backend=backend, fullgraph=True)(*args)
    assert want <= recorded, f"{op.name}: the compiled graph calls {recorded}, not {want}"
    for result in got[len(expected):]:
        torch.testing.assert_close(result, expected[0])
    for result, want_result in zip(got, expected):
        torch.testing.assert_close(result, want_result)


# ---- out= ---------------------------------------------------------------------------------------


def _out_case(op, call):
    """Inputs in the op's first float dtype, their call arguments, and the result without out=."""
    if "out" not in op.variants:
        pytest.skip(f"{op.name} has no out= variant (variants: {list(op.variants)})")
    attrs = testing.attribute_sets(op)[0]
    dtype = DTYPES[_float_dtype(op)]
    tensors = _sample(op, dtype=dtype)
    args, kwargs = _call_args(op, tensors, attrs)
    return tensors, attrs, args, kwargs, call(*args, **kwargs)


def test_out_variant_writes_into_out(op, built_ops, typed_api):
    fn = getattr(typed_api, op.name)
    _, _, args, kwargs, expected = _out_case(op, fn)
    outs = [torch.empty_like(expected), torch.empty(0, dtype=expected.dtype)]  # exact, and resized from empty
    if expected.dim() == 2:
        outs.append(torch.empty(tuple(reversed(expected.shape)), dtype=expected.dtype).t())  # non-contiguous
    for out in outs:
        version = out._version
        assert fn(*args, **kwargs, out=out) is out
        torch.testing.assert_close(out, expected)
        assert out._version > version, "the version counter of out was not bumped (autograd would miss the write)"


def test_out_variant_rejects_bad_out(op, built_ops, typed_api):
    fn = getattr(typed_api, op.name)
    tensors, attrs, args, kwargs, expected = _out_case(op, fn)
    with pytest.raises(TypeError, match=rf"{NAMESPACE}\.{op.name}\(\): argument 'out' has dtype"):
        fn(*args, **kwargs, out=torch.empty(expected.shape, dtype=torch.int64))
    first = op.tensor_inputs[0].name
    if tensors[first].shape == expected.shape:
        with pytest.raises(RuntimeError, match="memory location"):
            fn(*args, **kwargs, out=tensors[first])
    gargs, gkwargs = _call_args(op, {k: v.clone().requires_grad_() for k, v in tensors.items()}, attrs)
    with pytest.raises(RuntimeError, match=rf"{NAMESPACE}\.{op.name}\(\): the out= variant does not support automatic differentiation"):
        fn(*gargs, **gkwargs, out=torch.empty_like(expected))
    if op.gradient is not None and expected.is_floating_point():
        import torch.autograd.forward_ad as fwAD

        with fwAD.dual_level():
            dual = {k: fwAD.make_dual(v, torch.ones_like(v)) if v.is_floating_point() else v for k, v in tensors.items()}
            dargs, dkwargs = _call_args(op, dual, attrs)
            with pytest.raises(RuntimeError, match=rf"{NAMESPACE}\.{op.name}\(\): the out= variant does not support forward-mode"):
                fn(*dargs, **dkwargs, out=torch.empty_like(expected))


def test_out_variant_opcheck(op, built_ops):
    overload = getattr(built_ops, op.name)
    _, _, args, kwargs, expected = _out_case(op, overload.default)
    torch.library.opcheck(overload.out, args, {**kwargs, "out": torch.empty_like(expected)})


def _holding(op, shape) -> list[tuple[int, ...]]:
    """Example shapes with the first input's replaced by the result's (the others broadcast to it
    as before, and still pass checks of their sizes), so the in-place variant can write into it."""
    return [shape] + _example_shapes(op)[1:]


def test_inplace_variant_opcheck(op, built_ops):
    """`<op>_` through opcheck: its schema, FakeTensor, and torch.compile's functionalization of
    a mutation (auto_functionalized), which the eager in-place tests never reach."""
    if "inplace" not in op.variants:
        pytest.skip(f"{op.name} has no in-place variant (variants: {list(op.variants)})")
    attrs = testing.attribute_sets(op)[0]
    dtype = DTYPES[_float_dtype(op)]
    args, kwargs = _call_args(op, _sample(op, dtype=dtype), attrs)
    shape = tuple(getattr(built_ops, op.name).default(*args, **kwargs).shape)
    # the first argument of the result's shape, so it can hold it
    args, kwargs = _call_args(op, _sample(op, _holding(op, shape), dtype), attrs)
    torch.library.opcheck(getattr(built_ops, f"{op.name}_").default, args, kwargs)


def test_inplace_variant_autograd(op, built_ops):
    """`<op>_` records the op's node, as torch's in-place ops do: on a copy and on a view of one
    (through CopySlices) the gradients are the out-of-place op's; a leaf that requires grad, or a
    view of one, is refused naming the op; a tensor the node saved, written afterwards, fails
    torch's version check at backward."""
    if "inplace" not in op.variants or op.gradient is None:
        pytest.skip(f"{op.name} has no differentiable in-place variant")
    attrs = testing.attribute_sets(op)[0]
    dtype = DTYPES["float64"] if _supports(op, "float64") else DTYPES[_float_dtype(op)]
    args, kwargs = _call_args(op, _sample(op, dtype=dtype), attrs)
    shape = tuple(getattr(built_ops, op.name).default(*args, **kwargs).shape)
    tensors = {k: v.requires_grad_() for k, v in _sample(op, _holding(op, shape), dtype).items()}
    first = op.tensor_inputs[0].name
    overload, inplace = getattr(built_ops, op.name).default, getattr(built_ops, f"{op.name}_").default
    leaves = list(tensors.values())
    cotangent = torch.rand(shape, generator=torch.Generator().manual_seed(3), dtype=dtype)
    args, kwargs = _call_args(op, tensors, attrs)
    want = torch.autograd.grad(overload(*args, **kwargs), leaves, cotangent)

    copy = tensors[first] * 1
    args, kwargs = _call_args(op, {**tensors, first: copy}, attrs)
    inplace(*args, **kwargs)
    assert copy.grad_fn.name() == f"{NAMESPACE}::{node_name(op)}", copy.grad_fn.name()
    for name, got, w in zip(tensors, torch.autograd.grad(copy, leaves, cotangent), want):
        torch.testing.assert_close(got, w, msg=lambda m: f"{op.name}_: gradient of '{name}': {m}")

    if len(shape) >= 1 and shape[0] > 1:  # into a view: row 0 passes through `* 1` unchanged
        base = tensors[first] * 1
        # the result's rows from 1: of each input that has those rows (the others broadcast over them)
        rows = {k: v[1:] if v.dim() == len(shape) and v.shape[0] == shape[0] else v for k, v in tensors.items()}
        args, kwargs = _call_args(op, {**rows, first: base[1:]}, attrs)
        inplace(*args, **kwargs)
        assert type(base.grad_fn).__name__ == "CopySlices", base.grad_fn
        for name, got, w in zip(tensors, torch.autograd.grad(base, leaves, cotangent), want):
            if rows[name] is tensors[name]:  # broadcast over the rows: its gradient sums over some of them
                continue
            torch.testing.assert_close(got[:1], cotangent[:1] if name == first else torch.zeros_like(got[:1]))
            torch.testing.assert_close(got[1:], w[1:], msg=lambda m: f"{op.name}_ into a view: gradient of '{name}': {m}")

    args, kwargs = _call_args(op, tensors, attrs)
    with pytest.raises(RuntimeError, match=rf"{NAMESPACE}\.{op.name}_\(\): '{first}' is a leaf tensor that requires grad"):
        inplace(*args, **kwargs)
    args, kwargs = _call_args(op, {**tensors, first: tensors[first][:]}, attrs)
    with pytest.raises(RuntimeError, match=rf"{NAMESPACE}\.{op.name}_\(\): '{first}' is a view of a leaf tensor that requires grad"):
        inplace(*args, **kwargs)

    written = tensors[first] * 1
    args, kwargs = _call_args(op, {**tensors, first: written}, attrs)
    result = overload(*args, **kwargs)
    inplace(*args, **kwargs)  # writes what the first call's node may have saved
    if first in backward.plan(op).saved:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            result.sum().backward()
    else:
        result.sum().backward()


def test_inplace_variant_casts_into_its_first_argument(op, built_ops):
    """As torch's in-place ops (`x.add_(y)`), `<op>_` writes a result of a wider dtype than its
    first argument's (float64 from another input) cast into it, and refuses one it can't hold."""
    if "inplace" not in op.variants or len(op.tensor_inputs) < 2 or not (_supports(op, "float32") and _supports(op, "float64")):
        pytest.skip(f"{op.name} has no in-place variant with a second tensor input in float32 and float64")
    attrs = testing.attribute_sets(op)[0]
    args, kwargs = _call_args(op, _sample(op, dtype=torch.float32), attrs)
    shape = tuple(getattr(built_ops, op.name).default(*args, **kwargs).shape)
    tensors = _sample(op, _holding(op, shape), torch.float64)
    first = op.tensor_inputs[0].name
    args, kwargs = _call_args(op, tensors, attrs)
    expected = getattr(built_ops, op.name).default(*args, **kwargs)
    target = tensors[first].to(torch.float32)
    args, kwargs = _call_args(op, {**tensors, first: target}, attrs)
    want = getattr(built_ops, op.name).default(*args, **kwargs).to(torch.float32)  # computed in float64
    getattr(built_ops, f"{op.name}_").default(*args, **kwargs)
    torch.testing.assert_close(target, want, atol=0, rtol=0)
    torch.testing.assert_close(target, expected.to(torch.float32))
    if _supports(op, "int64"):
        return
    integral = torch.zeros(shape, dtype=torch.int64)
    args, kwargs = _call_args(op, {**tensors, first: integral}, attrs)
    with pytest.raises(TypeError):
        getattr(built_ops, f"{op.name}_").default(*args, **kwargs)
