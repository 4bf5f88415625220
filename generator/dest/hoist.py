"""Sub-expressions of a pointwise kernel that read only some of its input tensors and go through
a series function: `cos(theta)` and `sin(theta)` in to_cartesian's `r * cos(theta)`, and in its
gradient of r, `grad_x * cos(theta) + grad_y * sin(theta)`.

Called with `theta` much smaller than the output (a row of angles times a column of radii), the
fused loop computes them once per output element where eager ATen computes them once per angle.
For such calls the op computes them first, once per element of the tensors they read (the
`<kernel>_hoist` kernel, into temporaries of those tensors' broadcast shape), then runs the
kernel with each replaced by its temporary (`<kernel>_from_hoisted`). Both are ordinary pointwise
kernels printed by the CPU emitter; the op decides per call (`opgen::hoisted_shape`). CUDA
computes the kernel as written: a GPU's sin and cos cost little beside its memory traffic.

One group of tensors per kernel: the fewest tensors, then the most series calls saved.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import expr as E
from ..api import cpp_expr
from ..functions import FUNCTIONS
from ..model import OpSpec
from . import backward
from . import op_context as ctx


@dataclass(frozen=True)
class Hoist:
    kernel: str  # the kernel hoisted from: the op's forward or its fused backward
    reads: tuple[str, ...]  # the tensors the hoisted values read, in the kernel's input order
    values: tuple[E.Expr, ...]  # the hoisted sub-expressions, computed into `names`
    exprs: tuple[E.Expr, ...]  # the kernel's expressions, each hoisted value read by its name
    rest: tuple[str, ...]  # the tensors the kernel still reads, in its input order

    @property
    def names(self) -> tuple[str, ...]:
        # `__` never appears in spec names: these cannot collide with an argument
        return tuple(f"hoisted__{i}" for i in range(len(self.values)))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The `<kernel>_from_hoisted` kernel's inputs: the remaining tensors, then the temporaries."""
        return (*self.rest, *self.names)

    @property
    def text(self) -> str:
        return ", ".join(E.unparse(v) for v in self.values)


@functools.lru_cache(maxsize=1024)
def forward(op: OpSpec) -> Hoist | None:
    if not op.is_pointwise or op.kernel.bool_output:
        return None
    tensors = tuple(a.name for a in op.tensor_inputs)
    return _find(op.name, tuple(op.kernel.exprs), ctx.kernel_scope(op), tensors, _groupable(op))


@functools.lru_cache(maxsize=1024)
def backward_kernel(op: OpSpec) -> Hoist | None:
    """The fused backward's: values of the op's inputs only (incoming gradients and outputs have
    the output's shape, as has the `grad`-shaped buffer each gradient is computed into)."""
    plan = backward.plan(op)
    if plan is None or not plan.fused:
        return None
    return _find(plan.name, plan.kernel_formulas, backward.scope(op), (*plan.grads, *plan.saved), _groupable(op))


def _groupable(op: OpSpec) -> frozenset[str]:
    """The inputs that may be smaller than the output: not x of `same(x)`, not a Tensor? (a
    stand-in of the output's shape when None)."""
    always_full = {op.shape.tensors[0]} if op.shape.kind == "same" else set()
    return frozenset(a.name for a in op.tensor_inputs) - ctx.absent_tensors(op) - always_full


def values_kernel(op: OpSpec, h: Hoist) -> str:
    """The kernel computing ``h``'s values: the backward's are often the forward's (to_cartesian's
    cos(theta) and sin(theta)), computed by the forward's kernel then, compiled once."""
    f = forward(op)
    if f is not None and h is not f and (f.reads, f.values) == (h.reads, h.values):
        return f"{f.kernel}_hoist"
    return f"{h.kernel}_hoist"


def _find(kernel: str, exprs: tuple[E.Expr, ...], scope: E.Scope, tensors: tuple[str, ...],
          groupable: frozenset[str]) -> Hoist | None:
    read = frozenset().union(*(E.names_in(e) & set(tensors) for e in exprs))
    if len(read) < 2 or not read & groupable:  # a hoisted value reads some, not all, of them (groupable ones)
        return None
    candidates = [n for e in exprs for n in E.walk(e) if _hoistable(n, scope, read, groupable)]
    if not candidates:
        return None
    groups: dict[frozenset[str], list[E.Expr]] = {}
    for c in candidates:
        group = frozenset(E.names_in(c) & read)
        if group not in groups:
            groups[group] = list(dict.fromkeys(v for e in exprs for v in _largest(e, group, scope, read, groupable)))
    # a group of one tensor (a bias, a row of angles) is the one callers broadcast
    group, values = min(groups.items(), key=lambda kv: (len(kv[0]), -sum(_series_calls(v) for v in kv[1])))
    names = {v: E.Name(f"hoisted__{i}") for i, v in enumerate(values)}
    replaced = tuple(E.replaced(e, names) for e in exprs)
    rest = set().union(*(E.names_in(e) for e in replaced))
    return Hoist(kernel=kernel, reads=tuple(t for t in tensors if t in group), values=tuple(values), exprs=replaced,
                 rest=tuple(t for t in tensors if t in rest))


def _hoistable(e: E.Expr, scope: E.Scope, read: frozenset[str], groupable: frozenset[str]) -> bool:
    """A number per element (not a condition) that reads elements of some but not all of the
    tensors the kernel reads, only ``groupable`` ones (no Tensor? input, which may be a stand-in;
    no incoming gradient), and calls a series function."""
    reads = E.names_in(e) & read
    return bool(reads) and reads < read and reads <= groupable and E.typecheck(e, scope) == E.ELEM \
        and cpp_expr.kernel_code(e, scope, []).computes_series


def _largest(e: E.Expr, group: frozenset[str], scope: E.Scope, read: frozenset[str], groupable: frozenset[str]) -> list[E.Expr]:
    """The largest hoistable sub-expressions of ``e`` reading only tensors of ``group``, left to right."""
    if E.names_in(e) & read <= group and _hoistable(e, scope, read, groupable):
        return [e]
    return [v for c in E.children(e) for v in _largest(c, group, scope, read, groupable)]


def _series_calls(e: E.Expr) -> int:
    return sum(1 for n in E.walk(e) if isinstance(n, E.Call) and n.fn in FUNCTIONS and FUNCTIONS[n.fn].series
               or isinstance(n, E.Binary) and n.op == "**")
