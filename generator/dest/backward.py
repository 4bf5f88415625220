"""The backward of an op with a gradient: the `<op>_backward` op's schema and its kernel code.

`<op>_backward(Tensor grad, <saved tensors>, <attributes>, SymInt[] <input>__shape...)` returns
one gradient per differentiable input, computed by one fused pass over the output's elements
and summed back to each input's shape. Only tensors that the formulas read are saved;
`__` cannot appear in spec names, so the shape arguments never collide with them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .. import expr as E
from ..api import cpp, cpp_expr
from ..derivatives import gradient_formulas
from ..model import OpSpec
from ..schema import Argument
from .op_context import KernelAttr, kernel_attrs, kernel_scope


@dataclass(frozen=True)
class BackwardPlan:
    name: str
    inputs: tuple[str, ...]  # differentiable inputs, signature order
    formulas: tuple[E.Expr, ...]
    saved: tuple[str, ...]  # tensors the formulas read (inputs in signature order, then 'result')
    attributes: tuple[Argument, ...]  # attributes the formulas read
    kernel_attrs: tuple[KernelAttr, ...]

    @property
    def fused(self) -> tuple[int, ...]:
        """Outputs computed by the fused kernel; the others are `grad` itself, only reduced."""
        return tuple(i for i, f in enumerate(self.formulas) if f != E.Name("grad"))

    @property
    def shape_args(self) -> tuple[str, ...]:
        return tuple(f"{n}__shape" for n in self.inputs)

    def schema(self) -> str:
        args = ["Tensor grad"] + [f"Tensor {t}" for t in self.saved]
        args += [f"{a.type} {a.name}" for a in self.attributes]
        args += [f"SymInt[] {s}" for s in self.shape_args]
        rets = "Tensor" if len(self.inputs) == 1 else "(" + ", ".join("Tensor" for _ in self.inputs) + ")"
        return f"{self.name}({', '.join(args)}) -> {rets}"

    @property
    def return_type(self) -> str:
        if len(self.inputs) == 1:
            return "at::Tensor"
        return "std::tuple<" + ", ".join("at::Tensor" for _ in self.inputs) + ">"

    @property
    def cpp_params(self) -> str:
        parts = ["const at::Tensor& grad"] + [f"const at::Tensor& {t}" for t in self.saved]
        parts += [f"{cpp.argument_type(a.type)} {a.name}" for a in self.attributes]
        parts += [f"c10::SymIntArrayRef {s}" for s in self.shape_args]
        return ", ".join(parts)

    @property
    def cpp_args(self) -> str:
        return ", ".join(["grad", *self.saved, *(a.name for a in self.attributes), *self.shape_args])

    @property
    def cpp_types(self) -> str:
        """The C++ function type, for Dispatcher::typed<>."""
        parts = ["const at::Tensor&"] * (1 + len(self.saved))
        parts += [cpp.argument_type(a.type) for a in self.attributes]
        parts += ["c10::SymIntArrayRef"] * len(self.inputs)
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
    saved = tuple(a.name for a in op.tensor_inputs if a.name in used) + (("result",) if "result" in used else ())
    attributes = tuple(a for a in op.attributes if a.name in used)
    return BackwardPlan(
        name=f"{op.name}_backward",
        inputs=tuple(n for n, _ in formulas),
        formulas=tuple(f for _, f in formulas),
        saved=saved,
        attributes=attributes,
        kernel_attrs=tuple(kernel_attrs(op, used)),
    )


def scope(op: OpSpec) -> E.Scope:
    s = kernel_scope(op)
    return E.Scope({**s.names, "grad": E.TENSOR, "result": E.TENSOR}, True, "gradient formula")


def kernel_code(op: OpSpec, p: BackwardPlan) -> cpp_expr.KernelCode | None:
    if not p.fused:
        return None
    return cpp_expr.kernel_code([p.formulas[i] for i in p.fused], scope(op), ["grad", *p.saved])
