"""The shipped reductions (sum_squares, l2_norm, logsumexp, rms, abs_max, max) beyond what their
generated property tests draw: long rows and many rows (the parallel and vectorized paths),
numerics at the edges (overflow, infinities, NaN, ties, empty dims), errors, autograd and
torch.compile."""

from __future__ import annotations

import pytest
import torch

from .cpu_capabilities import CAPABILITIES, rerun_at_capability

TOL = {torch.float32: 2e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}

REFERENCES = {
    "sum_squares": lambda x, d, k: (x * x).sum(d, keepdim=k),
    "l2_norm": lambda x, d, k: torch.linalg.vector_norm(x, dim=d, keepdim=k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, keepdim=k),
    "rms": lambda x, d, k: (x * x).mean(d, keepdim=k).sqrt(),
    "abs_max": lambda x, d, k: x.abs().amax(d, keepdim=k),
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape, dim", [
    ((70000,), []),            # one long row: split over threads, then folded
    ((64, 3000), [-1]),        # many contiguous rows: vectorized, parallel over rows
    ((3000, 64), [0]),         # leading dims: vectors along the kept columns
    ((6, 300, 37), [1]),       # a middle dim: the same per batch; columns in blocks of four vectors, one, then scalars
    ((40, 500, 16), [1]),      # columns of one vector (float32 with AVX-512)
    ((2, 3, 1000, 5), [1, 2]), # adjacent middle dims, coalesced; columns narrower than a vector
    ((4, 7, 9), [2, 1]),       # the same dims named in another order: a middle-and-last reduction
    ((8, 9, 300), [0, 2]),     # an outer and an inner dim around a kept one: the row loop per segment
    ((40, 30, 21), [0, 2]),    # the same with short segments: one vector accumulator across them, and tails
    ((50, 20, 5), [0, 2]),     # segments shorter than a vector
    ((3, 5, 4, 70), [0, 3]),   # an outer and an inner dim around two kept ones: binary_kernel_reduce
    ((300, 2), [0]),           # leading dims with columns narrower than a vector
    ((50, 40), [1]),
])
def test_large_inputs_match_torch_in_float64(built_ops, name, dtype, shape, dim):
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    if name == "sum_squares" and dtype == torch.float16:
        x = x / 16  # keep the sum of squares inside float16's range
    for keepdim in (False, True):
        got = getattr(built_ops, name)(x, dim, keepdim)
        want = REFERENCES[name](x.double(), dim or list(range(x.dim())), keepdim)
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.double(), want, atol=TOL[dtype], rtol=TOL[dtype])


def test_logsumexp_never_overflows(built_ops):
    x = torch.tensor([[1000.0, 1000.0], [-1000.0, -1000.0], [float("-inf"), float("-inf")], [float("inf"), 0.0]])
    got = built_ops.logsumexp(x, [1])
    math_log2 = torch.log(torch.tensor(2.0))
    torch.testing.assert_close(got[:2], torch.stack([1000 + math_log2, -1000 + math_log2]))
    assert got[2] == float("-inf") and got[3] == float("inf")
    assert built_ops.logsumexp(torch.tensor([1.0, float("nan")]), []).isnan()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_logsumexp_over_leading_and_middle_dims_matches_torch(built_ops, dtype):
    # the column path's two passes (the maximum, then the sum of shifted exponentials): columns of
    # huge values, all -inf, one +inf, a NaN, through blocks of four vectors, one vector and the tail
    torch.manual_seed(0)
    x = torch.randn(6, 40, 37, dtype=torch.float64) * 5
    x[:, :, 0] += 1000
    x[:, :, 1] -= 1000
    x[:, :, 2] = float("-inf")
    x[2, 7, 3] = x[4, 0, 36] = float("inf")
    x[1, 3, 4] = x[5, 39, 35] = float("nan")
    x[:, 5, 20] = float("-inf")
    x = x.to(dtype)
    for t, dims in ((x, [1]), (x, [0]), (x, [0, 1]), (x[:, :, :17], [1]), (x.reshape(6, 40 * 37), [0])):
        for keepdim in (False, True):
            got = built_ops.logsumexp(t, dims, keepdim)
            want = torch.logsumexp(t.double(), dims, keepdim=keepdim)
            torch.testing.assert_close(got.double(), want, atol=TOL[dtype], rtol=TOL[dtype], equal_nan=True,
                                       msg=lambda m: f"{tuple(t.shape)} over {dims}: {m}")
    assert built_ops.logsumexp(torch.zeros(0, 5, dtype=dtype), [0]).tolist() == [float("-inf")] * 5


