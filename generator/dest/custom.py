"""What the emitters of an op with hand-written kernels share: the C++ signatures of the user's
kernel functions (forward and backward, CPU and CUDA), the files that hold them, and the
backward op's schema."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..api import cpp
from ..model import CustomKernel, OpSpec
from ..schema import Argument


@dataclass(frozen=True)
class UserFunction:
    name: str  # e.g. rms_norm_cpu
    device: str  # cpu | cuda
    file: str  # relative to the project root, e.g. specs/rms_norm.cpu.cpp
    params: str  # C++ parameter list
    backward: bool

    @property
    def declaration(self) -> str:
        return f"void {self.name}({self.params})"


@dataclass(frozen=True)
class Custom:
    plain: tuple[str, ...]  # plain Tensor inputs
    optional: tuple[str, ...]  # Tensor? inputs
    lists: tuple[str, ...]  # Tensor[] inputs
    forward: tuple[UserFunction, ...]
    backward: tuple[UserFunction, ...]
    backward_name: str

    @property
    def has_cuda(self) -> bool:
        return any(f.device == "cuda" for f in self.forward)

    @property
    def backward_has_cuda(self) -> bool:
        return any(f.device == "cuda" for f in self.backward)

    @property
    def files(self) -> tuple[UserFunction, ...]:
        return self.forward + self.backward


def spec_relative(op: OpSpec, file: str) -> str:
    """A kernel file's path relative to the project root (the spec names it relative to itself)."""
    return (PurePosixPath(op.path).parent / file).as_posix()


def _functions(op: OpSpec, kernel: CustomKernel, stem: str, params: str, backward: bool) -> tuple[UserFunction, ...]:
    return tuple(UserFunction(f"{stem}_{device}", device, spec_relative(op, file), params, backward)
                 for device, file in kernel.files().items())


def grad_outputs(op: OpSpec) -> tuple[str, ...]:
    """The backward's outputs: one gradient per tensor input."""
    return tuple(f"grad_{a.name}" for a in op.tensor_inputs)


def backward_params(op: OpSpec) -> str:
    parts = [f"const at::Tensor& {g}" for g in op.grad_names] + [cpp.parameters(op.schema.arguments)]
    parts += [f"const at::Tensor& {r}" for r in op.result_names] + [f"const at::Tensor& {g}" for g in grad_outputs(op)]
    return ", ".join(p for p in parts if p)


@functools.lru_cache(maxsize=1024)
def custom(op: OpSpec) -> Custom:
    assert isinstance(op.kernel, CustomKernel)
    args = op.schema.arguments
    forward_params = ", ".join([*(f"const at::Tensor& {o}" for o in op.output_names), cpp.parameters(args)])
    backward: tuple[UserFunction, ...] = ()
    if op.gradient is not None and op.gradient.kernel is not None:
        backward = _functions(op, op.gradient.kernel, f"{op.name}_backward", backward_params(op), True)
    tensors = op.tensor_inputs
    return Custom(
        plain=tuple(a.name for a in tensors if not (a.type.optional or a.type.is_list)),
        optional=tuple(a.name for a in tensors if a.type.optional),
        lists=tuple(a.name for a in tensors if a.type.is_list),
        forward=_functions(op, op.kernel, op.name, forward_params, False),
        backward=backward,
        backward_name=f"{op.name}_backward",
    )


def backward_schema(op: OpSpec) -> str:
    """`<op>_backward(Tensor grad, <the op's arguments>, Tensor result, bool[N] output_mask) -> (Tensor, ...)`;
    with several outputs, `Tensor grad_<output>...` and the outputs by name instead of grad and result."""
    args = ", ".join([*(f"Tensor {g}" for g in op.grad_names), *(_schema_arg(a) for a in op.schema.arguments),
                      *(f"Tensor {r}" for r in op.result_names), f"bool[{len(op.tensor_inputs)}] output_mask"])
    rets = ", ".join("Tensor" for _ in op.tensor_inputs)
    return f"{op.name}_backward({args}) -> ({rets})"


def _schema_arg(a: Argument) -> str:
    return f"{a.type} {a.name}"  # positional: the backward takes everything by position
