"""The pointwise kernels of an op, shared by the CPU and CUDA kernel emitters: its forward;
when it has a gradient that is not `grad` itself, the fused backward; when sub-expressions of
some of its inputs can be computed apart (hoist.py), the CPU's two passes for broadcast calls."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import expr as E
from ..api import cpp_expr
from ..model import OpSpec
from . import backward, hoist
from . import op_context as ctx


@dataclass(frozen=True)
class Kernel:
    name: str
    code: cpp_expr.KernelCode
    attrs: list[ctx.KernelAttr]
    # Arithmetic only (no exp, tanh, ... per element) and not a comparison: on float32 / float64
    # the loop waits on memory, and its AVX2 variant serves AVX-512 CPUs for data in cache
    # (see pick_cpu_kernel).
    memory_bound: bool = False
    # A fused backward returning several gradients: its flat loop skips outputs given as null
    # pointers (those output_mask did not ask for).
    masked: bool = False
    # Compiled for CPUs only: a kernel in two passes, for calls whose inputs broadcast (hoist.py).
    cpu_only: bool = False
    # Called as a flat loop over same-shape inputs (`<name>_contiguous`), not only through a
    # TensorIterator; a loop reading hoisted values never is (they are smaller than its output).
    flat: bool = True
    # A fused backward of an op whose inputs broadcast: also called on rows of grad's trailing dims,
    # summing the gradients of inputs repeated over them as it goes (`<name>_rows`).
    rows: bool = False


@functools.lru_cache(maxsize=1024)
def kernels(op: OpSpec) -> tuple[Kernel, ...]:
    """Printed once per spec: the CPU and the CUDA emitter both ask."""
    tensors = [a.name for a in op.tensor_inputs]
    exprs = list(op.kernel.exprs)
    forward = cpp_expr.kernel_code(exprs if len(exprs) > 1 else exprs[0], ctx.kernel_scope(op), tensors)
    out = [Kernel(op.name, forward, ctx.kernel_attrs(op, set().union(*(E.names_in(e) for e in exprs))),
                  memory_bound=not forward.computes_series and not op.kernel.bool_output)]
    plan = backward.plan(op)
    code = backward.kernel_code(op, plan) if plan is not None else None
    if code is not None:
        out.append(Kernel(plan.name, code, list(plan.kernel_attrs), memory_bound=not code.computes_series, masked=plan.kernel_masked,
                          rows=by_rows(op)))
    if (h := hoist.forward(op)) is not None:
        out += _hoisted(op, h, ctx.kernel_scope(op), out[0].attrs, masked=False)
    if (h := hoist.backward_kernel(op)) is not None:
        out += _hoisted(op, h, backward.scope(op), list(plan.kernel_attrs), masked=plan.kernel_masked, rows=by_rows(op))
    return tuple(out)


def by_rows(op: OpSpec) -> bool:
    """Inputs may broadcast against each other, so a gradient may need summing to its input's
    shape: the fused backward gets an entry by rows (at most opgen::kMaxRowOutputs, 8, outputs)."""
    plan = backward.plan(op)
    return op.shape.kind == "broadcast" and len(op.tensor_inputs) > 1 and len(plan.kernel_outputs) <= 8


def _hoisted(op: OpSpec, h: hoist.Hoist, scope: E.Scope, attrs: list[ctx.KernelAttr], masked: bool,
             rows: bool = False) -> list[Kernel]:
    """The kernel computing the hoisted values (unless another computes the same), and the one
    reading them (`attrs`: the kernel's own)."""
    scope = scope.extended(dict.fromkeys(h.names, E.TENSOR))
    code = cpp_expr.kernel_code(list(h.exprs) if len(h.exprs) > 1 else h.exprs[0], scope, list(h.inputs))
    reading = Kernel(f"{h.kernel}_from_hoisted", code, attrs, memory_bound=not code.computes_series, masked=masked,
                     cpu_only=True, flat=False, rows=rows)
    if hoist.values_kernel(op, h) != f"{h.kernel}_hoist":
        return [reading]
    values = cpp_expr.kernel_code(list(h.values) if len(h.values) > 1 else h.values[0], scope, list(h.reads))
    used = set().union(*(E.names_in(v) for v in h.values))
    return [Kernel(f"{h.kernel}_hoist", values, [a for a in attrs if a.name in used], cpu_only=True), reading]
