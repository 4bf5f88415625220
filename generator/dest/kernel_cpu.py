"""csrc/kernels/<op>_cpu.cpp: the vectorized pointwise loops (forward, fused backward),
built once per CPU capability; and csrc/kernels/rows_summed.cpp, the driver of the backwards by
rows, which the library needs once."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from .. import expr as E
from ..api import cpp_expr
from ..dtypes import DTYPES
from ..library import Library
from ..model import OpSpec
from ..render import render
from . import op_context as ctx
from . import pointwise, reduction
from .files import GeneratedFile, Part

TEMPLATE = "csrc/kernels/op_cpu.cpp.j2"
ROWS_TEMPLATE = "csrc/kernels/rows_summed.cpp.j2"
ROWS_DTYPES = ("Float", "Double")  # what a backward by rows takes (others go through TensorIterator)


@dataclass(frozen=True)
class Loop:
    name: str
    attrs: list[ctx.KernelAttr]
    code: cpp_expr.KernelCode
    calls: SimpleNamespace  # the argument lists of the loop's lambdas, by kind of call
    lambda_params: str
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
        masked=masked,
        flat=flat,
        rows=rows,
    )


def emit(op: OpSpec, lib: Library) -> list[GeneratedFile | Part]:
    """The op's kernel file; for a backward by rows also a Part naming each dtype it runs
    opgen::rows_summed in (emit_rows_summed instantiates it for those)."""
    if op.is_reduction:
        r = reduction.reduction(op)
        text = render("csrc/kernels/reduction_cpu.cpp.j2", op=op, ns=lib.namespace, x=r.x, code=r.code, fold=r.fold,
                      identity=r.identity, attrs=r.attrs, post_text=_post_text(op))
        return [GeneratedFile(f"csrc/kernels/{op.name}_cpu.cpp", text, op.path)]
    loops = [loop(k.name, k.code, k.attrs, masked=k.masked, flat=k.flat, rows=k.rows) for k in pointwise.kernels(op)]
    text = render(TEMPLATE, op=op, ns=lib.namespace, kernel_text=op.kernel.text, loops=loops, bool_output=op.kernel.bool_output,
                  rows_dtypes=ROWS_DTYPES)
    rows = [Part(ROWS_TEMPLATE, d.cpp) for d in op.dtypes if d.scalar_type in ROWS_DTYPES] if any(l.rows for l in loops) else []
    return [GeneratedFile(f"csrc/kernels/{op.name}_cpu.cpp", text, op.path), *rows]


def emit_rows_summed(sections: dict[str, list[str]]) -> list[GeneratedFile]:
    """csrc/kernels/rows_summed.cpp, when an op's backward goes by rows."""
    dtypes = [d.cpp for d in DTYPES.values() if d.cpp in set(sections.get(ROWS_TEMPLATE, []))]
    return [GeneratedFile("csrc/kernels/rows_summed.cpp", render(ROWS_TEMPLATE, dtypes=dtypes))] if dtypes else []


def _post_text(op: OpSpec) -> str:
    post = getattr(op.kernel, "post", None)
    return E.unparse(post) if post is not None else ""
