"""The expression language: whitelist parsing, type checking, canonical printing, and the
C++ it becomes (hoisting of per-call values out of the element loop)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from opgen import expr as E
from opgen.api import cpp_expr, python

SCOPE = E.Scope({"x": E.TENSOR, "y": E.TENSOR, "w": E.NUM, "n": E.INT, "flag": E.BOOL, "mode": E.STR}, True, "kernel expression")


@pytest.mark.parametrize(
    "text, kind",
    [
        ("x * w + y", E.ELEM),
        ("w * 2", E.NUM),
        ("x > 0", E.MASK),
        ("where(x > 0, x, 0)", E.ELEM),
        ("where(mode == 'tanh', tanh(x), erf(x))", E.ELEM),
        ("w > 0 and not flag", E.BOOL),
        ("mode in ['a', 'b']", E.BOOL),
        ("flag == True and (w > 0) != flag", E.BOOL),
        ("isfinite(w) and w > 0", E.BOOL),
        ("x > 0 and y > 0", E.MASK),
        ("x < -w or flag or not (y >= 0)", E.MASK),
        ("not (x > 0)", E.MASK),
        ("isfinite(x)", E.MASK),
        ("where(isfinite(x) and x > w, x, 0)", E.ELEM),
        ("clamp(x, -1, 1) ** 2", E.ELEM),
    ],
)
def test_kinds(text, kind):
    assert E.typecheck(E.parse_expr(text), SCOPE) == kind


@pytest.mark.parametrize(
    "text, col, message",
    [
        ("x.__class__", 0, "attribute access is not supported"),
        ("eval('1')", 0, "unknown function 'eval'"),
        ("lambda: 1", 0, "unsupported syntax (Lambda)"),
        ("[x, y]", 0, "unsupported syntax (List)"),
        ("x @ y", 0, "unsupported operator"),
        ("0 < x < 1", 0, "chained comparisons"),
        ("exp(x, y)", 0, "exp() takes 1 argument(s), got 2"),
        ("exp(x=1)", 6, "keyword arguments"),
        ("where(x, x, y)", 6, "must be a condition"),
        ("x > 0 and y", 10, "'and' needs a condition on each side (a comparison such as x > 0), not a tensor element"),
        ("x > 0 or w", 9, "'or' needs a condition on each side"),
        ("not x", 0, "'not' needs a condition"),
        ("(x > 0) + 1", 1, "'+' needs a number here, not a per-element condition"),
        ("where(x > 0 and y > 0, x > 0, 0)", 23, "where() needs a number here, not a per-element condition"),
        ("mode + 1", 0, "needs a number here, not a string"),
        ("x // 2", 0, "'//' is for sizes"),
        ("  foo * x", 2, "unknown name 'foo'"),
        ("exp", 0, "'exp' is a function: call it as exp(...)"),
        ("isfinite(x > 0)", 9, "isfinite() needs a number here, not a per-element condition"),
        ("exp(" * 100 + "x" + ")" * 100, 260, "too deeply nested"),
        # what a PyTorch or NumPy user writes first, answered with the language's own spelling
        ("x if x > 0 else 0", 0, "write where(cond, a, b)"),
        ("(x > 0) & (y > 0)", 0, "combine conditions with 'and'"),
        ("x > 0 | y > 0", 4, "combine conditions with 'or'"),
        ("~(x > 0)", 0, "negate a condition with 'not'"),
        ("x ^ 2", 0, "write a power as x ** 2"),
        ("(x > 0) != (y > 0)", 1, "compares numbers, not conditions"),
        ("torch.exp(x)", 0, "call exp(...) without 'torch.'"),
        ("x.clamp(0, 1)", 0, "write clamp(x, 0, 1)"),
        ("max(x, y)", 0, "did you mean 'maximum'?"),
        ("min(x, 0)", 0, "did you mean 'minimum'?"),
        ("relu(x)", 0, "relu(x) is maximum(x, 0)"),
        ("pi * x", 0, "write the number, 3.141592653589793"),
        ("where(x == inf, 0, x)", 11, "isfinite(x) tests for one"),
        ("math.pi * x", 0, "write the number, 3.141592653589793"),
        ("(x > 0) == flag", 1, "compares numbers, not conditions"),
    ],
)
def test_rejections(text, col, message):
    with pytest.raises(E.ExprError) as info:
        E.typecheck(E.parse_expr(text), SCOPE)
    assert message in info.value.message
    assert info.value.col == col


_leaf = st.sampled_from(["x", "y", "w", "n", "1", "2.5", "0.5"])


def _combine(children):
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "**"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = children.map(lambda c: f"-{c}")
    call = st.tuples(st.sampled_from(["exp", "tanh", "sigmoid", "abs"]), children).map(lambda t: f"{t[0]}({t[1]})")
    where = st.tuples(children, children, children).map(lambda t: f"where({t[0]} > {t[1]}, {t[1]}, {t[2]})")
    return binary | unary | call | where


@given(st.recursive(_leaf, _combine, max_leaves=12))
def test_unparse_round_trips(text):
    e = E.parse_expr(text)
    assert E.parse_expr(E.unparse(e)) == e


def test_per_call_values_are_hoisted_out_of_the_loop():
    code = cpp_expr.kernel_code(E.parse_expr("x * (w / 2) + where(mode == 'tanh', tanh(x), y)"), SCOPE, ["x", "y"])
    assert code.hoisted_numbers == ["(w / 2.0)"]
    assert code.hoisted_conditions == ['(c10::string_view(mode) == "tanh")']
    assert code.body == "((x * _u0) + (_c0 ? opgen::tanh(x) : y))"


def test_powers_use_multiplication():
    code = cpp_expr.kernel_code(E.parse_expr("x ** 2 + y ** 0.5 + x ** w"), SCOPE, ["x", "y"])
    assert code.body == "(((x * x) + opgen::sqrt(y)) + opgen::pow(x, _u0))"


def test_per_element_conditions_use_where():
    code = cpp_expr.kernel_code(E.parse_expr("where(x > 0, x, 0)"), SCOPE, ["x", "y"])
    assert code.body == "opgen::where(opgen::gt(x, _t(0.0)), x, _t(0.0))"


def test_per_element_and_or_not_combine_masks_and_per_call_conditions():
    code = cpp_expr.kernel_code(E.parse_expr("where(x >= -w and x <= w and not flag or isfinite(y), x, 0)"), SCOPE, ["x", "y"])
    assert code.hoisted_conditions == ["(!flag)"]
    assert code.body == ("opgen::where(opgen::logical_or(opgen::logical_and(opgen::ge(x, _u0), opgen::logical_and(opgen::le(x, _u1), _c0)),"
                         " opgen::isfinite(y)), x, _t(0.0))")
    scope = E.Scope({"x": E.TENSOR, "y": E.TENSOR, "flag": E.BOOL}, True, "kernel expression")
    assert python.reference(E.parse_expr("x > 0 and not (y < 0) or flag"), scope) == "(((x > 0.0) & torch.logical_not((y < 0.0))) | flag)"
    assert python.reference(E.parse_expr("where(isfinite(x), x, 0)"), scope) == "torch.where(torch.isfinite(x), x, _t(0.0))"


def test_extrema_against_per_call_numbers_use_the_one_instruction_form():
    # a literal is never NaN
    assert cpp_expr.kernel_code(E.parse_expr("maximum(x, 0)"), SCOPE, ["x", "y"]).body == "opgen::maximum_uniform(x, _t(0.0))"
    assert cpp_expr.kernel_code(E.parse_expr("minimum(1, x)"), SCOPE, ["x", "y"]).body == "opgen::minimum_uniform(x, _t(1.0))"
    # an attribute may be: the fast form under a per-call condition, the NaN-propagating one otherwise
    code = cpp_expr.kernel_code(E.parse_expr("clamp(x, -w, w) + maximum(y, w)"), SCOPE, ["x", "y"])
    assert code.hoisted_numbers == ["(-w)", "w"]
    assert code.hoisted_conditions == ["!std::isnan(static_cast<double>((-w))) && !std::isnan(static_cast<double>(w))"]
    assert code.body == ("(_c0 ? (opgen::clamp_uniform(x, _u0, _u1) + opgen::maximum_uniform(y, _u1))"
                         " : (opgen::clamp(x, _u0, _u1) + opgen::maximum(y, _u1)))")
    # two elements, or no element: the general forms
    assert cpp_expr.kernel_code(E.parse_expr("maximum(x, y)"), SCOPE, ["x", "y"]).body == "opgen::maximum(x, y)"
    assert cpp_expr.kernel_code(E.parse_expr("clamp(x, y, 1)"), SCOPE, ["x", "y"]).body == "opgen::clamp(x, y, _t(1.0))"
    assert cpp_expr.kernel_code(E.parse_expr("x + maximum(w, 1)"), SCOPE, ["x", "y"]).body == "(x + _u0)"


@pytest.mark.parametrize(
    "text, series",
    [
        ("x * w + y", False),
        ("where(x > 0, x, 0) + abs(y) + clamp(x, -1, 1)", False),
        ("x ** 2 + y ** 0.5 + x ** -1", False),  # multiplication, sqrt, division: one instruction each
        ("x / sqrt(y)", False),
        ("x * exp(w) + tanh(w)", False),  # a series over per-call values runs once per call, hoisted
        ("x * tanh(x)", True),
        ("where(mode == 'tanh', x, erf(x))", True),  # either branch may run per element
        ("x ** w", True),
        ("log1p(exp(x))", True),
    ],
)
def test_kernels_know_whether_an_element_goes_through_a_series(text, series):
    """What decides whether float32 / float64 data take the AVX-512 variant (opgen::pick_cpu_kernel)."""
    assert cpp_expr.kernel_code(E.parse_expr(text), SCOPE, ["x", "y"]).computes_series is series


def test_checks_over_sizes_are_symbolic():
    scope = E.Scope(SCOPE.names, False, "check")
    assert cpp_expr.symbolic(E.parse_expr("x.size(-1) == y.size(0)"), scope) == "x.sym_size(int64_t{-1}).sym_eq(y.sym_size(int64_t{0}))"
    assert cpp_expr.symbolic(E.parse_expr("w > 0 and n >= 1"), scope) == "((w > 0.0) && (static_cast<double>(n) >= 1.0))"


def test_isfinite_in_checks():
    scope = E.Scope(SCOPE.names, False, "check")
    assert cpp_expr.symbolic(E.parse_expr("isfinite(w)"), scope) == "std::isfinite(static_cast<double>(w))"


def test_python_reference_mirrors_the_kernel():
    ref = python.reference(E.parse_expr("where(mode == 'tanh', tanh(x), minimum(x, 0))"), SCOPE)
    assert ref == "(torch.tanh(x) if (mode == 'tanh') else torch.minimum(x, _t(0.0)))"


def test_walk_is_preorder_left_to_right():
    e = E.parse_expr("where(x > 0, a * x, -b) + s.size(0)")
    kinds = [type(n).__name__ + (f":{n.id}" if isinstance(n, E.Name) else "") for n in E.walk(e)]
    assert kinds == ["Binary", "Call", "Compare", "Name:x", "Num", "Binary", "Name:a", "Name:x", "Unary", "Name:b",
                     "Method", "Name:s", "Num"]


def test_reads_tensors_answers_for_every_sub_expression_from_one_memo():
    scope = E.Scope({"x": E.TENSOR, "a": E.NUM}, True, "kernel expression")
    e = E.parse_expr("exp(a * 2) + x * a")
    memo: dict[int, bool] = {}
    assert E.reads_tensors(e, scope, memo)
    assert not E.reads_tensors(e.lhs, scope, memo) and E.reads_tensors(e.rhs, scope, memo)
    assert memo[id(e.lhs.args[0])] is False and memo[id(e.rhs.lhs)] is True  # filled by the first call


OPTIONAL = E.Scope({"x": E.TENSOR, "lo": E.NUM, "hi": E.NUM, "k": E.INT}, True, "kernel expression",
                   optional=frozenset({"lo", "hi", "k"}))


@pytest.mark.parametrize("text", [
    "where(lo is None, x, maximum(x, lo))",
    "where(lo is not None, maximum(x, lo), x)",
    "where(lo is None or hi is None, x, clamp(x, lo, hi))",
    "where(not (lo is None) and k is not None, x * k + lo, x)",
    "lo is None or lo > 0",
    "where(lo is None, x, where(hi is None, x + lo, x + lo + hi))",
])
def test_optional_attributes_read_where_guarded(text):
    e = E.parse_expr(text)
    E.typecheck(e, OPTIONAL)
    E.check_optional_guards(e, OPTIONAL)
    assert E.parse_expr(E.unparse(e)) == e


@pytest.mark.parametrize("text, col, message", [
    ("x + lo", 4, "'lo' may be None here; read it where it is known not to be"),
    ("where(lo is None, x + lo, x)", 22, "'lo' may be None here"),
    ("where(lo is None and hi is None, x, x + lo)", 40, "'lo' may be None here"),  # one of them may be None
    ("lo > 0 or lo is None", 0, "'lo' may be None here"),  # the test must come first
    ("where(x > 0, x, lo)", 16, "'lo' may be None here"),
])
def test_unguarded_reads_of_optional_attributes_are_errors(text, col, message):
    e = E.parse_expr(text)
    E.typecheck(e, OPTIONAL)
    with pytest.raises(E.ExprError) as info:
        E.check_optional_guards(e, OPTIONAL)
    assert message in info.value.message and info.value.col == col


@pytest.mark.parametrize("text, col, message", [
    ("x is None", 0, "'x' is never None: only optional attributes (float? eps=None) and tensors (Tensor? bias=None) are"),
    ("lo is 0", 0, "'is' only tests an optional attribute against None"),
])
def test_is_none_needs_an_optional_attribute(text, col, message):
    with pytest.raises(E.ExprError) as info:
        E.typecheck(E.parse_expr(text), OPTIONAL)
    assert message in info.value.message and info.value.col == col


def test_optional_attributes_print_as_tests_and_values_read_as_0_when_none():
    code = cpp_expr.kernel_code(E.parse_expr("where(lo is None, x, x * k + lo)"), OPTIONAL, ["x"])
    assert code.hoisted_conditions == ["(!lo.has_value())"]
    assert code.hoisted_numbers == ["static_cast<double>(k.value_or(0))", "lo.value_or(0.0)"]
    assert code.body == "(_c0 ? x : ((x * _u0) + _u1))"
    ref = python.reference(E.parse_expr("where(lo is None, x, x + lo)"), OPTIONAL)
    assert ref == "(x if (lo is None) else (x + (0.0 if lo is None else lo)))"


def test_checks_read_scalar_attributes_as_doubles_and_symint_ones_as_sizes():
    # in the op's entry a `Scalar` is still an at::Scalar (kernels get doubles), which converts to
    # nothing by itself; a `SymInt` stays symbolic, as t.size(i), so torch.compile need not specialize
    from opgen.dest.op_context import check_scope
    from opgen.yaml_source import load_spec_source
    from opgen.model import OpSpec

    op = OpSpec.parse(load_spec_source("specs/f.yaml", b"""
