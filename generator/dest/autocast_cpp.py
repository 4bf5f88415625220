"""The Autocast section of csrc/ops/<op>.cpp for an op with `autocast:`: kernels under the
AutocastCPU and AutocastCUDA keys that cast the floating inputs as ATen's autocast wrappers do
(autocast_mode.cpp), then call the op with autocast off."""

from __future__ import annotations

from ..api import cpp
from ..library import Library
from ..model import AUTOCAST, OpSpec
from ..render import render
from .files import Part

TEMPLATE = "csrc/autocast/op.cpp.j2"
# (suffix of the kernel's name, c10::DeviceType, dispatch key)
DEVICES = (("cpu", "CPU", "AutocastCPU"), ("cuda", "CUDA", "AutocastCUDA"))


def emit(op: OpSpec, lib: Library) -> Part | None:
    if op.autocast is None:
        return None
    args = op.schema.arguments
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        policy=op.autocast,
        what=AUTOCAST[op.autocast][0],
        devices=DEVICES,
        params=cpp.parameters(args),
        returns_type=cpp.returns_type(op.schema),
        op_type=f"{cpp.returns_type(op.schema)}({', '.join(cpp.argument_type(a.type) for a in args)})",
        arguments=[(a.name, a.type.base == "Tensor") for a in args],
        tensors=[a.name for a in args if a.type.base == "Tensor" and not a.type.optional],
        optional_tensors=[a.name for a in args if a.type.base == "Tensor" and a.type.optional],
    )
    return Part(TEMPLATE, text)
