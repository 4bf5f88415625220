"""Memory-bound loops choose their CPU variant per call (opgen::CpuKernel::for_data): on an AVX-512
CPU, float32 / float64 outputs up to 1 MiB run the AVX2 variant, larger ones and bfloat16 /
float16 the AVX-512 one. Both sides of the switch must compute the same values, on the flat
contiguous loop and on the TensorIterator's; tests/cpu_capabilities.py covers the other CPUs."""

from __future__ import annotations

import pytest
import torch

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
