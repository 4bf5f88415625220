"""The shipped library beyond the generic suite: torch.compile and torch.export across ops,
and bad calls whose messages depend on specific signatures."""

from __future__ import annotations

import pytest
import torch


def test_compile_fullgraph_two_ops(built_ops):
    ops = built_ops

    def f(a, b):
        return ops.gelu(ops.weighted_sum(a, b, weight=0.5), approximate="tanh")

    compiled = torch.compile(f, fullgraph=True, dynamic=False)
    a, b = torch.randn(8, 16), torch.randn(16)
    torch.testing.assert_close(compiled(a, b), f(a, b))
    a2, b2 = torch.randn(3, 5), torch.randn(3, 5)
    torch.testing.assert_close(compiled(a2, b2), f(a2, b2))



def test_typed_api_calls_the_overloads_callable_and_stays_transparent(built_ops, typed_api):
    # eagerly the wrapper skips OpOverload.__call__ (a Python frame) for the C++ callable behind it
    from opgen_ops import _ops

    assert _ops._weighted_sum__default_eager is built_ops.weighted_sum.default._op
    assert _ops._relu__inplace_eager is built_ops.relu_.default._op

    # ... which handles __torch_function__ modes (and subclasses) as the overload does
    class Record(torch.overrides.TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.funcs = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.funcs.append(func)
            return func(*args, **(kwargs or {}))

    a, b, out = torch.randn(3), torch.randn(3), torch.empty(3)
    with Record() as mode:
        typed_api.weighted_sum(a, b, weight=2.0)
        typed_api.weighted_sum(a, b, weight=2.0, out=out)
    assert mode.funcs == [built_ops.weighted_sum.default, built_ops.weighted_sum.out]

def test_export_records_the_op(built_ops):
    class M(torch.nn.Module):
        def forward(self, x, y):
            return built_ops.add(built_ops.relu(x), y, alpha=2.0)

    ep = torch.export.export(M(), (torch.randn(4, 4), torch.randn(4)))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "opgen_ops.relu.default" in targets and "opgen_ops.add.default" in targets
    x, y = torch.randn(4, 4), torch.randn(4)
    torch.testing.assert_close(ep.module()(x, y), torch.relu(x) + 2 * y)


def test_passed_through_gradient_is_not_copied(built_ops):
    # weighted_sum's formula for b is `grad`: the node passes grad on, as eager autograd of `a + b`
    # does, and the backward op computes only a's gradient
    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    grad = torch.randn(4, 3)
    grad_a, grad_b = torch.autograd.grad(built_ops.weighted_sum(a, b, weight=2.0), (a, b), grad)
    assert grad_b.data_ptr() == grad.data_ptr()
    torch.testing.assert_close(grad_a, 2 * grad)
    assert built_ops.weighted_sum_backward.default._schema.returns[0].type.kind() == "TensorType"
    # broadcast: reduced to b's shape; float16 b: cast to its dtype
    b = torch.randn(3, dtype=torch.float16, requires_grad=True)
    grad_a, grad_b = torch.autograd.grad(built_ops.weighted_sum(a, b, weight=2.0), (a, b), grad)
    assert grad_b.dtype == torch.float16 and grad_b.shape == (3,)
    torch.testing.assert_close(grad_b, grad.sum(0).half())
    # only b requires grad: the backward op is not called at all
    with torch.profiler.profile() as prof:
        (grad_b,) = torch.autograd.grad(built_ops.weighted_sum(a.detach(), b, weight=2.0), (b,), grad)
    assert not [e for e in prof.events() if "weighted_sum_backward" in e.name]


# ---- bad calls to specific ops ---------------------------------------------------------


def test_device_mismatch_names_argument(built_ops):
    with pytest.raises(RuntimeError, match=r"opgen_ops\.weighted_sum\(\): argument 'b' is on meta but argument 'a' is on cpu"):
        built_ops.weighted_sum(torch.randn(3), torch.randn(3, device="meta"))


def test_wrong_argument_types_name_op_and_argument(built_ops, typed_api):
    with pytest.raises(RuntimeError, match=r"weighted_sum.*weight"):
        built_ops.weighted_sum(torch.randn(3), torch.randn(3), weight="heavy")
    with pytest.raises(TypeError, match="weight"):
        typed_api.weighted_sum(torch.randn(3), torch.randn(3), 2.0)  # keyword-only
    with pytest.raises(RuntimeError, match=r"clamp.*min"):
        built_ops.clamp(torch.randn(3), max=1.0)


def test_undefined_tensor_is_rejected(built_ops):
    with pytest.raises((ValueError, RuntimeError), match="relu"):
        built_ops.relu(None)


def test_backward_of_several_outputs_needs_one_gradient(built_ops):
    """`<op>_backward` of an op with several outputs takes None for an output that was not used
    (its terms are left out), but not for all of them."""
    r, theta = torch.rand(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    x, y = built_ops.to_cartesian(r, theta)
    gy = torch.rand(5, dtype=torch.float64)
    grad_r, grad_theta = built_ops.to_cartesian_backward(None, gy, theta, x, y, [5], [5], [True, True])
    torch.testing.assert_close(grad_r, gy * torch.sin(theta))
    torch.testing.assert_close(grad_theta, gy * x)
    # output_mask: only the gradients asked for, the others None (as ATen's backward ops)
    assert built_ops.to_cartesian_backward(None, gy, theta, x, y, [5], [5], [False, True])[0] is None
    torch.testing.assert_close(built_ops.to_cartesian_backward(None, gy, theta, x, y, [5], [5], [False, True])[1], grad_theta)
    assert built_ops.to_cartesian_backward(None, gy, theta, x, y, [5], [5], [False, False]) == (None, None)
    with pytest.raises(ValueError, match=r"to_cartesian_backward\(\): none of the gradients grad_x, grad_y is given"):
        built_ops.to_cartesian_backward(None, None, theta, x, y, [5], [5], [True, True])


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_backward_asks_only_for_needed_gradients(built_ops, backend):
    """Under torch.compile the joint graph calls the backward op with an output_mask; a gradient
    not asked for (absent Tensor?, input without requires_grad) is None there and never used."""
    x, b = torch.randn(4, 5, requires_grad=True), torch.randn(5, requires_grad=True)
    f = torch.compile(lambda x, bias: built_ops.bias_gelu(x, bias).sum(), backend=backend, fullgraph=True)
    for bias, leaves in ((None, [x]), (b, [x, b]), (b.detach(), [x])):
        expected = torch.nn.functional.gelu(x if bias is None else x + bias, approximate="tanh").sum()
        torch.testing.assert_close(torch.autograd.grad(f(x, bias), leaves), torch.autograd.grad(expected, leaves))
