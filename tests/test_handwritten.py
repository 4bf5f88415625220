"""Hand-written kernels: the shipped rms_norm, layer_norm, linear and add_n beyond their generated
property tests, and the stub lifecycle in a fresh project (written once, compiled, never
overwritten, reported by `opgen check` when missing)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .cpu_capabilities import CAPABILITIES, rerun_at_capability


def test_optional_bias(built_ops):
    x, w, b = torch.randn(4, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(built_ops.linear(x, w, b), x @ w.T + b)
    torch.testing.assert_close(built_ops.linear(x, w), x @ w.T)
    torch.testing.assert_close(built_ops.linear(x, w, None), x @ w.T)
    # the spec's check of the optional bias, in the Meta kernel too (FakeTensor, torch.compile)
    message = (r"opgen_ops.linear\(\): check 'bias is None or bias.dim\(\) == 1 and bias.size\(0\) == w.size\(0\)' "
               r"failed \(got bias of shape \[4\], w of shape \[5, 3\]\)")
    for device in ("cpu", "meta"):
        with pytest.raises(RuntimeError, match=message):
            built_ops.linear(x.to(device), w.to(device), torch.randn(4, dtype=torch.float64, device=device))
    leaves = [t.clone().requires_grad_() for t in (x, w)]
    built_ops.linear(*leaves).sum().backward()  # no bias: its gradient is never asked for
    assert all(t.grad is not None for t in leaves)


def test_add_n_lists(built_ops):
    xs = [torch.randn(3, 4) for _ in range(11)]  # more than one CUDA chunk, on CPU one pass
    torch.testing.assert_close(built_ops.add_n(xs), torch.stack(xs).sum(0))
    ints = [torch.arange(6, dtype=torch.int32).reshape(2, 3)] * 3
    got = built_ops.add_n(ints)
    assert got.dtype == torch.int32 and got.tolist() == [[0, 3, 6], [9, 12, 15]]
    mixed = built_ops.add_n([torch.ones(2, dtype=torch.float32), torch.ones(2, dtype=torch.float64)])
    assert mixed.dtype == torch.float64
    with pytest.raises(ValueError, match=r"opgen_ops.add_n\(\): argument 'xs' must hold at least one tensor"):
        built_ops.add_n([])
    with pytest.raises(RuntimeError, match=r"argument 'xs' holds tensors of shapes \[2\] and \[3\]"):
        built_ops.add_n([torch.zeros(2), torch.zeros(3)])
    a = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: built_ops.add_n([t, t * 2, t]), (a,))



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64])
def test_add_n_rounds_like_the_eager_chain(built_ops, dtype):
    # inputs added two at a time, then one left over, in blocks of 1,024 elements: every count up
    # to 5, lengths around a block and around the 8- and 16-value float16 conversions; float16 and
    # bfloat16 sum in float32 and round once, float16 with inputs that overflow its range
    gen = torch.Generator().manual_seed(4)
    scale = 20000 if dtype == torch.float16 else 100
    for count in range(1, 6):
        for n in (1, 7, 17, 1023, 1024, 1025, 5000):
            xs = [(torch.randn(n, generator=gen) * scale).to(dtype) for _ in range(count)]
            narrow = dtype in (torch.float16, torch.bfloat16)
            want = xs[0].float() if narrow else xs[0]
            for x in xs[1:]:
                want = want + (x.float() if narrow else x)
            torch.testing.assert_close(built_ops.add_n(xs), want.to(dtype), rtol=0, atol=0, msg=lambda m: f"{count} inputs of {n}: {m}")


def test_add_n_float16_conversions_are_exact(built_ops):
    # every float16 bit pattern through float32 and back (the F16C path on x86-64-v3 CPUs):
    # unchanged, subnormals, infinities and signed zeros included; NaNs stay NaNs
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    got = built_ops.add_n([halves])
    nan = halves.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), halves[~nan].view(torch.int16))
    # float32 sums that round to every kind of float16: ties to even (1 + 2^-11, 2^-24 + 2^-25),
    # the largest subnormal, overflow to inf on a tie, signed zeros
    a = torch.tensor([1.0, 1.0, 2.0 ** -24, 2.0 ** -24, 65504.0, -65504.0, 2.0 ** -14, 0.0], dtype=torch.float16)
    b = torch.tensor([2.0 ** -11, 3 * 2.0 ** -11, 2.0 ** -25, 0.0, 16.0, -32.0, -(2.0 ** -24), -0.0], dtype=torch.float16)
    want = (a.float() + b.float()).to(torch.float16)
    assert torch.equal(built_ops.add_n([a, b]).view(torch.int16), want.view(torch.int16))


def test_normalizations_match_torch(built_ops):
    torch.manual_seed(0)
    for dtype, tol in ((torch.float32, 2e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)):
        x = torch.randn(300, 257, dtype=dtype)
        w, b = torch.randn(257, dtype=dtype), torch.randn(257, dtype=dtype)
        torch.testing.assert_close(built_ops.layer_norm(x, w, b)[0].double(),
                                   torch.nn.functional.layer_norm(x.double(), (257,), w.double(), b.double()), atol=tol, rtol=tol)
        ref = x.double() * torch.rsqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6) * w.double()
        torch.testing.assert_close(built_ops.rms_norm(x, w).double(), ref, atol=tol, rtol=tol)
    xt = torch.randn(8, 6).t()  # non-contiguous input: the kernel sees it as is
    w6 = torch.randn(8)
    torch.testing.assert_close(built_ops.rms_norm(xt, w6), xt * torch.rsqrt((xt * xt).mean(-1, keepdim=True) + 1e-6) * w6)



@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_row_kernels_at_every_kind_of_length(built_ops, dtype):
    # rows of fewer than, exactly and more than the 32 partial sums and the 8- and 16-value float16
    # conversions, and dw over more than one block of 256 columns. float16 and bfloat16 compute in
    # float32 and round once: within the dtype's default tolerance of the float64 result rounded
    tol = {torch.float32: 1e-4, torch.float64: 1e-10}.get(dtype)
    gen = torch.Generator().manual_seed(3)

    def close(got, ref, what, slack=1):
        if tol is None:
            torch.testing.assert_close(got, ref.to(got.dtype), msg=lambda m: f"{what}: {m}")
        else:
            torch.testing.assert_close(got.double(), ref, atol=tol * slack, rtol=tol * slack, msg=lambda m: f"{what}: {m}")

    for rows, n in ((1, 1), (3, 5), (37, 31), (2, 32), (5, 33), (1, 64), (9, 257), (4, 600)):
        x = (torch.randn(rows, n, generator=gen) * 3 + 1).to(dtype)
        w, b = torch.randn(n, generator=gen).to(dtype), torch.randn(n, generator=gen).to(dtype)
        g = torch.randn(rows, n, generator=gen).to(dtype)
        want = torch.native_layer_norm(x.double(), [n], w.double(), b.double(), 1e-5)
        for name, got, ref in zip(("y", "mean", "rstd"), built_ops.layer_norm(x, w, b), want):
            close(got, ref, f"layer_norm {name} {rows}x{n}")
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
        ref = x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w64
        got = built_ops.rms_norm(xg, wg)
        close(got, ref, f"rms_norm {rows}x{n}")
        for name, a, e in zip(("dx", "dw"), torch.autograd.grad(got, (xg, wg), g), torch.autograd.grad(ref, (x64, w64), g.double())):
            close(a, e, f"rms_norm {name} {rows}x{n}", slack=10)

_KERNEL_TESTS = "rounds_like_the_eager_chain or conversions_are_exact or every_kind_of_length or normalizations_match"


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_row_kernels_at_each_cpu_capability(built_ops, capability):
    # The kernels above run the variant ATen picks for this process; each other one in its own.
    rerun_at_capability(__file__, _KERNEL_TESTS, capability)


def test_handwritten_backward_limits_are_errors(built_ops):
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: built_ops.rms_norm(a, b), (x, w))
    with pytest.raises(RuntimeError, match="derivative for opgen_ops::rms_norm_backward is not implemented"):
        torch.autograd.gradgradcheck(lambda a, b: built_ops.rms_norm(a, b), (x, w))
    from torch.autograd.forward_ad import dual_level, make_dual

    with dual_level(), pytest.raises(RuntimeError, match=r"opgen_ops.rms_norm\(\): forward-mode AD .* not implemented for ops with hand-written kernels"):
        built_ops.rms_norm(make_dual(x.detach(), torch.ones_like(x)), w.detach())
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda a, c, d: built_ops.layer_norm(a, c, d), (x, w, b))


def test_multi_output_layer_norm(built_ops):
    """Three outputs with their own shape rules; gradients flow from any subset of them (an output
    that gets none counts as zeros), through the saved statistics, under torch.compile too."""
    x = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    w, b = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    y, mean, rstd = built_ops.layer_norm(x, w, b)
    expected = torch.native_layer_norm(x.detach(), [5], w, b, 1e-5)
    for got, want in zip((y, mean, rstd), expected, strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got.detach(), want)
    # d mean / dx = 1/n; d rstd / dx through the biased variance
    (gx,) = torch.autograd.grad(mean.sum(), x, retain_graph=True)
    torch.testing.assert_close(gx, torch.full_like(x, 1 / 5))
    (gx,) = torch.autograd.grad(rstd.sum(), x)
    xd = x.detach().requires_grad_()
    (want,) = torch.autograd.grad((xd.var(-1, unbiased=False) + 1e-5).rsqrt().sum(), xd)
    torch.testing.assert_close(gx, want)
    for pick in ((0,), (1,), (2,), (0, 2)):
        assert torch.autograd.gradcheck(lambda a, pick=pick: tuple(built_ops.layer_norm(a, w, b)[i] for i in pick), (x,))
    torch._dynamo.reset()
    f = torch.compile(lambda a: (built_ops.layer_norm(a, w, b)[0] * built_ops.layer_norm(a, w, b)[2]).sum(),
                      backend="aot_eager", fullgraph=True, dynamic=True)
    for rows in (3, 4):
        a = torch.randn(rows, 5, dtype=torch.float64, requires_grad=True)
        f(a).backward()
        ref = a.detach().requires_grad_()
        (built_ops.layer_norm(ref, w, b)[0] * built_ops.layer_norm(ref, w, b)[2]).sum().backward()
        torch.testing.assert_close(a.grad, ref.grad)
    empty = built_ops.layer_norm(torch.randn(3, 0), torch.randn(0), torch.randn(0))
    assert [tuple(t.shape) for t in empty] == [(3, 0), (3, 1), (3, 1)] and bool(empty[2].isnan().all())


def test_compiled_backward_traces_the_handwritten_backward(built_ops):
    torch._dynamo.reset()
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(8, requires_grad=True)
    f = torch.compile(lambda a, b: built_ops.rms_norm(a, b).square().sum(), backend="aot_eager", fullgraph=True)
    f(x, w).backward()
    gx, gw = x.grad, w.grad
    x.grad = w.grad = None
    built_ops.rms_norm(x, w).square().sum().backward()
    torch.testing.assert_close((gx, gw), (x.grad, w.grad))


SPEC = """\
signature: shift(Tensor x, Tensor? offset=None, *, float scale=1.0) -> Tensor
dtypes: [float32, float64]
shape: same(x)
kernel:
  cpu: shift.cpu.cpp
