"""csrc/kernels/<op>_cuda.cu: the CUDA pointwise kernels (forward, fused backward)."""

from __future__ import annotations

from dataclasses import dataclass

from ..api import cpp_expr
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import op_context as ctx
from . import pointwise
from .files import GeneratedFile

TEMPLATE = "csrc/kernels/op_cuda.cu.j2"


@dataclass(frozen=True)
class Loop:
    name: str
    attrs: list[ctx.KernelAttr]
    code: cpp_expr.KernelCode
    params: str  # the device lambda's parameters, one element per input


def emit(op: OpSpec, lib: Library) -> GeneratedFile:
    loops = [Loop(k.name, k.attrs, k.code, ", ".join(f"scalar_t _{t}_in" for t in k.code.params)) for k in pointwise.kernels(op)]
    text = render(TEMPLATE, op=op, ns=lib.namespace, kernel_text=op.kernel.text, loops=loops)
    return GeneratedFile(f"csrc/kernels/{op.name}_cuda.cu", text, op.path)
