"""Which sub-expressions of a forward the op computes apart for broadcast calls (dest/hoist.py),
and the kernels and C++ that follow. The ops' results are tested by op_suite's
`test_hoisted_sub_expressions` on the shipped to_cartesian and in a scratch project (test_scratch_hoist)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opgen import expr as E
from opgen.dest import hoist, kernel_cpu, kernel_cuda, op_cpp, pointwise
from opgen.library import Library
from opgen.model import OpSpec
from opgen.yaml_source import load_spec_source

ROOT = Path(__file__).resolve().parent.parent


def _op(text: str) -> OpSpec:
    return OpSpec.parse(load_spec_source("specs/f.yaml", textwrap.dedent(text).encode()))


def _plan(kernel: str, signature: str = "f(Tensor x, Tensor g, *, float s=1.0) -> Tensor", shape: str = "broadcast(x, g)"):
    op = _op(f"""\
        signature: {signature}
        dtypes: [floating]
        shape: {shape}
        kernel:
          pointwise: {kernel}
        """)
    h = hoist.forward(op)
    return None if h is None else ([E.unparse(v) for v in h.values], h.reads, [E.unparse(f) for f in h.exprs], h.rest)


def test_to_cartesian_hoists_cos_and_sin_of_theta():
    op = OpSpec.parse(load_spec_source("specs/to_cartesian.yaml", (ROOT / "specs/to_cartesian.yaml").read_bytes()))
    h = hoist.forward(op)
    assert [E.unparse(v) for v in h.values] == ["cos(theta)", "sin(theta)"]
    assert h.reads == ("theta",) and h.rest == ("r",)
    assert [E.unparse(f) for f in h.exprs] == ["r * hoisted__0", "r * hoisted__1"]


def test_to_cartesian_backward_hoists_from_theta_not_from_gradients_or_outputs():
    op = OpSpec.parse(load_spec_source("specs/to_cartesian.yaml", (ROOT / "specs/to_cartesian.yaml").read_bytes()))
    h = hoist.backward_kernel(op)
    assert h.kernel == "to_cartesian_backward"
    assert [E.unparse(v) for v in h.values] == ["cos(theta)", "sin(theta)"]
    assert h.reads == ("theta",) and h.rest == ("grad_x", "grad_y", "x", "y")
    # the terms of each incoming gradient still masked by whether it was given
    assert [E.unparse(f) for f in h.exprs] == [
        "where(grad_x__given, grad_x * hoisted__0, 0) + where(grad_y__given, grad_y * hoisted__1, 0)",
        "where(grad_y__given, grad_y * x, 0) - where(grad_x__given, grad_x * y, 0)"]


def test_backward_hoists_only_from_inputs():
    op = _op("""\
        signature: f(Tensor x, Tensor g) -> Tensor
        dtypes: [floating]
        shape: broadcast(x, g)
        kernel:
          pointwise: x * g
        gradient:
          x: grad * exp(g)
          g: grad * exp(result)
        """)
    assert hoist.forward(op) is None  # no series call
    h = hoist.backward_kernel(op)
    assert [E.unparse(v) for v in h.values] == ["exp(g)"] and h.rest == ("grad", "result")


@pytest.mark.parametrize("kernel, expected", [
    # the largest sub-expression of one input, attributes included; each value once
    ("x * sigmoid(s * g) + exp(s * g) * sigmoid(s * g)",
     (["sigmoid(s * g)", "exp(s * g) * sigmoid(s * g)"], ("g",), ["x * hoisted__0 + hoisted__1"], ("x",))),
    # an input read raw as well stays an input of the forward
    ("g * x * exp(g)", (["exp(g)"], ("g",), ["g * x * hoisted__0"], ("x", "g"))),
    # one group: of two single inputs, the one saving the most series calls
    ("exp(x) + tanh(g) * sin(g)", (["tanh(g) * sin(g)"], ("g",), ["exp(x) + hoisted__0"], ("x",))),
    # the first found on a tie
    ("exp(x) * exp(g)", (["exp(x)"], ("x",), ["hoisted__0 * exp(g)"], ("g",))),
    # a power is a series call
    ("x * g ** s", (["g ** s"], ("g",), ["x * hoisted__0"], ("x",))),
])
def test_hoisted_values(kernel, expected):
    assert _plan(kernel) == expected


@pytest.mark.parametrize("kernel", [
    "x * g + 1",  # nothing but arithmetic: the loop waits on memory, not on the values
    "x * g ** 2",  # a square is a multiplication
    "exp(x * g)",  # reads every input
    "where(g > 0, x, -x)",  # no series call
])
def test_nothing_to_hoist(kernel):
    assert _plan(kernel) is None


def test_one_input_is_not_hoisted_and_conditions_keep_their_numbers():
    assert _plan("exp(x)", "f(Tensor x) -> Tensor", "same(x)") is None
    # temporaries hold numbers of the output's dtype: the number under the condition
    assert _plan("where(exp(g) > 1, x, g)") == (["exp(g)"], ("g",), ["where(hoisted__0 > 1, x, g)"], ("x", "g"))


def test_the_input_of_a_same_rule_is_never_smaller_than_the_output():
    assert _plan("exp(x) * g", shape="same(x)") is None
    assert _plan("x * exp(g)", shape="same(x)") == (["exp(g)"], ("g",), ["x * hoisted__0"], ("x",))
    gelu = OpSpec.parse(load_spec_source("specs/gelu.yaml", (ROOT / "specs/gelu.yaml").read_bytes()))
    assert hoist.forward(gelu) is None and hoist.backward_kernel(gelu) is None


def test_an_input_that_may_be_none_is_not_hoisted():
    # bias stands in as x when None: its values would be x's
    sig = "f(Tensor x, Tensor g, Tensor? bias=None) -> Tensor"
    assert _plan("where(bias is None, x, x * exp(bias)) * g", sig, "broadcast(x, g, bias)") is None
    assert _plan("where(bias is None, x, x + bias) * exp(g)", sig, "broadcast(x, g, bias)") == (
        ["exp(g)"], ("g",), ["where(bias is None, x, x + bias) * hoisted__0"], ("x", "bias"))


def test_lets_are_hoisted_through_their_expressions():
    op = _op("""\
        signature: f(Tensor x, Tensor g) -> Tensor
        dtypes: [floating]
        shape: broadcast(x, g)
        let:
          gate: sigmoid(g)
        kernel:
          pointwise: x * gate + gate
        """)
    h = hoist.forward(op)
    assert [E.unparse(v) for v in h.values] == ["sigmoid(g)"]
    assert [E.unparse(f) for f in h.exprs] == ["x * hoisted__0 + hoisted__0"]


def test_kernels_are_cpu_only():
    op = _op("""\
        signature: f(Tensor x, Tensor g) -> Tensor
        dtypes: [floating]
        shape: broadcast(x, g)
        kernel:
          pointwise: x * exp(g)
        gradient: auto
        """)
    names = [k.name for k in pointwise.kernels(op)]
    # exp(g) for the gradient of x and g too: computed by the forward's f_hoist
    assert names == ["f", "f_backward", "f_hoist", "f_from_hoisted", "f_backward_from_hoisted"]
    lib = Library(namespace="opgen_ops", ops=(op,), build_dir_from_python="../../../build")
    cpu = kernel_cpu.emit(op, lib)[0].content
    cuda = kernel_cuda.emit(op, lib).content
    ops = op_cpp.emit(op, lib).content
    assert all(f"{n}_loop" in cpu for n in names)
    # a loop reading hoisted values never runs flat (its inputs are smaller than its output): no entry for it
    assert "void f_hoist_contiguous(" in cpu and "_from_hoisted_contiguous(" not in cpu + ops
    assert "hoist" not in cuda
    cuda_declarations = ops[ops.index("namespace opgen_ops::cuda"):ops.index("#endif", ops.index("namespace opgen_ops::cuda"))]
    assert "hoist" not in cuda_declarations
    assert "opgen::hoisted_shape(_out, { g }, { x, g })" in ops
    assert "opgen::hoisted_shape(_first, { g }, { grad, x, g })" in ops
    assert "opgen::hoisted_shape(grad, { g }, { grad, x, g })" in ops  # the backward by rows (opgen::broadcast_rows)
    assert "pick_cpu_kernel(&cpu::DEFAULT::f_backward_from_hoisted_rows" in ops
    assert ops.count("pick_cpu_kernel(&cpu::DEFAULT::f_hoist_contiguous") == 3  # forward, backward by rows and not
    assert "f_backward_hoist" not in ops
