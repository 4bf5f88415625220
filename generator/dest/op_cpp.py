"""csrc/ops/<op>.cpp: validation, output allocation, CPU and Meta kernels, registration, and the
op's Autograd section (one translation unit per op: each costs seconds to compile)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

from .. import expr as E
from ..api import cpp, cpp_expr
from ..library import Library
from ..model import OpSpec, ShapeRule
from ..render import render
from . import backward, custom, hoist, pointwise, reduction
from . import op_context as ctx
from .files import GeneratedFile, Part

TEMPLATE = "csrc/ops/op.cpp.j2"


def emit(op: OpSpec, lib: Library, autograd: Part | None = None, autocast: Part | None = None) -> GeneratedFile:
    """``autograd`` and ``autocast``: the op's sections of those kinds, rendered at the end."""
    if op.is_reduction:
        return emit_reduction(op, lib, autograd, autocast)
    if op.is_custom:
        return emit_custom(op, lib, autograd, autocast)
    used = set().union(*(E.names_in(e) for e in op.kernel.exprs))
    attrs = ctx.kernel_attrs(op, used)
    kernel_call = "".join(f", {a.passed}" for a in attrs)
    scope = ctx.check_scope(op)
    bw = backward.plan(op)
    outs = [f"_{n}" for n in op.output_names]  # C++ variables of the outputs: _out, or _<name> for several
    compiled = {k.name: k for k in pointwise.kernels(op)}
    kernels = [SimpleNamespace(name=op.name, attrs=attrs, outs=outs, inputs=[a.name for a in op.tensor_inputs],
                               memory_bound=compiled[op.name].memory_bound, masked=compiled[op.name].masked, cpu_only=False, flat=True,
                               rows=False)]
    bw_kernel_call = ""
    if bw is not None and bw.fused:
        kernels.append(SimpleNamespace(name=bw.name, attrs=list(bw.kernel_attrs), outs=[f"_g{i}" for i in bw.kernel_outputs],
                                       inputs=[*bw.grads, *bw.saved], memory_bound=compiled[bw.name].memory_bound, masked=compiled[bw.name].masked,
                                       cpu_only=False, flat=True, rows=compiled[bw.name].rows))
        bw_kernel_call = "".join(f", {a.passed}" for a in bw.kernel_attrs)
    hoisting = {}  # kernel name -> its hoisted values and the two kernels computing and reading them
    for h in (hoist.forward(op), hoist.backward_kernel(op)):
        if h is not None:
            pair = [compiled[hoist.values_kernel(op, h)], compiled[f"{h.kernel}_from_hoisted"]]
            outs_of = [list(h.names), outs if h.kernel == op.name else [f"_g{i}" for i in bw.kernel_outputs]]
            first, then = (SimpleNamespace(name=k.name, attrs=k.attrs, outs=o, inputs=k.code.params, memory_bound=k.memory_bound,
                                           masked=k.masked, cpu_only=True, flat=k.flat, rows=k.rows, call="".join(f", {a.passed}" for a in k.attrs))
                           for k, o in zip(pair, outs_of))
            declared = {k.name for k in kernels}
            kernels += [k for k in (first, then) if k.name not in declared]  # a values kernel shared with the forward: once
            hoisting[h.kernel] = SimpleNamespace(plan=h, first=first, then=then, needed=rows_needed(h.inputs, h.exprs))
    text = render(
        TEMPLATE,
        op=op,
        ns=lib.namespace,
        autograd=autograd,
        autocast=autocast,
        qualified_name=ctx.qualified_name(lib.namespace, op),
        params=ctx.cpp_parameters(op),
        args=ctx.cpp_arguments(op),
        tensors=[a.name for a in op.tensor_inputs],
        optional=[b.name for b in ctx.optional_bindings(op)],
        bind_optional=[line for b in ctx.optional_bindings(op) for line in b.lines(op.tensor_inputs[0].name)],
        dtype_names=ctx.dtype_names(op),
        checks=ctx.checks(op),
        shape_text=str(op.shape),
        shape_sizes=_shape_sizes(op.shape, scope),
        kernels=kernels,
        outs=outs,
        returns_type=cpp.returns_type(op.schema),
        schemas=registered_schemas(op),
        has_out="out" in op.variants,
        inplace=inplace(op),
        inplace_autograd=bw is not None,  # the autograd section records in-place calls too
        bool_output=op.kernel.bool_output,
        no_derivative=autograd is None and not op.kernel.bool_output,  # a bool output never requires grad
        bw=bw if bw is not None and bw.computed else None,  # the backward op, when there is one
        bw_kernel_call=bw_kernel_call,
        rows_needed=rows_needed([*bw.grads, *bw.saved], bw.kernel_formulas) if bw is not None and bw.fused else [],
        kernel_call=kernel_call,
        hoist=hoisting.get(op.name),
        bw_hoist=hoisting.get(bw.name) if bw is not None else None,
    )
    return GeneratedFile(f"csrc/ops/{op.name}.cpp", text, op.path)


