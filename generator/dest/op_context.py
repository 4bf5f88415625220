"""Per-op values shared by the C++ emitters (names, parameters, validation code)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from .. import expr as E
from ..api import cpp, cpp_expr
from ..model import OpSpec, expression_scope, list_attributes, optional_tensors, size_lists
from ..schema import Type


@dataclass(frozen=True)
class KernelAttr:
    name: str
    cpp_type: str
    arg: str = ""  # C++ passing the op's argument to the kernel parameter (default: the name)

    @property
    def passed(self) -> str:
        return self.arg or self.name


@functools.lru_cache(maxsize=1024)  # asked for by most emitters; scopes are never modified
def kernel_scope(op: OpSpec) -> E.Scope:
    return expression_scope(op.attributes, {a.name: E.TENSOR for a in op.tensor_inputs}, elementwise=True, what="kernel expression",
                            absent=absent_tensors(op))


def absent_tensors(op: OpSpec) -> frozenset[str]:
    """A pointwise op's Tensor? inputs: the generated C++ binds each to a stand-in when None
    (see `optional_bindings`) and tests `<name>__absent`."""
    return optional_tensors(op) if op.is_pointwise else frozenset()


_SYMINT = Type("SymInt")


@functools.lru_cache(maxsize=1024)
def check_scope(op: OpSpec) -> E.Scope:
    # a hand-written op's checks read a Tensor? through its std::optional (after an `is None` test)
    optional = optional_tensors(op) if op.is_custom else frozenset()
    s = expression_scope(op.attributes, {a.name: E.TENSOR for a in op.tensor_inputs}, elementwise=False, what="check",
                         absent=absent_tensors(op) | optional)
    values = {a.name: cpp.to_member(a.type, a.name) for a in op.attributes if a.type.base == "Scalar"}
    return dataclasses.replace(s, cpp_values={**values, **{t: f"(*{t})" for t in optional}},
                               sizes=frozenset(a.name for a in op.attributes if a.type == _SYMINT) | size_lists(op.attributes).keys())


def checked_optional_tensors(op: OpSpec) -> list[str]:
    """A hand-written op's Tensor? inputs its checks test (`bias is None or bias.size(0) == ...`):
    its check binds `<name>__absent` for each."""
    if not op.is_custom:
        return []
    read = set().union(*(E.names_in(c.expr) for c in op.checks))
    return [t for t in sorted(optional_tensors(op)) if t in read]


def kernel_attrs(op: OpSpec, used: set[str]) -> list[KernelAttr]:
    """The per-call values a kernel reading ``used`` takes: attributes, then whether each optional
    tensor it reads is None (its reads are guarded by `is None` tests, hoisted out of the loop)."""
    out = []
    for a in op.attributes:
        if a.name in used:
            if a.type.base == "Scalar" or a.type == _SYMINT:
                # kernels compute with doubles and concrete ints, as autograd nodes keep them: an
                # at::Scalar (or Scalar?) converted once per call, a SymInt concrete by the time a kernel runs
                out.append(KernelAttr(a.name, cpp.member_type(a.type), cpp.to_member(a.type, a.name)))
            else:
                out.append(KernelAttr(a.name, cpp.argument_type(a.type)))
    absent = absent_tensors(op)
    out += [KernelAttr(f"{a.name}__absent", "bool") for a in op.tensor_inputs if a.name in absent and a.name in used]
    return out


@dataclass(frozen=True)
class OptionalBinding:
    """C++ binding a Tensor? parameter (`<name>__opt`) to a tensor: `<name>__absent` tells whether
    it is None, `<name>` is the tensor or, when None, a stand-in that never changes the result (an
    input the output's shape and dtype already include), read by kernels but never used."""
    name: str

    def lines(self, stand_in: str) -> list[str]:
        n = self.name
        return [f"[[maybe_unused]] const bool {n}__absent = !opgen::is_given({n}__opt);",
                f"const at::Tensor& {n} = {n}__absent ? {stand_in} : *{n}__opt;"]


def optional_bindings(op: OpSpec) -> list[OptionalBinding]:
    absent = absent_tensors(op)
    return [OptionalBinding(a.name) for a in op.tensor_inputs if a.name in absent]


def cpp_parameters(op: OpSpec) -> str:
    """The C++ parameters of the op's functions; a pointwise op's Tensor? inputs are `<name>__opt`."""
    absent = absent_tensors(op)
    return ", ".join(f"{cpp.argument_type(a.type)} {a.name}__opt" if a.name in absent else f"{cpp.argument_type(a.type)} {a.name}"
                     for a in op.schema.arguments)


def cpp_arguments(op: OpSpec) -> str:
    absent = absent_tensors(op)
    return ", ".join(f"{a.name}__opt" if a.name in absent else a.name for a in op.schema.arguments)


def qualified_name(namespace: str, op: OpSpec) -> str:
    return f"{namespace}.{op.name}"


def dtype_names(op: OpSpec) -> str:
    return ", ".join(d.name for d in op.dtypes)


@dataclass(frozen=True)
class CheckCode:
    macro: str
    code: str
    message: str  # C++ arguments of the message after the op's name


def checks(op: OpSpec) -> list[CheckCode]:
    """The argument checks of the op's entry: the sizes of the lists expressions index, then the spec's."""
    scope = check_scope(op)
    # a Tensor? may be None (a check such as `bias is not None and bias.dim() == 1` fails then):
    # its message shows it through the std::optional
    optional = {t: f"{t}__opt" if t in absent_tensors(op) else t for t in optional_tensors(op)}
    out = [CheckCode("TORCH_CHECK_VALUE", f"{name}.size() == {size}",
                     f'"(): argument \'{name}\' must have {size} elements, as its type {op.schema.argument(name).type} says (got ", {name}.size(), ")"')
           for name, size in indexed_lists(op).items()]
    for c in op.checks:
        reads_sizes = any(isinstance(n, E.Method) for n in E.walk(c.expr))
        code = cpp_expr.symbolic(c.expr, scope)
        if not reads_sizes and E.names_in(c.expr) & scope.sizes:
            # on SymInt attributes only: a ValueError like other attribute checks; expect_true, as
            # TORCH_SYM_CHECK, defers a symbolic condition to run time instead of specializing
            code = f"({code}).expect_true(__FILE__, __LINE__)"
        attrs = [n for n in sorted(E.names_in(c.expr)) if scope.names.get(n) not in (E.TENSOR, None, "unusable")]
        # every tensor whose sizes the check reads, by its whole shape: a size the check guards
        # (`x.dim() == 2 and x.size(1) == 3`) may not exist
        shaped = dict.fromkeys(n.obj.id for n in E.walk(c.expr) if isinstance(n, E.Method))
        got = [f'{t}", opgen::optional_shape({optional[t]}), "' if t in optional else f'{t} of shape ", {t}.sym_sizes(), "'
               for t in shaped] + [
            f'{a}=", opgen::shown({a}), "' for a in attrs]
        values = " (got " + ", ".join(got) + ")" if got else ""
        message = f'"(): check \'", {cpp.string_literal(c.text)}, "\' failed{values}"'
        out.append(CheckCode("TORCH_SYM_CHECK" if reads_sizes else "TORCH_CHECK_VALUE", code, message))
    return out


@functools.lru_cache(maxsize=1024)
def indexed_lists(op: OpSpec) -> dict[str, int]:
    """The list attributes that some expression of the op indexes (`betas[0]`), with their sizes."""
    sizes = list_attributes(op.attributes, sizes=True)
    if not sizes:  # nothing to index: skip the walk over the whole model (~0.2 ms a spec)
        return {}
    indexed = [n.obj.id for e in _expressions(op) for n in E.walk(e) if isinstance(n, E.Index)]
    if op.gradient is not None:  # whole-tensor formulas of hand-written ops
        indexed += [name for _, f in op.gradient.tensor_formulas for name in sorted(f.indexed())]
    return {name: sizes[name] for name in indexed}


def _expressions(value) -> list[E.Expr]:
    """Every expression held anywhere in a spec's model (kernels, checks, shapes, gradients)."""
    if E.is_expr(value):
        return [value]
    if dataclasses.is_dataclass(value):
        return [e for f in dataclasses.fields(value) for e in _expressions(getattr(value, f.name))]
    if isinstance(value, (tuple, list)):
        return [e for v in value for e in _expressions(v)]
    if isinstance(value, dict):
        return [e for v in value.values() for e in _expressions(v)]
    return []
