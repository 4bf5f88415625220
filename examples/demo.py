"""The shipped ops at work: each against PyTorch, a bad call, and torch.compile."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import opgen

ROOT = Path(__file__).resolve().parent.parent
ops = opgen.load(ROOT)
sys.path.insert(0, str(ROOT / "generated" / "python"))
import opgen_ops  # noqa: E402  (the typed API generated next to the C++)

torch.manual_seed(0)
a, b = torch.randn(1000, 64), torch.randn(64)
x = torch.randn(1000, 64) * 4
F = torch.nn.functional
cases = [
    ("weighted_sum(a, b, weight=0.5)", opgen_ops.weighted_sum(a, b, weight=0.5), 0.5 * a + b),
    ("add(a, b, alpha=2)", opgen_ops.add(a, b, alpha=2.0), torch.add(a, b, alpha=2.0)),
    ("relu(x)", opgen_ops.relu(x), torch.relu(x)),
    ("sigmoid(x)", opgen_ops.sigmoid(x), torch.sigmoid(x)),
    ("gelu(x)", opgen_ops.gelu(x), F.gelu(x, approximate="tanh")),
    ("gelu(x, approximate='none')", opgen_ops.gelu(x, approximate="none"), F.gelu(x)),
    ("bias_gelu(x, b)", opgen_ops.bias_gelu(x, b), F.gelu(x + b, approximate="tanh")),
    ("bias_gelu(x)  (bias None)", opgen_ops.bias_gelu(x), F.gelu(x, approximate="tanh")),
    ("softplus(x, beta=2)", opgen_ops.softplus(x, beta=2.0), F.softplus(x, beta=2.0)),
    ("clamp(x, min=-1, max=1)", opgen_ops.clamp(x, min=-1.0, max=1.0), x.clamp(-1, 1)),
    ("gelu(x.bfloat16())", opgen_ops.gelu(x.bfloat16()).float(), F.gelu(x.bfloat16().double(), approximate="tanh").bfloat16()),
    ("isclose(a, a + 1e-7)", opgen_ops.isclose(a, a + 1e-7).float(), torch.isclose(a, a + 1e-7).float()),
    ("to_cartesian(|x|, a)[1]  (2 outputs)", opgen_ops.to_cartesian(x.abs(), a)[1], x.abs() * torch.sin(a)),
    ("actnorm(x, b, b / 4)", opgen_ops.actnorm(x, b, b / 4), (x + b) * torch.exp(b / 4)),
    # reductions, generated from map/combine/post
    ("sum_squares(x, [1])", opgen_ops.sum_squares(x, [1]), (x * x).sum(1)),
    ("l2_norm(x, [0], keepdim=True)", opgen_ops.l2_norm(x, [0], True), torch.linalg.vector_norm(x, dim=0, keepdim=True)),
    ("l2_norm(x)  (dim=None; vs float64)", opgen_ops.l2_norm(x), torch.linalg.vector_norm(x.double())),
    ("logsumexp(x * 100, [-1])", opgen_ops.logsumexp(x * 100, [-1]), torch.logsumexp(x * 100, -1)),
    ("rms(x, [])", opgen_ops.rms(x, []), (x * x).mean().sqrt()),
    ("abs_max(x, [1])", opgen_ops.abs_max(x, [1]), x.abs().amax(1)),
    ("max(x, 1).values", opgen_ops.max(x, 1)[0], x.max(1).values),
    # hand-written kernels (specs/*.cpu.cpp), everything around them generated
    ("rms_norm(x, w)", opgen_ops.rms_norm(x, b), x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * b),
    ("layer_norm(x, w, b)[0]", opgen_ops.layer_norm(x, b, b)[0], F.layer_norm(x, (64,), b, b)),
    ("layer_norm(x, w, b)[2]  (rstd)", opgen_ops.layer_norm(x, b, b)[2], torch.native_layer_norm(x, [64], b, b, 1e-5)[2]),
    ("linear(x, w[:8], bias)", opgen_ops.linear(x, a[:8], b[:8]), F.linear(x, a[:8], b[:8])),
    ("add_n([a, x, a])", opgen_ops.add_n([a, x, a]), a + x + a),
]
print(f"{'op':36} {'shape':>14} {'max |diff| vs torch':>20}")
for name, got, want in cases:
    print(f"{name:36} {str(tuple(got.shape)):>14} {(got.float() - want).abs().max().item():>20.3g}")

print("\nA bad call raises a Python error that names the op and the argument:")
try:
    opgen_ops.clamp(x, min=1.0, max=-1.0)
except ValueError as e:
    print(f"  ValueError: {e}".splitlines()[0])
try:
    opgen_ops.weighted_sum(a, torch.randn(63))
except RuntimeError as e:
    print(f"  RuntimeError: {e}".splitlines()[0])

compiled = torch.compile(lambda a, b: ops.gelu(ops.weighted_sum(a, b, weight=0.5)), fullgraph=True)
print("\ntorch.compile(fullgraph=True) of weighted_sum -> gelu matches eager:",
      torch.allclose(compiled(a, b), ops.gelu(ops.weighted_sum(a, b, weight=0.5))))

x = torch.randn(1000, 64, requires_grad=True)
opgen_ops.gelu(x).sum().backward()
x_ref = x.detach().clone().requires_grad_()
F.gelu(x_ref, approximate="tanh").sum().backward()
print("gelu backward (fused generated kernel) max |diff| vs torch:", f"{(x.grad - x_ref.grad).abs().max().item():.3g}")

buffer = torch.empty(1000, 64)
opgen_ops.weighted_sum(a, b, weight=0.5, out=buffer)
print("weighted_sum(..., out=buffer) wrote into the buffer:", torch.equal(buffer, 0.5 * a + b))
