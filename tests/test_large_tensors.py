"""Tensors of more than 2**31 elements: both kernel paths index with 64 bits. float16 keeps the
largest test near 9 GB (CI machines have 24 GiB); an output page the kernel never wrote would
read back as 0, so every checked element must hold the computed value."""

from __future__ import annotations

import pytest
import torch

N = 2**31 + 7  # past int32's range


def _available_gib() -> float:
    with open("/proc/meminfo") as fh:
        fields = dict(line.split(":", 1) for line in fh)
    return int(fields["MemAvailable"].split()[0]) / 2**20


pytestmark = pytest.mark.skipif(_available_gib() < 12, reason="needs 12 GiB of free memory")

POSITIONS = [0, 2**31 - 1, 2**31, 2**31 + 1, N - 1]


def test_tensoriterator_path_past_2_31_elements(built_ops):
    x = torch.full((1,), 1.5, dtype=torch.float16).expand(N)  # stride 0: no input memory, not the flat loop
    out = built_ops.softplus(x, beta=2.0, threshold=20.0)
    assert out.shape == (N,) and out.is_contiguous()
    expected = torch.nn.functional.softplus(torch.tensor([1.5], dtype=torch.float32), beta=2.0).to(torch.float16)
    for i in POSITIONS:
        assert out[i] == expected[0], i
    del out


def test_flat_contiguous_path_past_2_31_elements(built_ops):
    x = torch.empty(N, dtype=torch.float16)
    x.fill_(2.0)
    x[2**31:] = 3.0
    out = built_ops.relu(x)
    del x
    for i in POSITIONS:
        assert out[i] == (3.0 if i >= 2**31 else 2.0), i
    assert out[2**31 - 1] == 2.0 and out[N - 1] == 3.0