def emit_reduction(op: OpSpec, lib: Library, autograd: Part | None, autocast: Part | None) -> GeneratedFile:
    r = reduction.reduction(op)
    outs = ["_values", "_indices"] if op.has_indices else ["_out"]
    text = render(
        "csrc/ops/reduction.cpp.j2",
        op=op,
        ns=lib.namespace,
        autograd=autograd,
        autocast=autocast,
        qualified_name=ctx.qualified_name(lib.namespace, op),
        params=cpp.parameters(op.schema.arguments),
        args=cpp.names(op.schema.arguments),
        x=r.x,
        dim=r.dim,
        keepdim=r.keepdim,
        dtype_names=ctx.dtype_names(op),
        checks=ctx.checks(op),
        attrs=r.attrs,
        kernel_call=r.kernel_call,
        outs=outs,
        out_params=", ".join(f"const at::Tensor& {o}" for o in outs),
        returns_type=cpp.returns_type(op.schema),
        schemas=registered_schemas(op),
        out_schema=out_schema(op) if "out" in op.variants else None,
        no_derivative=autograd is None,
    )
    return GeneratedFile(f"csrc/ops/{op.name}.cpp", text, op.path)


def emit_custom(op: OpSpec, lib: Library, autograd: Part | None, autocast: Part | None) -> GeneratedFile:
    c = custom.custom(op)
    scope = ctx.check_scope(op)
    converted = {*c.plain, *c.optional, *c.lists}
    kernel_args = ", ".join(f"_{a.name}" if a.name in converted else a.name for a in op.schema.arguments)
    n = len(op.tensor_inputs)
    bw_params = ", ".join([*(f"const at::Tensor& {g}" for g in op.grad_names), cpp.parameters(op.schema.arguments),
                           *(f"const at::Tensor& {r}" for r in op.result_names), f"std::array<bool, {n}> output_mask"])
    outputs = [SimpleNamespace(name=name, rule=rule, text=str(rule), sizes=_shape_sizes(rule, scope), reduce=_reduce_args(rule))
               for name, rule in zip(op.output_names, op.shapes)]
    text = render(
        "csrc/ops/custom.cpp.j2",
        op=op,
        ns=lib.namespace,
        autograd=autograd,
        autocast=autocast,
        c=c,
        first=c.plain[0] if c.plain else f"{op.shape.tensors[0]}[0]",
        same_list=op.shape.tensors[0] if op.shape.kind == "same" and op.shape.tensors[0] in c.lists else "",
        qualified_name=ctx.qualified_name(lib.namespace, op),
        params=cpp.parameters(op.schema.arguments),
        args=cpp.names(op.schema.arguments),
        kernel_args=kernel_args,
        dtype_names=ctx.dtype_names(op),
        dtype_list="{" + ", ".join(f"at::ScalarType::{d.scalar_type}" for d in op.dtypes) + "}",
        checks=ctx.checks(op),
        checked_optional=ctx.checked_optional_tensors(op),
        outputs=outputs,
        outs=[f"_{n}" for n in op.output_names],
        returns_type=cpp.returns_type(op.schema),
        schemas=registered_schemas(op),
        out_schema=out_schema(op) if "out" in op.variants else None,
        bw_params=bw_params,
        no_derivative=autograd is None,
        bw_args=", ".join([*op.grad_names, cpp.names(op.schema.arguments), *op.result_names, "output_mask"]),
        incoming=list(op.grad_names),
        results=list(op.result_names),
        grads=list(custom.grad_outputs(op)),
    )
    return GeneratedFile(f"csrc/ops/{op.name}.cpp", text, op.path)


