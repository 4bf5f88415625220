"""csrc/kernels/<op>_cpu.cpp: the vectorized pointwise loop, built per CPU capability."""

from __future__ import annotations

from .. import expr as E
from ..api import cpp_expr
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import op_context as ctx
from .files import GeneratedFile

TEMPLATE = "csrc/kernels/op_cpu.cpp.j2"


def emit(op: OpSpec, lib: Library) -> GeneratedFile:
    tensors = [a.name for a in op.tensor_inputs]
    code = cpp_expr.kernel_code(op.kernel.expr, ctx.kernel_scope(op), tensors)
    hoisted = [f"_u{i}" for i in range(len(code.hoisted_numbers))]

    def call(elements: list[str], suffix: str) -> str:
        return ", ".join(elements + [h + suffix for h in hoisted])

    calls = {
        "scalar": call(tensors, ""),
        "vec": call(tensors, "v"),
        "reduced_scalar": call([f"static_cast<opmath_t>({t})" for t in tensors], ""),
        "reduced_vec0": call([f"_{t}_lo" for t in tensors], "v"),
        "reduced_vec1": call([f"_{t}_hi" for t in tensors], "v"),
    }
    lambda_params = ", ".join(f"[[maybe_unused]] auto {p}" for p in tensors + hoisted)
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        qualified_name=ctx.qualified_name(lib.namespace, op),
        kernel_text=op.kernel.text,
        kernel_attrs=ctx.kernel_attrs(op, E.names_in(op.kernel.expr)),
        code=code,
        calls=calls,
        lambda_params=lambda_params,
        scalar_params=", ".join(f"scalar_t {t}" for t in tensors),
        vec_params=", ".join(f"_vec {t}" for t in tensors),
    )
    return GeneratedFile(f"csrc/kernels/{op.name}_cpu.cpp", text, op.path)
