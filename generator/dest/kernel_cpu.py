"""csrc/kernels/<op>_cpu.cpp: the vectorized pointwise loops (forward, fused backward),
built once per CPU capability."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from .. import expr as E
from ..api import cpp_expr
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import op_context as ctx
from . import pointwise, reduction
from .files import GeneratedFile

TEMPLATE = "csrc/kernels/op_cpu.cpp.j2"


@dataclass(frozen=True)
class Loop:
    name: str
    attrs: list[ctx.KernelAttr]
    code: cpp_expr.KernelCode
    calls: SimpleNamespace  # the argument lists of the loop's lambdas, by kind of call
    lambda_params: str
    scalar_params: str
    vec_params: str
    masked: bool = False  # a fused backward whose flat loop skips outputs given as null pointers
    flat: bool = True  # the op calls its flat loop's entry, <name>_contiguous
    rows: bool = False  # a fused backward with an entry for broadcast rows, <name>_rows


def loop(name: str, code: cpp_expr.KernelCode, attrs: list[ctx.KernelAttr], masked: bool = False, flat: bool = True,
         rows: bool = False) -> Loop:
    tensors = code.params
    hoisted = [f"_u{i}" for i in range(len(code.hoisted_numbers))]

    def call(elements: list[str], suffix: str) -> str:
        return ", ".join(elements + [h + suffix for h in hoisted])

    calls = SimpleNamespace(
        scalar=call(tensors, ""),
        vec=call(tensors, "v"),
        reduced_scalar=call([f"static_cast<opmath_t>({t})" for t in tensors], ""),
        reduced_vec0=call([f"_{t}_lo" for t in tensors], "v"),
        reduced_vec1=call([f"_{t}_hi" for t in tensors], "v"),
    )
    return Loop(
        name=name,
        attrs=attrs,
        code=code,
        calls=calls,
        lambda_params=", ".join(f"[[maybe_unused]] auto {p}" for p in tensors + hoisted),
        scalar_params=", ".join(f"scalar_t {t}" for t in tensors),
        vec_params=", ".join(f"_vec {t}" for t in tensors),
        masked=masked,
        flat=flat,
        rows=rows,
    )


def emit(op: OpSpec, lib: Library) -> GeneratedFile:
    if op.is_reduction:
        r = reduction.reduction(op)
        text = render("csrc/kernels/reduction_cpu.cpp.j2", op=op, ns=lib.namespace, x=r.x, code=r.code, fold=r.fold,
                      identity=r.identity, attrs=r.attrs, post_text=_post_text(op))
        return GeneratedFile(f"csrc/kernels/{op.name}_cpu.cpp", text, op.path)
    loops = [loop(k.name, k.code, k.attrs, masked=k.masked, flat=k.flat, rows=k.rows) for k in pointwise.kernels(op)]
    text = render(TEMPLATE, op=op, ns=lib.namespace, kernel_text=op.kernel.text, loops=loops, bool_output=op.kernel.bool_output)
    return GeneratedFile(f"csrc/kernels/{op.name}_cpu.cpp", text, op.path)


def _post_text(op: OpSpec) -> str:
    post = getattr(op.kernel, "post", None)
    return E.unparse(post) if post is not None else ""
