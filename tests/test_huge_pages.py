"""Large outputs ask for transparent huge pages (opgen::new_output): a fresh output is first
touched by the kernel's writes, and 4 KiB page faults would cost more than the loop. The mapping
that holds a large output carries the MADV_HUGEPAGE flag (`hg` in /proc/self/smaps)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's"),
    pytest.mark.skipif(not os.path.isdir("/sys/kernel/mm/transparent_hugepage"), reason="this kernel has no transparent huge pages"),
]

HUGE_PAGE = 2 << 20
N = 8 << 20  # 32 MiB of float32: an mmap of its own with glibc, with whole huge pages inside


def vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding ``address``."""
    inside = False
    with open("/proc/self/smaps", encoding="ascii") as smaps:
        for line in smaps:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "VmFlags:":
                return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


def huge_page_inside(t: torch.Tensor) -> int:
    """An address of ``t``'s data in a whole 2 MiB page (the part that the advice covers)."""
    return (t.data_ptr() + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE


def test_large_pointwise_output_asks_for_huge_pages(built_ops):
    out = built_ops.weighted_sum(torch.ones(N), torch.ones(N), weight=2.0)
    assert "hg" in vm_flags(huge_page_inside(out))
    assert out[0].item() == 3.0 and out[-1].item() == 3.0


def test_large_fused_backward_output_asks_for_huge_pages(built_ops):
    x = torch.ones(N, requires_grad=True)
    (grad_x,) = torch.autograd.grad(built_ops.softplus(x), x, torch.ones(N))
    assert "hg" in vm_flags(huge_page_inside(grad_x))


def test_large_reduction_output_asks_for_huge_pages(built_ops):
    out = built_ops.sum_squares(torch.ones(N, 2), dim=[1])
    assert "hg" in vm_flags(huge_page_inside(out))
    assert out[0].item() == 2.0



def test_output_below_4_mib_asks_for_its_whole_huge_page(built_ops):
    # 1e6 float32 (3.8 MiB) holds a whole 2 MiB page unless it starts late in one: among a few
    # outputs kept alive, one does, and that page carries the advice
    n = 10**6
    outs = []
    for _ in range(16):
        outs.append(built_ops.weighted_sum(torch.ones(n), torch.ones(n), weight=2.0))
        page = huge_page_inside(outs[-1])
        if page + HUGE_PAGE <= outs[-1].data_ptr() + 4 * n:
            assert "hg" in vm_flags(page)
            return
    raise AssertionError("none of 16 outputs of 3.8 MiB held a whole 2 MiB page")

@pytest.mark.skipif(os.environ.get("THP_MEM_ALLOC_ENABLE") == "1", reason="torch itself asks for huge pages under THP_MEM_ALLOC_ENABLE=1")
def test_flag_is_opgens_doing():
    # the control: torch's own allocation of the same size carries no such advice
    out = torch.add(torch.ones(N), torch.ones(N))
    assert "hg" not in vm_flags(huge_page_inside(out))
