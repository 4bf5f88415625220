"""Hypothesis strategies derived from a spec, for the generated property tests.

Shapes satisfy the op's shape rule (mutually broadcastable for `broadcast`, any for `same`,
the spec's example for explicit rules and size checks), layouts cover contiguous, transposed,
sliced with steps and expanded (stride 0), values come from the spec's test ranges, and
attributes from their types, defaults and the op's checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

from . import expr as E
from . import testing
from .model import OpSpec

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")


@dataclass(frozen=True)
class Case:
    shapes: tuple[tuple[int, ...], ...]
    layouts: tuple[str, ...]
    dtype: str
    attrs: dict[str, Any]
    seed: int

    def tensors(self, op: OpSpec, *, dtype=None, requires_grad: bool = False, device="cpu"):
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        dt = dtype or getattr(torch, self.dtype)
        out: dict[str, Any] = {}

        def make(name, shape, layout):
            t = testing.make_tensor(op, name, shape, dt, gen, layout, device)
            return t.detach().requires_grad_(requires_grad) if requires_grad else t

        for a, shape, layout in zip(op.tensor_inputs, self.shapes, self.layouts):
            if a.type.is_list:  # shape: one shape per element
                out[a.name] = [make(a.name, s, layout) for s in shape]
            elif shape is None:  # an absent Tensor?
                out[a.name] = None
            else:
                out[a.name] = make(a.name, shape, layout)
        return out


def constrained(op: OpSpec) -> bool:
    return op.shape.kind == "explicit" or any(isinstance(n, E.Method) for c in op.checks for n in E.walk(c.expr))


def shapes(op: OpSpec, max_side: int = 5) -> st.SearchStrategy[tuple[tuple[int, ...], ...]]:
    n = len(op.tensor_inputs)
    if constrained(op) or op.test.shapes or op.is_custom:
        example = tuple(s for _, s in op.test.shapes) or tuple((3, 4) for _ in range(n))
        # Tensor[]: one to three tensors of the example shape; Tensor?: present or None.
        parts = [st.integers(1, 3).map(lambda k, s=s: (s,) * k) if a.type.is_list
                 else st.sampled_from((s, None)) if a.type.optional else st.just(s)
                 for a, s in zip(op.tensor_inputs, example)]
        return st.tuples(*parts)
    if op.shape.kind == "broadcast" and n >= 2:
        # the rule's tensors broadcast with each other; the others broadcast to the result
        drawn = mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3, min_side=0, max_side=max_side).map(
            lambda bs: tuple(bs.input_shapes))
    else:
        drawn = array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=max_side).map(lambda s: (s,) * n)
    optional = [a.type.optional for a in op.tensor_inputs]
    if not any(optional):
        return drawn
    # a Tensor? input: present or None (None shape)
    return st.tuples(drawn, st.tuples(*[st.booleans() if o else st.just(True) for o in optional])).map(
        lambda sp: tuple(s if present else None for s, present in zip(*sp)))


def attribute_values(op: OpSpec) -> st.SearchStrategy[dict[str, Any]]:
    """Attribute assignments that pass the op's attribute-only checks."""
    choices = testing.attribute_sets(op, limit=64)
    if not choices:
        return st.nothing()
    return st.sampled_from(choices)


def reduce_dims(op: OpSpec, ndim: int) -> st.SearchStrategy[Any]:
    """Valid values of a reduction's dim argument for an input of ``ndim`` dims: each dim at most
    once, negative or not; for `int[]`, any subset (empty: all dims); for `int[]?`, also None."""
    arg = op.schema.argument(op.shape.dim or "")
    assert arg is not None
    bound = max(ndim, 1)
    one = st.integers(0, bound - 1).flatmap(lambda d: st.sampled_from((d, d - bound)))
    if not arg.type.is_list:
        return one
    if ndim == 0:
        lists = st.sampled_from(([], [0], [-1]))
    else:
        lists = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim).flatmap(
            lambda ds: st.tuples(*[st.sampled_from((d, d - ndim)) for d in ds]).map(list))
    return st.one_of(st.none(), lists) if arg.type.optional else lists


def reduction_cases(op: OpSpec, names: tuple[str, ...], max_side: int, layouts: tuple[str, ...]) -> st.SearchStrategy[Case]:
    """Shapes first, then dims valid for them; max and min (no identity) reduce non-empty dims."""
    min_side = 0 if op.kernel.has_identity else 1  # type: ignore[union-attr]

    @st.composite
    def draw(draw_) -> Case:
        shape = draw_(array_shapes(min_dims=0, max_dims=3, min_side=min_side, max_side=max_side))
        attrs = dict(draw_(attribute_values(op)))
        attrs[op.shape.dim] = draw_(reduce_dims(op, len(shape)))
        if op.shape.keepdim:
            attrs[op.shape.keepdim] = draw_(st.booleans())
        return Case((shape,), (draw_(st.sampled_from(layouts)),), draw_(st.sampled_from(names)), attrs,
                    draw_(st.integers(0, 2**31 - 1)))

    return draw()


def cases(op: OpSpec, dtypes: tuple[str, ...] | None = None, max_side: int = 5,
          layouts: tuple[str, ...] = LAYOUTS) -> st.SearchStrategy[Case]:
    names = dtypes or tuple(d.name for d in op.dtypes)
    n = len(op.tensor_inputs)
    if op.is_reduction and not op.test.shapes:
        return reduction_cases(op, names, max_side, layouts)
    return st.builds(
        Case,
        shapes=shapes(op, max_side),
        layouts=st.tuples(*[st.sampled_from(layouts)] * n),
        dtype=st.sampled_from(names),
        attrs=attribute_values(op),
        seed=st.integers(0, 2**31 - 1),
    )

