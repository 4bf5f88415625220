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
        out = {}
        for a, shape, layout in zip(op.tensor_inputs, self.shapes, self.layouts):
            t = testing.make_tensor(op, a.name, shape, dt, gen, layout, device)
            out[a.name] = t.detach().requires_grad_(requires_grad) if requires_grad else t
        return out


def constrained(op: OpSpec) -> bool:
    return op.shape.kind == "explicit" or any(isinstance(n, E.Method) for c in op.checks for n in E.walk(c.expr))


def shapes(op: OpSpec, max_side: int = 5) -> st.SearchStrategy[tuple[tuple[int, ...], ...]]:
    n = len(op.tensor_inputs)
    if constrained(op) or op.test.shapes:
        example = tuple(s for _, s in op.test.shapes) or tuple((3, 4) for _ in range(n))
        return st.just(example)
    if op.shape.kind == "broadcast" and n >= 2:
        # the rule's tensors broadcast with each other; the others broadcast to the result
        return mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=3, min_side=0, max_side=max_side).map(
            lambda bs: tuple(bs.input_shapes))
    return array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=max_side).map(lambda s: (s,) * n)


def attribute_values(op: OpSpec) -> st.SearchStrategy[dict[str, Any]]:
    """Attribute assignments that pass the op's attribute-only checks."""
    choices = testing.attribute_sets(op, limit=64)
    if not choices:
        return st.nothing()
    return st.sampled_from(choices)


def cases(op: OpSpec, dtypes: tuple[str, ...] | None = None, max_side: int = 5,
          layouts: tuple[str, ...] = LAYOUTS) -> st.SearchStrategy[Case]:
    names = dtypes or tuple(d.name for d in op.dtypes)
    n = len(op.tensor_inputs)
    return st.builds(
        Case,
        shapes=shapes(op, max_side),
        layouts=st.tuples(*[st.sampled_from(layouts)] * n),
        dtype=st.sampled_from(names),
        attrs=attribute_values(op),
        seed=st.integers(0, 2**31 - 1),
    )