def emit_kernel_header(op: OpSpec, lib: Library) -> GeneratedFile:
    c = custom.custom(op)
    text = render("csrc/kernels/op_kernel.h.j2", op=op, ns=lib.namespace, functions=c.files, dtype_names=ctx.dtype_names(op))
    return GeneratedFile(f"csrc/kernels/{op.name}_kernel.h", text, op.path)


def rows_needed(inputs: Sequence[str], formulas: Sequence[E.Expr]) -> list[str]:
    """C++ per input of a loop by rows (opgen::RowReads): whether a gradient it computes reads it,
    output k being computed when its buffer or its sum is there (`_full[k]`, `_sums[k]`)."""
    return [" || ".join(f"_full[{k}] || _sums[{k}]" for k, f in enumerate(formulas) if t in E.names_in(f)) or "false"
            for t in inputs]


def _shape_sizes(rule: ShapeRule, scope) -> list[str]:
    return [cpp_expr.symbolic(s, scope) if any(isinstance(n, E.Method) for n in E.walk(s))
            else f"c10::SymInt({cpp_expr.symbolic(s, scope)})" for s in rule.sizes]


def _reduce_args(rule: ShapeRule) -> SimpleNamespace | None:
    """C++ for a reduce(x, dim, keepdim) rule of a hand-written kernel: dims and keepdim, literal or arguments."""
    if rule.kind != "reduce":
        return None
    dim = f"int64_t{{{rule.dim}}}" if rule.literal_dim else rule.dim
    keepdim = {"True": "true", "False": "false", None: "false"}.get(rule.keepdim, rule.keepdim)
    return SimpleNamespace(x=rule.tensors[0], dim=dim, dim_name="dim" if rule.literal_dim else rule.dim, keepdim=keepdim)


def inplace(op: OpSpec) -> SimpleNamespace | None:
    """`<op>_(Tensor(a!) x, ...) -> ()`: the in-place overload, writing into the first argument."""
    if "inplace" not in op.variants:
        return None
    first = op.schema.arguments[0]
    schema = str(op.schema)
    head, _, _ = schema.rpartition(") -> ")
    name_end = head.index("(")
    rest = head[name_end + 1:]
    assert rest.startswith(f"Tensor {first.name}")
    params = ctx.cpp_parameters(op).replace(f"const at::Tensor& {first.name}", f"at::Tensor& {first.name}", 1)
    types = ", ".join(["at::Tensor&"] + [cpp.argument_type(a.type) for a in op.schema.arguments[1:]])
    return SimpleNamespace(name=f"{op.name}_", self=first.name, params=params, types=types,
                           schema=f"{op.name}_(Tensor(a!) {rest[len('Tensor '):]}) -> ()")


def registered_schemas(op: OpSpec) -> list[str]:
    """Every operator the op's file defines (`m.def`), in order: the op, its out= and in-place
    overloads, its backward op."""
    schemas = [str(op.schema)]
    if "out" in op.variants:
        schemas.append(out_schema(op))
    if (ip := inplace(op)) is not None:
        schemas.append(ip.schema)
    if op.is_custom:
        if op.gradient is not None and op.gradient.kernel is not None:
            schemas.append(custom.backward_schema(op))
    elif not op.is_reduction:
        bw = backward.plan(op)
        if bw is not None and bw.computed:
            schemas.append(bw.schema())
    return schemas


def out_schema(op: OpSpec) -> str:
    """`<op>.out(..., *, Tensor(a!) out) -> ()`: the out= overload of a one-output op."""
    schema = str(op.schema)
    head, _, _ = schema.rpartition(") -> ")
    star = "" if any(a.kwarg_only for a in op.schema.arguments) else "*, "
    name_end = head.index("(")
    return f"{head[:name_end]}.out{head[name_end:]}, {star}Tensor(a!) out) -> ()"
