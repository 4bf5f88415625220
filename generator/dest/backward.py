"""The backward of an op with a gradient: the `<op>_backward` op's schema and its kernel code.

`<op>_backward(Tensor grad, <saved tensors>, <attributes>, SymInt[] <input>__shape...)` returns
the gradient of every differentiable input whose formula is not an incoming gradient itself,
computed by one fused pass over the output's elements and summed back to each input's shape.
An input whose formula is `grad` gets `grad` from the autograd node, only reduced to its shape,
as ATen's AddBackward passes it on: no copy, no pass over memory. When every formula is one,
there is no backward op. Only tensors that the formulas read are saved; `__` cannot appear in
spec names, so the shape arguments never collide with them. An op with several outputs takes
`Tensor? grad_<output>` for each instead of `grad`: None for an output that was not used, whose
terms the kernel then leaves out (`<grad>__given` flags, see `masked_by_given_gradients`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property

from .. import expr as E
from ..api import cpp, cpp_expr
from ..derivatives import given_flag, gradient_formulas, masked_by_given_gradients
from ..model import OpSpec
from ..schema import Argument
from .op_context import KernelAttr, OptionalBinding, absent_tensors, kernel_attrs, kernel_scope


@dataclass(frozen=True)
class BackwardPlan:
    name: str
    inputs: tuple[str, ...]  # differentiable inputs, signature order
    formulas: tuple[E.Expr, ...]
    saved: tuple[str, ...]  # tensors the formulas read (inputs in signature order, then outputs)
    attributes: tuple[Argument, ...]  # attributes the formulas read
    kernel_attrs: tuple[KernelAttr, ...]
    grads: tuple[str, ...] = ("grad",)  # the incoming gradients, one per output of the op
    results: tuple[str, ...] = ("result",)  # the op's outputs as the formulas name them
    optional: tuple[str, ...] = ()  # saved Tensor? inputs: `Tensor?` in the schema, None when absent

    @property
    def optional_grads(self) -> bool:
        """Several outputs: each incoming gradient may be None (the output was not used)."""
        return len(self.grads) > 1

    @cached_property
    def kernel_formulas(self) -> tuple[E.Expr, ...]:
        """The fused kernel's formulas, those of `kernel_outputs`: with several outputs of the op,
        each gradient's terms masked by whether it was given."""
        formulas = [self.formulas[i] for i in self.kernel_outputs]
        if self.optional_grads:
            formulas = [masked_by_given_gradients(f, self.grads) for f in formulas]
        return tuple(formulas)

    def passthrough(self, i: int) -> str | None:
        """The incoming gradient that input i's formula is, unchanged (only reduced), if it is one."""
        f = self.formulas[i]
        return f.id if isinstance(f, E.Name) and f.id in self.grads else None

    def is_zero(self, i: int) -> bool:
        f = self.formulas[i]
        return isinstance(f, E.Num) and f.value == 0

    # cached: templates read these many times per op, and the plan never changes
    @cached_property
    def fused(self) -> tuple[int, ...]:
        """Outputs computed by the fused kernel; the others are an incoming gradient, only reduced, or 0."""
        return tuple(i for i in range(len(self.formulas)) if self.passthrough(i) is None and not self.is_zero(i))

    @cached_property
    def kernel_outputs(self) -> tuple[int, ...]:
        """The gradients the fused kernel stores: one per distinct formula of `fused`. An input whose
        formula is an earlier one's (x's and bias's in bias_gelu, `grad * gelu'(x + bias)`) is
        summed from that one's buffer: one pass over memory fewer."""
        first: dict[E.Expr, int] = {}
        return tuple(i for i in self.fused if first.setdefault(self.formulas[i], i) == i)

    def sharing(self, i: int) -> tuple[int, ...]:
        """The positions in `fused` (and so in `computed`, `shape_args` and output_mask) of the
        inputs whose gradient kernel output ``i`` holds."""
        return tuple(k for k, j in enumerate(self.fused) if self.formulas[j] == self.formulas[i])

    def buffer(self, k: int) -> int:
        """The kernel output holding the gradient at position ``k`` of `fused`."""
        return next(i for i in self.kernel_outputs if k in self.sharing(i))

    @property
    def kernel_masked(self) -> bool:
        """The kernel stores several gradients, each only where asked for (see `masked`)."""
        return len(self.kernel_outputs) > 1

    @cached_property
    def store_mask(self) -> str:
        """C++ for the kernel's `_store`: output_mask, or per kernel output whether one of the
        inputs sharing it was asked for."""
        if self.kernel_outputs == self.fused:
            return "output_mask"
        masks = [" || ".join(f"output_mask[{k}]" for k in self.sharing(i)) for i in self.kernel_outputs]
        return f"std::array<bool, {len(masks)}>{{{', '.join(masks)}}}"

    @cached_property
    def zeros(self) -> tuple[str, ...]:
        """The inputs whose gradient is 0 (read only through rounding functions or conditions): the
        node gives them zeros, as ATen's floor backward does, and the backward op leaves them out."""
        return tuple(n for i, n in enumerate(self.inputs) if self.is_zero(i))

    @cached_property
    def differentiated(self) -> tuple[str, ...]:
        """The inputs whose formula is not 0: the only ones whose tangents reach the outputs."""
        return tuple(n for i, n in enumerate(self.inputs) if not self.is_zero(i))

    @cached_property
    def computed(self) -> tuple[str, ...]:
        """The inputs whose gradients the backward op returns, in signature order; none: no backward op."""
        return tuple(self.inputs[i] for i in self.fused)

    @cached_property
    def passed_through(self) -> tuple[tuple[str, str], ...]:
        """(input, incoming gradient) for the inputs whose gradient the node passes on, only reduced."""
        return tuple((n, g) for i, n in enumerate(self.inputs) if (g := self.passthrough(i)) is not None)

    @cached_property
    def shape_args(self) -> tuple[str, ...]:
        return tuple(f"{n}__shape" for n in self.computed)

    @property
    def masked(self) -> bool:
        """Several gradients computed: the op takes `bool[N] output_mask`, as ATen's backward ops,
        and computes only those asked for (an input that does not require grad, or an absent
        Tensor?, costs neither a buffer nor a store nor a reduction); the others are None."""
        return len(self.computed) > 1

    def schema(self) -> str:
        grad_type = "Tensor?" if self.optional_grads else "Tensor"
        args = [f"{grad_type} {g}" for g in self.grads] + [f"Tensor{'?' if t in self.optional else ''} {t}" for t in self.saved]
        args += [f"{a.type} {a.name}" for a in self.attributes]
        args += [f"SymInt[] {s}" for s in self.shape_args]
        if self.masked:
            args.append(f"bool[{len(self.computed)}] output_mask")
        rets = "Tensor" if len(self.computed) == 1 else "(" + ", ".join("Tensor" for _ in self.computed) + ")"
        return f"{self.name}({', '.join(args)}) -> {rets}"

    @cached_property
    def return_type(self) -> str:
        if len(self.computed) == 1:
            return "at::Tensor"
        return "std::tuple<" + ", ".join("at::Tensor" for _ in self.computed) + ">"

    @cached_property
    def grad_cpp_type(self) -> str:
        return "const std::optional<at::Tensor>&" if self.optional_grads else "const at::Tensor&"

    def _params(self, grads: list[str], bound: bool = True) -> str:
        """``bound``: optional saved tensors as the tensors they are bound to (see op_context.OptionalBinding)."""
        parts = grads + [f"const at::Tensor& {t}" if bound or t not in self.optional else f"const std::optional<at::Tensor>& {t}__opt"
                         for t in self.saved]
        parts += [f"{cpp.argument_type(a.type)} {a.name}" for a in self.attributes]
        parts += [f"c10::SymIntArrayRef {s}" for s in self.shape_args]
        if self.masked:
            parts.append(f"std::array<bool, {len(self.computed)}> output_mask")
        return ", ".join(parts)

    @cached_property
    def cpp_params(self) -> str:
        """The registered kernels' parameters; optional gradients are named <grad>__opt (the kernel
        binds <grad> to a tensor)."""
        if self.optional_grads:
            return self._params([f"{self.grad_cpp_type} {g}__opt" for g in self.grads], bound=False)
        return self._params([f"const at::Tensor& {g}" for g in self.grads], bound=False)

    @cached_property
    def check_params(self) -> str:
        """The parameters of the argument check, which sees every gradient as a tensor."""
        return self._params([f"const at::Tensor& {g}" for g in self.grads])

    def bind_optional(self) -> list[str]:
        """C++ binding the optional saved tensors, the first incoming gradient standing in for an absent one."""
        return [line for t in self.optional for line in OptionalBinding(t).lines(self.grads[0])]

    @cached_property
    def cpp_args(self) -> str:
        return ", ".join([*self.grads, *self.saved, *(a.name for a in self.attributes), *self.shape_args]
                         + (["output_mask"] if self.masked else []))

    @cached_property
    def cpp_types(self) -> str:
        """The C++ function type, for Dispatcher::typed<>."""
        parts = [self.grad_cpp_type] * len(self.grads)
        parts += ["const std::optional<at::Tensor>&" if t in self.optional else "const at::Tensor&" for t in self.saved]
        parts += [cpp.argument_type(a.type) for a in self.attributes]
        parts += ["c10::SymIntArrayRef"] * len(self.computed)
        if self.masked:
            parts.append(f"std::array<bool, {len(self.computed)}>")
        return f"{self.return_type}({', '.join(parts)})"