def test_max_nan_wins_and_ties_go_to_the_lowest_index(built_ops):
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [float("nan"), 5.0, float("nan"), 1.0], [-1.0, -1.0, -1.0, -1.0]])
    values, indices = built_ops.max(x, 1)
    assert indices.tolist() == [1, 0, 0] and values[1].isnan() and values[0] == 3 and values[2] == -1
    big = torch.randn(300, 2000).t()  # the reduced dim outermost in memory: the column path
    v, i = built_ops.max(big, 1, True)
    ev, ei = big.max(1, keepdim=True)
    assert torch.equal(v, ev) and torch.equal(i, ei)
    general = torch.randn(40, 30, 20).permute(2, 0, 1)  # no coalescible layout: binary_kernel_reduce
    assert all(torch.equal(a, b) for a, b in zip(built_ops.max(general, 1), general.max(1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_max_over_every_kind_of_dim_matches_torch(built_ops, dtype):
    # few distinct values (ties everywhere) and NaNs, through the column path (leading and middle
    # dims) and the row path (last dim: a vector scan for the index, then the tail): the first NaN
    # wins, else the lowest index among ties, as in torch.max
    torch.manual_seed(0)
    x = torch.randint(-3, 4, (5, 37, 300)).to(dtype)
    x[1, 5, 7] = x[1, 20, 7] = x[2, 0, 3] = x[4, 36, 299] = x[3, 7, 290] = x[3, 7, 40] = float("nan")
    cases = ((x, 1), (x[1], 0), (x[:, :, :5], 1), (x.reshape(5, 37, 3, 100), 1), (x, 2), (x[1], 1), (x[:, :, :21], 2))
    for t, dim in cases:
        for keepdim in (False, True):
            got, want = built_ops.max(t, dim, keepdim), t.max(dim, keepdim=keepdim)
            assert torch.equal(got[1], want[1]), (t.shape, dim)
            assert torch.equal(got[0].isnan(), want[0].isnan()) and torch.equal(got[0].nan_to_num(), want[0].nan_to_num())


def test_empty_reductions(built_ops):
    e = torch.zeros(3, 0)
    assert built_ops.sum_squares(e, [1]).tolist() == [0.0, 0.0, 0.0]
    assert built_ops.abs_max(e, [1]).tolist() == [0.0, 0.0, 0.0]
    assert built_ops.logsumexp(e, [1]).tolist() == [float("-inf")] * 3
    assert built_ops.rms(e, [1]).isnan().all()
    assert built_ops.sum_squares(e, [0]).shape == (0,)
    with pytest.raises(IndexError, match=r"opgen_ops.max\(\): can't reduce dimension 1 of size 0: 'max' has no identity"):
        built_ops.max(e, 1)
    assert built_ops.max(e, 0)[0].shape == (0,)


def test_dims_are_validated(built_ops):
    x = torch.randn(2, 3)
    with pytest.raises(IndexError, match=r"opgen_ops.sum_squares\(\): argument 'dim' has dimension 2, out of range"):
        built_ops.sum_squares(x, [2])
    with pytest.raises(ValueError, match=r"argument 'dim' lists dimension 1 twice"):
        built_ops.sum_squares(x, [1, -1])
    with pytest.raises(TypeError, match=r"opgen_ops.l2_norm\(\): argument 'x' has dtype torch.int64"):
        built_ops.l2_norm(torch.ones(3, dtype=torch.long), [])
    s = torch.tensor(2.0)  # 0-dim: dim 0 and -1 mean the scalar itself
    assert built_ops.sum_squares(s, [0]) == 4 and built_ops.sum_squares(s, [-1], True).shape == ()


def test_dim_none_reduces_every_dim_as_torch(built_ops, typed_api):
    """`int[1]? dim=None` (l2_norm and sum_squares, as torch.linalg.vector_norm and torch.sum):
    omitted or None reduces every dim; values, out=, both autograd modes and a compiled graph."""
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    for name, ref in (("l2_norm", lambda t, **kw: torch.linalg.vector_norm(t, **kw)),
                      ("sum_squares", lambda t, **kw: (t * t).sum(**kw))):
        op, typed = getattr(built_ops, name), getattr(typed_api, name)
        torch.testing.assert_close(op(x), ref(x))
        torch.testing.assert_close(typed(x), ref(x))
        torch.testing.assert_close(op(x, None, True), ref(x, dim=None, keepdim=True))
        torch.testing.assert_close(typed(x, keepdim=True), ref(x, dim=None, keepdim=True))
        torch.testing.assert_close(op(x, [0, 2]), ref(x, dim=(0, 2)))
        out = torch.empty(7, dtype=torch.float64)
        typed(x.detach(), out=out)
        assert out.shape == () and torch.allclose(out, ref(x.detach()))
        assert torch.autograd.gradcheck(lambda t: op(t, None, True), (x,), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(lambda t: op(t), (x,), check_fwd_over_rev=True)
        torch.library.opcheck(op.default, (x,), {"dim": None, "keepdim": True})
        compiled = torch.compile(lambda t: typed(t) + typed(t, [1]).sum(), backend="aot_eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), ref(x) + ref(x, dim=1).sum())


def test_out_variant(built_ops):
    x = torch.randn(4, 5)
    out = torch.empty(0)
    built_ops.sum_squares.out(x, [1], False, out=out)
    torch.testing.assert_close(out, (x * x).sum(1))
    with pytest.raises(RuntimeError, match="does not support automatic differentiation"):
        built_ops.sum_squares.out(x.requires_grad_(), [1], out=out)


@pytest.mark.parametrize("name", ["sum_squares", "l2_norm", "logsumexp", "rms", "abs_max"])
def test_gradients_over_dims(built_ops, name):
    torch.manual_seed(1)
    for dim, keepdim in (([], False), ([1], True), ([0, 2], False), ([-1], False)):
        x = torch.randn(3, 4, 2, dtype=torch.float64, requires_grad=True)
        fn = lambda t: getattr(built_ops, name)(t, dim, keepdim)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x,), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(fn, (x,), check_fwd_over_rev=True)
        ref = REFERENCES[name](x, dim or [0, 1, 2], keepdim)
        torch.testing.assert_close(torch.autograd.grad(fn(x).sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0])


def test_max_gradient_goes_to_the_chosen_element(built_ops):
    x = torch.tensor([[1.0, 4.0, 4.0], [2.0, 0.0, -1.0]], dtype=torch.float64, requires_grad=True)
    values, indices = built_ops.max(x, 1)
    values.sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    assert values.grad_fn.name() == "opgen_ops::MaxBackward" and not indices.requires_grad
    y = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: built_ops.max(t, -1, True)[0], (y,), check_forward_ad=True)


def test_tied_elements_share_the_gradient_as_in_torch(built_ops):
    """abs_max's formula divides by `ties`: the elements whose |x| is the maximum split the gradient,
    as torch.linalg.vector_norm(x, inf) and amax do; forward mode too."""
    x = torch.tensor([[3.0, -3.0, 1.0, 3.0], [2.0, 5.0, -5.0, 0.5]], dtype=torch.float64, requires_grad=True)
    want = x.detach().clone().requires_grad_()
    g = torch.tensor([1.5, -2.0], dtype=torch.float64)
    (got,) = torch.autograd.grad(built_ops.abs_max(x, [1]), x, g)
    (expected,) = torch.autograd.grad(torch.linalg.vector_norm(want, float("inf"), dim=1), want, g)
    torch.testing.assert_close(got, expected)
    assert got[0].tolist() == [0.5, -0.5, 0.0, 0.5]
    tangent = torch.randn_like(x)
    _, jvp = torch.func.jvp(lambda t: built_ops.abs_max(t, [1]), (x.detach(),), (tangent,))
    _, want_jvp = torch.func.jvp(lambda t: torch.linalg.vector_norm(t, float("inf"), dim=1), (x.detach(),), (tangent,))
    torch.testing.assert_close(jvp, want_jvp)


def test_compiled_forward_and_backward_match_eager(built_ops):
    torch._dynamo.reset()
    x = torch.randn(6, 7, requires_grad=True)
    f = torch.compile(lambda t: built_ops.l2_norm(t, [1], False) * built_ops.logsumexp(t, [0], True).sum(), backend="aot_eager",
                      fullgraph=True, dynamic=True)
    got = f(x)
    got.sum().backward()
    g = x.grad.clone()
    x.grad = None
    want = built_ops.l2_norm(x, [1], False) * built_ops.logsumexp(x, [0], True).sum()
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g, x.grad)


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_reductions_at_each_cpu_capability(built_ops, capability):
    # The tests above run the kernels ATen picks for this process; each other one in its own.
    rerun_at_capability(__file__, "match_torch or matches_torch or nan_wins", capability)
