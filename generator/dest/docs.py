"""docs/: one Markdown reference page per op and an index."""

from __future__ import annotations

from .. import expr as E
from ..library import Library
from ..model import AUTOCAST, CustomKernel, OpSpec, ReduceKernel
from ..render import markdown_code as md_code
from ..render import render
from .custom import spec_relative
from .files import GeneratedFile
from .op_context import dtype_names


def _gradient(op: OpSpec) -> str:
    if op.gradient is None:
        return "none (not differentiable)"
    if op.gradient.auto:
        return "derived from the kernel (auto)"
    surrogate = f" (surrogate, not the kernel's derivative: {', '.join(op.test.surrogate)})" if op.test.surrogate else ""
    if op.gradient.kernel is not None:
        text = "hand-written backward: " + ", ".join(f"{d} {spec_relative(op, f)}" for d, f in op.gradient.kernel.files().items())
    elif op.gradient.tensor_formulas:
        text = "; ".join(f"{n}: {f.text}" for n, f in op.gradient.tensor_formulas)
    else:
        text = "; ".join(f"{n}: {E.unparse(f)}" for n, f in op.gradient.formulas)
    return text + surrogate


def _example(op: OpSpec, ns: str) -> str:
    lines = ["import torch", ""]
    args = []
    example = dict(op.test.shapes)
    for a in op.tensor_inputs:
        shape = ", ".join(str(n) for n in example.get(a.name, (4, 8)))
        if a.type.is_list:
            lines.append(f"{a.name} = [torch.randn({shape}), torch.randn({shape})]")
        else:
            lines.append(f"{a.name} = torch.randn({shape})")
        args.append(f"{a.name}={a.name}" if a.kwarg_only else a.name)
    for a in op.attributes:
        if not a.has_default:
            value = {"float": "1.0", "int": "1", "bool": "True", "str": "''", "Scalar": "1.0"}.get(a.type.base, "None")
            args.append(f"{a.name}={value}" if a.kwarg_only else value)
    result = ", ".join(op.output_names) if len(op.schema.returns) > 1 and all(r.name for r in op.schema.returns) else "y"
    lines.append(f"{result} = {ns}.{op.name}({', '.join(args)})")
    return "\n".join(lines)


def _kernel(op: OpSpec) -> str:
    k = op.kernel
    if isinstance(k, ReduceKernel):
        parts = [f"map {md_code(k.text)}", f"combine {md_code(k.combine_text)}"]
        if k.combine == "custom":
            parts.append(f"identity {md_code(str(k.identity))}")
        if k.post is not None:
            parts.append(f"post {md_code(E.unparse(k.post))}")
        return "reduce: " + ", ".join(parts)
    if isinstance(k, CustomKernel):
        return "hand-written: " + ", ".join(f"{device} {md_code(spec_relative(op, f))}" for device, f in k.files().items())
    return f"pointwise: {md_code(k.text)}" + (" (bool output)" if k.bool_output else "")


def _shapes(op: OpSpec) -> str:
    if not op.output_shapes:
        return md_code(str(op.shape))
    return "<br>".join(f"{n}: {md_code(str(r))}" for n, r in zip(op.output_names, op.shapes))


def emit_op(op: OpSpec, lib: Library) -> GeneratedFile:
    text = render("docs/op.md.j2", op=op, ns=lib.namespace, dtype_names=dtype_names(op), kernel=_kernel(op), shapes=_shapes(op),
                  gradient=_gradient(op), example=_example(op, lib.namespace),
                  autocast_what=AUTOCAST[op.autocast][0] if op.autocast else None)
    return GeneratedFile(f"docs/{op.name}.md", text, op.path)


def emit_index(lib: Library) -> GeneratedFile:
    return GeneratedFile("docs/index.md", render("docs/index.md.j2", ns=lib.namespace, ops=lib.ops))
