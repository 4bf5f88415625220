"""csrc/kernels/<op>_cuda.cu: the CUDA pointwise kernels (forward, fused backward)."""

from __future__ import annotations

from ..library import Library
from ..model import OpSpec
from ..render import render
from . import pointwise, reduction
from .files import GeneratedFile

TEMPLATE = "csrc/kernels/op_cuda.cu.j2"


def emit(op: OpSpec, lib: Library) -> GeneratedFile:
    if op.is_reduction:
        r = reduction.reduction(op)
        text = render("csrc/kernels/reduction_cuda.cu.j2", op=op, ns=lib.namespace, x=r.x, code=r.code, fold=r.fold,
                      identity=r.identity, attrs=r.attrs)
        return GeneratedFile(f"csrc/kernels/{op.name}_cuda.cu", text, op.path)
    text = render(TEMPLATE, op=op, ns=lib.namespace, kernel_text=op.kernel.text, loops=[k for k in pointwise.kernels(op) if not k.cpu_only],
                  bool_output=op.kernel.bool_output)
    return GeneratedFile(f"csrc/kernels/{op.name}_cuda.cu", text, op.path)
