"""tests/: a hypothesis property test file per op, and the profiles they run under."""

from __future__ import annotations

from pathlib import Path

from .. import testing
from ..derivatives import differentiable_inputs
from ..dtypes import DTYPES
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import backward
from .files import GeneratedFile
from .op_context import dtype_names
from .python_api import batches_by_broadcasting


def emit_conftest(lib: Library) -> GeneratedFile:
    return GeneratedFile("tests/conftest.py", render("tests/conftest.py.j2"))


def _shapes_text(op: OpSpec) -> str:
    if op.shape.kind == "explicit" or op.test.shapes:
        return "the spec's example shapes"
    if op.shape.kind == "broadcast" and len(op.tensor_inputs) > 1:
        return "mutually broadcastable, 0 to 3 dims, sizes 0 to 5"
    return "any, 0 to 3 dims, sizes 0 to 5"


def _backward(op: OpSpec) -> dict | None:
    """The backward op's names, written into the test file as a Python dict literal; "inputs" are
    those whose gradients it returns."""
    p = backward.plan(op)
    if p is None or not p.computed:
        return None
    return {"name": p.name, "inputs": list(p.computed), "saved": list(p.saved), "attributes": [a.name for a in p.attributes],
            "grads": list(p.grads), "results": list(p.results)}


def _autocast_dtype(op: OpSpec) -> str | None:
    if op.autocast is None:
        return None
    supported = [d.name for d in op.dtypes]
    order = ("bfloat16", "float16", "float32") if op.autocast == "fp32" else ("float32", "bfloat16", "float16")
    return next(d for d in order if d in supported)


def _shape_violations(op: OpSpec) -> list[int]:
    """The tensor input the test gives a shape that does not broadcast with the first's: one the
    op checks against it (a pointwise op checks every input; a hand-written one those its
    broadcast rule names), and a plain Tensor, not a list or an optional."""
    if op.shape.kind == "explicit" or op.test.shapes:
        return []
    inputs = op.tensor_inputs
    if op.is_custom and not (op.shape.kind == "broadcast" and inputs[0].name in op.shape.tensors):
        return []
    checked = [i for i, a in enumerate(inputs) if i > 0 and not (a.type.is_list or a.type.optional)
               and (not op.is_custom or a.name in op.shape.tensors)]
    return checked[:1]


def emit_op(op: OpSpec, lib: Library, output: str) -> GeneratedFile:
    supported = {d.name for d in op.dtypes}
    unsupported = [n for n in ("int64", "bool", "float64", "float16", "bfloat16") if n not in supported and n in DTYPES][:3]
    depth = len(Path(output).parts) + 1  # generated/tests -> project root
    text = render(
        "tests/test_op_properties.py.j2",
        op=op,
        ns=lib.namespace,
        project_from_tests="/".join([".."] * depth),
        shapes_text=_shapes_text(op),
        dtype_names=dtype_names(op),
        differentiable=list(differentiable_inputs(op)),
        no_derivative=op.gradient is None and not (op.is_pointwise and op.kernel.bool_output),
        # a hand-written backward without a CUDA file has no CUDA gradient to compare
        cuda_gradients=not (op.gradient is not None and op.gradient.kernel is not None and op.gradient.kernel.cuda is None),
        unsupported=unsupported,
        backward=_backward(op),
        backward_dtypes=tuple(d for d in ("float32", "float64") if d in supported),
        shape_violations=_shape_violations(op),
        # the inputs' dtype the autocast test draws: one autocast casts (fp32 casts lower precision up)
        autocast_dtype=_autocast_dtype(op),
        inplace_vmap="inplace" in op.variants and batches_by_broadcasting(op),  # has a batching rule
        failing_attributes=[(a, c) for a, c in testing.invalid_attribute_sets(op)],
    )
    return GeneratedFile(f"tests/test_{op.name}_properties.py", text, op.path)