signature: f(Tensor x, *, Scalar s=1, SymInt n=2) -> Tensor
dtypes: [float32]
shape: same(x)
checks: ["isfinite(s) and s > 0", "n > 1"]
kernel: {pointwise: x * s * n}
"""))
    scope = check_scope(op)
    assert cpp_expr.symbolic(op.checks[0].expr, scope) == "(std::isfinite(static_cast<double>(s.toDouble())) && (s.toDouble() > 0.0))"
    assert cpp_expr.symbolic(op.checks[1].expr, scope) == "n.sym_gt(c10::SymInt(int64_t{1}))"


def test_optional_scalars_are_optional_doubles_in_checks_and_kernels():
    from opgen.dest.op_context import check_scope, kernel_attrs, kernel_scope
    from opgen.yaml_source import load_spec_source
    from opgen.model import OpSpec

    op = OpSpec.parse(load_spec_source("specs/f.yaml", b"""
signature: f(Tensor x, *, Scalar? lo=None) -> Tensor
dtypes: [float32]
shape: same(x)
checks: ["lo is None or lo > 0"]
kernel: {pointwise: "where(lo is None, x, maximum(x, lo))"}
"""))
    assert cpp_expr.symbolic(op.checks[0].expr, check_scope(op)) == "((!lo.has_value()) || (opgen::owned(lo).value_or(0.0) > 0.0))"
    (attr,) = kernel_attrs(op, {"lo"})
    assert (attr.cpp_type, attr.passed) == ("std::optional<double>", "opgen::owned(lo)")
    code = cpp_expr.kernel_code(op.kernel.expr, kernel_scope(op), ["x"])
    assert code.hoisted_conditions[0] == "(!lo.has_value())" and code.hoisted_numbers == ["lo.value_or(0.0)"]


LISTS = E.Scope({"x": E.TENSOR, "c": E.NUM, "k": E.INT, "w": E.NUM}, True, "kernel expression", lists={"c": 3, "k": 2})


@pytest.mark.parametrize("text, kind", [("c[0] + x * c[2]", E.ELEM), ("k[1] * 2", E.INT), ("c[0] > k[1]", E.BOOL)])
def test_sized_list_attributes_are_read_one_element_at_a_time(text, kind):
    e = E.parse_expr(text)
    assert E.typecheck(e, LISTS) == kind
    assert E.parse_expr(E.unparse(e)) == e and E.unparse(e) == text


@pytest.mark.parametrize("text, col, message", [
    ("x * c", 4, "'c' is a list (3 elements); read one element, e.g. c[0]"),
    ("x * c[3]", 4, "index 3 is out of range: 'c' has 3 element(s), c[0] to c[2]"),
    ("x * c[-1]", 6, "negative indices are not supported; count from the front, e.g. c[0]"),
    ("x * c[k[0]]", 6, "an index must be a literal integer, e.g. betas[0]"),
    ("x * c[0:2]", 6, "slices are not supported"),
    ("x[0] * 2", 0, "'x' is not a list attribute; only sized lists (float[2] betas) can be indexed"),
    ("w[0] * 2", 0, "'w' is not a list attribute"),
    ("cc[0] * 2", 0, "unknown name 'cc'"),
    ("exp(x)[0]", 0, "only a list attribute can be indexed"),
])
def test_indexing_errors_say_what_to_write(text, col, message):
    with pytest.raises(E.ExprError) as info:
        E.typecheck(E.parse_expr(text), LISTS)
    assert message in info.value.message and info.value.col == col, (info.value.col, info.value.message)


def test_list_elements_print_as_per_call_values():
    code = cpp_expr.kernel_code(E.parse_expr("c[0] + x * (c[1] + x * k[1])"), LISTS, ["x"])
    assert code.hoisted_numbers == ["c[0]", "c[1]", "static_cast<double>(k[1])"]
    assert code.body == "(_u0 + (x * (_u1 + (x * _u2))))"
    assert python.reference(E.parse_expr("c[0] + x * k[1]"), LISTS) == "(c[0] + (x * k[1]))"
    check = E.Scope(LISTS.names, False, "check", lists=LISTS.lists)
    assert cpp_expr.symbolic(E.parse_expr("k[0] + 1 > c[1]"), check) == "((static_cast<double>(k[0]) + 1.0) > c[1])"
    assert cpp_expr.symbolic(E.parse_expr("x.size(0) == k[0] + 1"), check) == \
        "x.sym_size(int64_t{0}).sym_eq(c10::SymInt(opgen::int_arith('+', k[0], int64_t{1}, _op)))"


def test_symint_list_elements_are_sizes_in_checks_and_shape_rules():
    from opgen.dest.op_context import check_scope, checks
    from opgen.yaml_source import load_spec_source
    from opgen.model import OpSpec

    op = OpSpec.parse(load_spec_source("specs/f.yaml", b"""
signature: f(Tensor x, SymInt[2] pad=[1, 1]) -> Tensor
dtypes: [float32]
shape: ["x.size(0) + pad[0] + pad[1]"]
checks: ["pad[0] >= 0"]
kernel: {cpu: f.cpu.cpp}
reference: x
"""))
    scope = check_scope(op)
    assert cpp_expr.symbolic(op.shape.sizes[0], scope) == \
        "opgen::size_arith('+', opgen::size_arith('+', x.sym_size(int64_t{0}), pad[0], _op), pad[1], _op)"
    length, check = checks(op)
    assert length.code == "pad.size() == 2"
    assert check.code == "(pad[0].sym_ge(c10::SymInt(int64_t{0}))).expect_true(__FILE__, __LINE__)"  # a ValueError, deferred
