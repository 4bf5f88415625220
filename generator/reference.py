"""Helpers of generated float64 references for reductions (imported by generated/python/<ns>/_references.py)."""

from __future__ import annotations

from typing import Callable, Sequence, Union

import torch


def reduce_dims(x: torch.Tensor, dim: Union[int, Sequence[int], None]) -> tuple[int, ...]:
    """The reduced dims as a tuple, every dim when none are given (None or [], as torch.sum does)."""
    dims = (dim,) if isinstance(dim, int) else tuple(dim or ())
    return dims if dims else tuple(range(x.dim()))


def extreme(v: torch.Tensor, dims: tuple[int, ...], keepdim: bool, largest: bool, identity: float) -> torch.Tensor:
    """A fold of maximum (or minimum) from ``identity``, through torch.amax (amin) wherever there is
    something to reduce: the same values as ``fold``, and ties share the gradient as in torch."""
    wrapped = sorted({d % v.dim() for d in dims}) if v.dim() else []
    pick = torch.maximum if largest else torch.minimum
    if not wrapped or any(v.shape[d] == 0 for d in wrapped):
        return fold(v, dims, keepdim, pick, identity)
    reduced = (torch.amax if largest else torch.amin)(v, wrapped, keepdim)
    return pick(reduced, torch.tensor(identity, dtype=v.dtype))


def fold(v: torch.Tensor, dims: tuple[int, ...], keepdim: bool, combine: Callable, identity: float) -> torch.Tensor:
    """Folds the elements of ``v`` along ``dims`` one at a time with ``combine``, from ``identity``."""
    if v.dim() == 0:
        return combine(torch.full_like(v, identity), v)
    wrapped = sorted({d % v.dim() for d in dims})
    kept = [d for d in range(v.dim()) if d not in wrapped]
    count = 1
    for d in wrapped:
        count *= v.shape[d]
    moved = v.permute(*kept, *wrapped).reshape(*[v.shape[d] for d in kept], count)
    acc = torch.full(moved.shape[:-1], identity, dtype=v.dtype)
    for i in range(moved.shape[-1]):
        acc = combine(acc, moved[..., i])
    if keepdim:
        for d in wrapped:
            acc = acc.unsqueeze(d)
    return acc
