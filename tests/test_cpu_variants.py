"""Memory-bound loops choose their CPU variant per call (opgen::CpuKernel::for_data): on an AVX-512
CPU, float32 / float64 outputs up to 1 MiB run the AVX2 variant, larger ones and bfloat16 /
float16 the AVX-512 one. Both sides of the switch must compute the same values, on the flat
contiguous loop and on the TensorIterator's. Comparisons, `where` and extrema take other vector
forms on the DEFAULT capability (opgen_math.h: bit masks, not at::vec's branch per lane): the
special values go through them at every capability."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from .cpu_capabilities import CAPABILITIES, rerun_at_capability

IN_CACHE_FLOATS = (1 << 20) // 4  # kInCacheBytes in float32 elements
COLUMNS = 1024


@pytest.mark.parametrize("numel", [IN_CACHE_FLOATS, IN_CACHE_FLOATS + COLUMNS], ids=["in_cache", "past_cache"])
def test_memory_bound_ops_match_torch_either_side_of_the_cache_size(built_ops, numel):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(numel, generator=gen), torch.randn(numel, generator=gen)
    exact = {"rtol": 0, "atol": 0}
    # the flat contiguous loop
    torch.testing.assert_close(built_ops.weighted_sum(a, b, weight=0.5), torch.add(b, a, alpha=0.5))
    torch.testing.assert_close(built_ops.relu(a), torch.relu(a), **exact)
    torch.testing.assert_close(built_ops.clamp(a, min=-0.5, max=0.5), torch.clamp(a, -0.5, 0.5), **exact)
    # the TensorIterator's loop: a broadcast row
    rows, row = a.view(-1, COLUMNS), b[:COLUMNS]
    torch.testing.assert_close(built_ops.add(rows, row, alpha=2.0), torch.add(rows, row, alpha=2.0))
    # the fused backward (relu's), flat and on a transposed gradient
    x = a.view(-1, COLUMNS).clone().requires_grad_()
    for grad in (b.view(-1, COLUMNS), b.view(COLUMNS, -1).t()):
        (got,) = torch.autograd.grad(built_ops.relu(x), x, grad)
        torch.testing.assert_close(got, torch.where(x > 0, grad, 0.0), **exact)


SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.25, -0.25, 1e-30, -1e-30, 12.0, -12.0]


def assert_same(got, want, what):
    """Equal values, NaN where `want` has NaN, and the same sign on zeros."""
    assert torch.equal(got.isnan(), want.isnan()), what
    assert torch.equal(got.nan_to_num(), want.nan_to_num()), what
    assert torch.equal(got.signbit() | got.isnan(), want.signbit() | want.isnan()), what


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_special_values_through_comparisons_and_extrema(built_ops, dtype):
    gen = torch.Generator().manual_seed(0)
    # 203 elements: full vectors of every width and a tail; random signs between the special values
    x = torch.randn(203, generator=gen).to(dtype)
    x[::7] = torch.tensor(SPECIAL, dtype=dtype).repeat(3)[: len(x[::7])]
    y = torch.randn(203, generator=gen).to(dtype)
    y[3::11] = torch.tensor(SPECIAL, dtype=dtype).repeat(2)[: len(y[3::11])]
    grad = torch.randn(203, generator=gen).to(dtype)
    opmath = torch.float64 if dtype == torch.float64 else torch.float32
    for t, u, g in ((x, y, grad), (x[::2], y[::2], grad[::2])):  # the flat loop, then TensorIterator's
        assert_same(built_ops.relu(t), torch.relu(t), ("relu", dtype))
        assert_same(built_ops.clamp(t, min=-0.5, max=0.25), torch.clamp(t, -0.5, 0.25), ("clamp", dtype))
        a, b = t.to(opmath), u.to(opmath)  # the kernel computes in float for bfloat16
        close = (a == b) | ((a - b).isfinite() & ((a - b).abs() <= 0.25 + 0.5 * b.abs()))
        assert torch.equal(built_ops.isclose(t, u, rtol=0.5, atol=0.25), close), ("isclose", dtype)
        if dtype != torch.bfloat16:  # torch's rounds a - b to bfloat16 first
            assert torch.equal(built_ops.isclose(t, u, rtol=0.5, atol=0.25), torch.isclose(t, u, rtol=0.5, atol=0.25))
        torch.testing.assert_close(built_ops.softplus(t, beta=2.0), F.softplus(t, beta=2.0), equal_nan=True)
        leaf = t.detach().clone().requires_grad_()
        (got,) = torch.autograd.grad(built_ops.relu(leaf), leaf, g)
        assert_same(got, torch.where(t > 0, g, 0.0), ("relu backward", dtype))
        (got,) = torch.autograd.grad(built_ops.clamp(leaf, min=-0.5, max=0.25), leaf, g)
        assert_same(got, torch.where((t >= -0.5) & (t <= 0.25), g, 0.0), ("clamp backward", dtype))


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_special_values_at_each_cpu_capability(built_ops, capability):
    rerun_at_capability(__file__, "test_special_values_through_comparisons_and_extrema", capability)
