"""Gradient formulas printed as ATen calls (double backward, forward-mode AD): what a formula
reads more than once is computed once, and nothing leaves the branch of a uniform `where` that
needs it. The numbers are checked by gradgradcheck and the forward-AD tests of every shipped op."""

from __future__ import annotations

from opgen import expr as E
from opgen.api.aten_expr import aten

SCOPE = E.Scope({"grad": E.TENSOR, "x": E.TENSOR, "beta": E.NUM, "mode": E.STR}, True, "gradient formula")


def printed(text: str) -> str:
    return aten(E.parse_expr(text), SCOPE)


def test_a_formula_without_repeats_is_one_expression():
    assert printed("grad * sigmoid(x) + x") == "at::add(at::mul(grad, at::sigmoid(x)), x)"
    assert printed("grad * beta") == "at::mul(grad, _s(static_cast<double>(beta)))"


def test_a_repeated_sub_expression_is_bound_once_and_its_operands_stay_inside_it():
    code = printed("grad * (1 - tanh(beta * x) * tanh(beta * x)) + tanh(beta * x)")
    assert code == (
        "[&] { const at::Tensor _c0 = at::tanh(at::mul(_s(static_cast<double>(beta)), x)); "
        "return at::add(at::mul(grad, at::sub(_s(1.0), at::mul(_c0, _c0))), _c0); }()")


def test_locals_come_before_their_uses_and_repeated_numbers_are_made_once():
    code = printed("exp(0.5 * x) * 0.5 + exp(0.5 * x) * exp(0.5 * x) * grad")
    assert code.count("_s(0.5)") == 1 and code.count("at::exp(") == 1
    lets = code.split("return")[0]
    assert lets.index("_c0 = _s(0.5)") < lets.index("_c1 = at::exp(at::mul(_c0, x))")


def test_the_branches_of_a_uniform_where_are_blocks_of_their_own():
    code = printed("where(mode == 'tanh', tanh(x) * tanh(x), erf(x) * erf(x) * grad)")
    condition, rest = code.split(" ? ", 1)
    assert condition == '((c10::string_view(mode) == "tanh")'
    tanh_branch, erf_branch = rest.split(" : ", 1)
    assert "at::tanh" in tanh_branch and "at::erf" not in tanh_branch
    assert "at::erf" in erf_branch and "at::tanh" not in erf_branch
    assert "_c0 = at::tanh(x)" in tanh_branch and "_c1 = at::erf(x)" in erf_branch  # one numbering: no shadowing


def test_a_per_element_where_evaluates_its_operands_as_tensors():
    code = printed("where(x > 0, grad * sigmoid(x), grad * sigmoid(x) * x)")
    assert code.count("at::sigmoid(x)") == 1 and "at::where(at::gt(x, _s(0.0)), _c0, at::mul(_c0, x))" in code


def test_masks_combine_with_logical_ops_and_per_call_conditions_become_0_dim_tensors():
    scope = E.Scope({**SCOPE.names, "flag": E.BOOL}, True, "gradient formula")
    code = aten(E.parse_expr("where(not (x > 1) and not flag or x < beta and not flag, grad, 0)"), scope)
    # `not flag`, used twice, is a C++ bool each time, never bound as a tensor
    assert code == ("at::where(at::logical_or(at::logical_and(at::logical_not(at::gt(x, _s(1.0))), _s((!flag) ? 1.0 : 0.0)), "
                    "at::logical_and(at::lt(x, _s(static_cast<double>(beta))), _s((!flag) ? 1.0 : 0.0))), grad, _s(0.0))")


def test_softplus_is_logaddexp_so_it_never_overflows():
    # log1p(exp(v)) is inf in float32 for v > 88; the kernels and references compute it as
    # max(v, 0) + log1p(exp(-|v|)), the ATen formulas as logaddexp(v, 0), which ATen differentiates
    assert printed("grad * log1p(exp(x))") == "at::mul(grad, at::logaddexp(x, at::zeros_like(x)))"
    assert printed("log1p(exp(beta * x))") == (
        "[&] { const at::Tensor _c0 = at::mul(_s(static_cast<double>(beta)), x); "
        "return at::logaddexp(_c0, at::zeros_like(_c0)); }()")
