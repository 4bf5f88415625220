"""python/<ns>/: the typed package: the wrappers of every op in _ops.py, their float64 references
in _references.py (each op renders its own section of both), stubs, vmap/DTensor rules."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from .. import expr as E
from ..api import python
from ..library import Library
from ..model import OpSpec, ReduceKernel
from ..render import render
from . import backward, reduction
from .files import GeneratedFile, Part
from .op_context import kernel_scope


def library_file(lib: Library) -> str:
    return f"lib{lib.namespace}.so"


@dataclass(frozen=True)
class Stub:
    name: str
    params: str
    docstring: str
    returns: str


WRAPPER = "python/_ops/op.py.j2"
REFERENCE = "python/_references/op.py.j2"


def emit_package(lib: Library, sections: dict[str, list[str]]) -> list[GeneratedFile]:
    """The package's files; ``sections`` holds the ops' parts of them by template, in op order."""
    base = f"python/{lib.namespace}"
    stubs = []
    for op in lib.ops:
        stubs.append(Stub(op.name, wrapper_parameters(op), docstring(op), returns_annotation(op)))
        if (ip := inplace(op)) is not None:
            stubs.append(Stub(f"{op.name}_", ip.params, ip.docstring, "Tensor"))
    broadcasting = [op for op in lib.ops if batches_by_broadcasting(op)]
    named = [(op.name, op.output_names) for op in lib.ops if len(op.schema.returns) > 1]  # return_types.<op>
    return [
        GeneratedFile(f"{base}/__init__.py", render("python/__init__.py.j2", ns=lib.namespace, ops=lib.ops, named=named)),
        GeneratedFile(f"{base}/__init__.pyi", render("python/__init__.pyi.j2", ns=lib.namespace, stubs=stubs, named=named)),
        GeneratedFile(f"{base}/py.typed", ""),
        GeneratedFile(f"{base}/_rules.py", render("python/_rules.py.j2", ns=lib.namespace, ops={o.name: len(o.schema.returns) for o in broadcasting},
                                                  inplace=[f"{o.name}_" for o in broadcasting if "inplace" in o.variants],
                                                  backwards={p.name: len(p.computed) for p in map(backward.plan, broadcasting) if p and p.computed},
                                                  sharded=[o.name for o in broadcasting if not any(a.type.is_list for a in o.tensor_inputs)])),
        GeneratedFile(f"{base}/_library.py", render("python/_library.py.j2", ns=lib.namespace,
                                                    library_file=library_file(lib), build_dir=lib.build_dir_from_python)),
        GeneratedFile(f"{base}/_ops.py", render("python/_ops.py.j2", ns=lib.namespace, sections=sections.get(WRAPPER, []), named=named)),
        GeneratedFile(f"{base}/_references.py", render("python/_references.py.j2", sections=sections.get(REFERENCE, []))),
    ]


def batches_by_broadcasting(op: OpSpec) -> bool:
    """True when a leading batch dimension is one more broadcast dimension to the op: its output
    shape is the broadcast of its (positional) tensor inputs and no check reads a size."""
    broadcasting = op.shape.kind == "broadcast" or (op.shape.kind == "same" and len(op.tensor_inputs) == 1)
    reads_sizes = any(isinstance(n, E.Method) for c in op.checks for n in E.walk(c.expr))
    return broadcasting and not reads_sizes and not any(a.kwarg_only for a in op.tensor_inputs)


def has_out(op: OpSpec) -> bool:
    """Whether the op has an out= overload (by default every one-output op; see `variants`)."""
    return "out" in op.variants


def overloads(op: OpSpec) -> list[tuple[str, str]]:
    """The overloads the wrappers call: (name in _ops.py, attribute path under torch.ops.<ns>)."""
    names = [("default", f"{op.name}.default")]
    if has_out(op):
        names.append(("out", f"{op.name}.out"))
    if "inplace" in op.variants:
        names.append(("inplace", f"{op.name}_.default"))
    return names


def inplace(op: OpSpec) -> SimpleNamespace | None:
    """The in-place wrapper `<op>_`: the schema's parameters, writing into and returning the first."""
    if "inplace" not in op.variants:
        return None
    first = op.schema.arguments[0].name
    doc = f"In-place {op.name}: writes the result into ``{first}`` (which must have the result's shape and dtype) and returns it.\n"
    return SimpleNamespace(self=first, params=python.parameters(op.schema.arguments), docstring=doc)