gradient:
  x: grad * scale
  offset: grad
reference: x * scale + (offset if offset is not None else 0)
test:
  shapes: {x: [3, 4], offset: [4]}
"""

KERNEL = """
  const at::Tensor r = offset.has_value() ? x * scale + *offset : x * scale;
  out.copy_(r);
}
"""


def _opgen(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opgen", "--project", str(project), *args], capture_output=True, text=True)


def test_stub_lifecycle(tmp_path):
    project = tmp_path / "proj"
    init = subprocess.run([sys.executable, "-m", "opgen", "init", "--namespace", "stubbed", str(project)], capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    for old in (project / "specs").glob("*.yaml"):
        old.unlink()
    (project / "specs" / "shift.yaml").write_text(SPEC)
    gen = _opgen(project, "generate")
    assert gen.returncode == 0, gen.stderr
    stub = project / "specs" / "shift.cpu.cpp"
    assert "wrote specs/shift.cpu.cpp (a stub of a hand-written kernel" in gen.stdout
    text = stub.read_text()
    assert "void shift_cpu(const at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& offset, double scale)" in text
    assert _opgen(project, "check").returncode == 0
    build = _opgen(project, "build")
    assert build.returncode == 0, build.stdout + build.stderr  # the stub compiles as written
    call = "import sys, torch, opgen; ops = opgen.load(sys.argv[1]); print(ops.shift(torch.ones(2, 4), torch.ones(4), scale=2.0).tolist())"
    run = subprocess.run([sys.executable, "-c", call, str(project)], capture_output=True, text=True)
    assert run.returncode != 0 and "stubbed.shift(): the CPU kernel in specs/shift.cpu.cpp is still the stub opgen wrote" in run.stderr
    # the user writes the body; generate never touches it again
    body = text[: text.index(") {", text.index("void shift_cpu")) + 3] + KERNEL + "\n}  // namespace stubbed\n"
    stub.write_text(body)
    assert _opgen(project, "generate").returncode == 0 and stub.read_text() == body
    assert _opgen(project, "build").returncode == 0
    run = subprocess.run([sys.executable, "-c", call, str(project)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]"
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project / "generated" / "tests")],
                           capture_output=True, text=True, cwd=project)
    assert tests.returncode == 0, tests.stdout[-3000:]
    stub.unlink()
    check = _opgen(project, "check")
    assert check.returncode == 1 and "missing hand-written kernel specs/shift.cpu.cpp; run `opgen generate` to write a stub" in check.stderr
    shutil.rmtree(project / "build", ignore_errors=True)