@functools.lru_cache(maxsize=1024)
def plan(op: OpSpec) -> BackwardPlan | None:
    """The backward of ``op``; four emitters ask for it, so it is derived once per spec."""
    formulas = gradient_formulas(op)
    if not formulas or not op.is_pointwise:  # reductions: dest/autograd_reduction.py
        return None
    used: set[str] = set()
    for _, f in formulas:
        used |= E.names_in(f)
    grads, results = op.grad_names, op.result_names
    saved = tuple(a.name for a in op.tensor_inputs if a.name in used) + tuple(r for r in results if r in used)
    attributes = tuple(a for a in op.attributes if a.name in used)
    return BackwardPlan(
        name=f"{op.name}_backward",
        inputs=tuple(n for n, _ in formulas),
        formulas=tuple(f for _, f in formulas),
        saved=saved,
        attributes=attributes,
        kernel_attrs=tuple(kernel_attrs(op, used)) + tuple(KernelAttr(given_flag(g), "bool") for g in grads if len(grads) > 1),
        grads=grads,
        results=results,
        optional=tuple(t for t in saved if t in absent_tensors(op)),
    )


@functools.lru_cache(maxsize=1024)
def scope(op: OpSpec) -> E.Scope:
    s = kernel_scope(op)
    flags = {given_flag(g): E.BOOL for g in op.grad_names} if len(op.grad_names) > 1 else {}
    return s.extended({**{n: E.TENSOR for n in (*op.grad_names, *op.result_names)}, **flags}, "gradient formula")


def kernel_code(op: OpSpec, p: BackwardPlan) -> cpp_expr.KernelCode | None:
    if not p.fused:
        return None
    return cpp_expr.kernel_code(list(p.kernel_formulas), scope(op), [*p.grads, *p.saved])