def returns_annotation(op: OpSpec) -> str:
    """One output: a Tensor; several: a named tuple, `return_types.<op>`, as torch.return_types."""
    return "Tensor" if len(op.schema.returns) == 1 else f"return_types.{op.name}"


def docstring(op: OpSpec) -> str:
    text = op.doc or f"The {op.name} op."
    out = " With ``out=``, writes into that tensor (resized if needed)." if has_out(op) else ""
    return f"{text}\n\nSchema: ``{op.schema}``.{out}\n"


def wrapper_parameters(op: OpSpec) -> str:
    """The typed wrapper's parameters: the schema's, then a keyword-only `out`."""
    if not has_out(op):
        return python.parameters(op.schema.arguments)
    out_param = (", " if any(a.kwarg_only for a in op.schema.arguments) else ", *, ") + "out: Optional[Tensor] = None"
    return python.parameters(op.schema.arguments) + out_param


_TORCH_REDUCTIONS = {"sum": "torch.sum", "mean": "torch.mean", "max": "torch.amax", "min": "torch.amin",
                     "logsumexp": "torch.logsumexp"}


def reduction_reference(op: OpSpec) -> str:
    """The reduction in float64 torch: torch's own reduction of the mapped input where there is one,
    else a fold one element at a time; then the post expression."""
    k = op.kernel
    assert isinstance(k, ReduceKernel)
    scope = reduction.scope(op)
    x, dim, keepdim = op.shape.tensors[0], op.shape.dim, op.shape.keepdim or "False"
    mapped = python.reference(k.map, scope)
    if op.has_indices:
        return f"tuple(torch.{k.combine}({mapped}, {dim}, {keepdim}))"
    dims = f"_reduce_dims({x}, {dim})"
    if k.combine in _TORCH_REDUCTIONS:
        value = f"{_TORCH_REDUCTIONS[k.combine]}({mapped}, {dims}, {keepdim})"
    else:
        custom = reduction.combine(k)
        identity = python.literal(k.identity if k.identity is not None else 1.0)
        if (isinstance(custom, E.Call) and custom.fn in ("maximum", "minimum")
                and sorted(a.id for a in custom.args if isinstance(a, E.Name)) == ["_a", "_b"]):
            value = f"_extreme({mapped}, {dims}, {keepdim}, {custom.fn == 'maximum'}, {identity})"
        else:
            combine = "lambda _a, _b: " + (python.reference(custom, scope) if custom is not None else "_a * _b")
            value = f"_fold({mapped}, {dims}, {keepdim}, {combine}, {identity})"
    if k.post is None:
        return value
    return f"(lambda _acc: {python.reference(reduction.post(k), scope)})({value})"


def emit_op(op: OpSpec, lib: Library) -> list[Part]:
    """The op's wrapper (in _ops.py) and reference (in _references.py)."""
    params = python.parameters(op.schema.arguments)
    wrapper = render(WRAPPER, op=op, params=wrapper_parameters(op), overloads=overloads(op),
                     has_out=has_out(op), returns=returns_annotation(op), inplace=inplace(op),
                     call=python.call_arguments(op.schema.arguments), docstring=docstring(op))
    if op.reference is not None:
        expression = op.reference
    elif op.is_reduction:
        expression = reduction_reference(op)
    else:
        expressions = [python.reference(e, kernel_scope(op)) for e in op.kernel.exprs]
        if op.shape.kind == "explicit":  # the rule's shape may exceed the inputs' broadcast
            sizes = "".join(f"{python.size(e)}, " for e in op.shape.sizes)
            expressions = [f"torch.broadcast_to(torch.as_tensor({e}, dtype=torch.float64), ({sizes}))" for e in expressions]
        else:  # an expression that leaves out a tensor of the rule (clamp(x, lo, hi) beside y) has a smaller shape
            tensors = [a.name for a in op.tensor_inputs]
            shapes = [f"*(() if {a.name} is None else ({a.name}.shape,))" if a.type.optional else f"{a.name}.shape"
                      for a in op.tensor_inputs]
            shape = f"torch.broadcast_shapes({', '.join(shapes)})"
            expressions = [f"torch.broadcast_to(torch.as_tensor({text}, dtype=torch.float64), {shape})"
                           if not set(tensors) <= E.names_in(e) else text for text, e in zip(expressions, op.kernel.exprs)]
        expression = expressions[0] if len(expressions) == 1 else f"({', '.join(expressions)})"
    ref = render(REFERENCE, op=op, params=params.replace(": Tensor", ": torch.Tensor"), expression=expression)
    return [Part(WRAPPER, wrapper), Part(REFERENCE, ref)]
