"""DTensor: a broadcasting op keeps a sharded tensor sharded, in a 2-process gloo run on
localhost (the generated sharding rules, registered when torch.distributed.tensor is imported)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

WORKER = r"""
import os, sys, torch, opgen
ops = opgen.load(sys.argv[1])               # before torch.distributed.tensor is imported
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2,))
torch.manual_seed(0)
a, b = torch.randn(4, 6), torch.randn(6)

x = distribute_tensor(a, mesh, [Shard(0)])
y = ops.gelu(x, approximate="none")
assert y.placements == (Shard(0),), y.placements
assert y.to_local().shape == (2, 6), y.to_local().shape
torch.testing.assert_close(y.full_tensor(), torch.nn.functional.gelu(a))

# a broadcast input is replicated along the sharded dimension, sharded along the other
z = ops.add(x, distribute_tensor(b, mesh, [Replicate()]), alpha=2.0)
assert z.placements == (Shard(0),), z.placements
torch.testing.assert_close(z.full_tensor(), a + 2 * b)
w = ops.weighted_sum(distribute_tensor(a, mesh, [Shard(1)]), distribute_tensor(b, mesh, [Shard(0)]), weight=0.5)
assert w.placements == (Shard(1),), w.placements
torch.testing.assert_close(w.full_tensor(), 0.5 * a + b)

# gradients flow back to the sharded leaves
leaf = distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
ops.sigmoid(leaf).sum().backward()
assert leaf.grad.placements == (Shard(0),), leaf.grad.placements
torch.testing.assert_close(leaf.grad.full_tensor(), torch.sigmoid(a) * (1 - torch.sigmoid(a)))
# the gradient of a broadcast (replicated) input sums over the sharded dimension: a partial sum
bl = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
ops.add(distribute_tensor(a, mesh, [Shard(0)]), bl, alpha=2.0).sum().backward()
torch.testing.assert_close(bl.grad.full_tensor(), torch.full((6,), 2.0 * 4))
# several outputs: both keep the sharding, and both gradients flow back
r = distribute_tensor(a.abs(), mesh, [Shard(0)]).requires_grad_()
theta = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
px, py = ops.to_cartesian(r, theta)
assert px.placements == py.placements == (Shard(0),), (px.placements, py.placements)
torch.testing.assert_close(py.full_tensor(), a.abs() * torch.sin(b))
(px + 2 * py).sum().backward()
assert r.grad.placements == (Shard(0),), r.grad.placements
torch.testing.assert_close(r.grad.full_tensor(), (torch.cos(b) + 2 * torch.sin(b)).expand(4, 6))
torch.testing.assert_close(theta.grad.redistribute(mesh, [Replicate()]).to_local(),
                           (-a.abs() * torch.sin(b) + 2 * a.abs() * torch.cos(b)).sum(0))
# only one output used: the other's gradient is None in the backward op, and leaves no trace
r.grad = theta.grad = None
ops.to_cartesian(r, theta)[1].sum().backward()
assert r.grad.placements == (Shard(0),), r.grad.placements
torch.testing.assert_close(r.grad.full_tensor(), torch.sin(b).expand(4, 6))
# an optional tensor: absent (None), or replicated where it broadcasts; gradients of the given ones
gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")
g = ops.bias_gelu(x)
assert g.placements == (Shard(0),), g.placements
torch.testing.assert_close(g.full_tensor(), gelu(a))
leaf = distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
bl = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
g = ops.bias_gelu(leaf, bl)
assert g.placements == (Shard(0),), g.placements
torch.testing.assert_close(g.full_tensor(), gelu(a + b))
g.sum().backward()
ab = (a + b).requires_grad_()
gelu(ab).sum().backward()
torch.testing.assert_close(leaf.grad.full_tensor(), ab.grad)
torch.testing.assert_close(bl.grad.full_tensor(), ab.grad.sum(0))
leaf.grad = None
ops.bias_gelu(leaf, None).sum().backward()
torch.testing.assert_close(leaf.grad.full_tensor(), torch.func.grad(lambda t: gelu(t).sum())(a))
# a Tensor[] argument: no sharding rule (one registered for it failed inside DTensor's dispatch)
try:
    ops.add_n([x, x])
except NotImplementedError as e:
    assert "does not have a sharding strategy registered" in str(e), str(e)
else:
    raise AssertionError("add_n of DTensors ran without a sharding rule")
dist.destroy_process_group()
print("rank", dist.get_rank() if dist.is_initialized() else os.environ["RANK"], "ok", flush=True)
# Skip interpreter teardown: c10d/gloo background threads occasionally abort in static
# destructors after the process group is gone ("terminate called without an active exception").
os._exit(0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without torch.distributed")
def test_pointwise_ops_keep_dtensors_sharded(built_ops, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(script), str(ROOT)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank}:\n{out[-4000:]}"
        assert f"rank {rank} ok" in out, out[-2000:]
