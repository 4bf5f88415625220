"""The spec language beyond pointwise: reductions, hand-written kernels, bool outputs and
variants. Parsing and located errors (no build); tests/test_reductions.py and
tests/test_handwritten.py run the shipped ops."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from opgen import tensor_expr as T
from opgen.errors import SpecError
from opgen.model import CustomKernel, OpSpec, ReduceKernel
from opgen.yaml_source import load_spec_source

SUM_SQUARES = """\
signature: sum_squares(Tensor x, int[1] dim, bool keepdim=False) -> Tensor
dtypes: [floating]
shape: reduce(x, dim, keepdim)
kernel:
  reduce: {map: x * x, combine: sum}
gradient:
  x: 2 * x * grad
"""

LINEAR = """\
signature: linear(Tensor x, Tensor w, Tensor? bias=None) -> Tensor
dtypes: [float32, float64]
shape: [x.size(0), w.size(0)]
checks: ["x.dim() == 2", "w.dim() == 2", "x.size(1) == w.size(1)"]
kernel:
  cpu: linear.cpu.cpp
gradient:
  x: grad.mm(w)
  w: grad.t().mm(x)
  bias: grad.sum(0)
reference: torch.nn.functional.linear(x, w, bias)
"""


def parse(text: str, name: str) -> OpSpec:
    return OpSpec.parse(load_spec_source(f"specs/{name}.yaml", textwrap.dedent(text).encode()))


def error(text: str, name: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(text, name)
    return info.value


def round_trips(op: OpSpec) -> None:
    again = OpSpec.parse(load_spec_source(op.path, yaml.safe_dump(op.to_dict(), sort_keys=False).encode()))
    assert again == op and again.to_dict() == op.to_dict()


def test_reduction_parses_and_round_trips():
    op = parse(SUM_SQUARES, "sum_squares")
    assert op.is_reduction and isinstance(op.kernel, ReduceKernel)
    assert str(op.shape) == "reduce(x, dim, keepdim)" and op.kernel.combine == "sum" and op.variants == ("out",)
    round_trips(op)
    custom = parse(SUM_SQUARES.replace("reduce: {map: x * x, combine: sum}", "reduce: {map: abs(x), combine: 'maximum(a, b)', identity: -inf, post: sqrt(acc)}")
                   .replace("2 * x * grad", "grad"), "sum_squares")
    assert custom.kernel.combine == "custom" and custom.kernel.identity == float("-inf")
    round_trips(custom)


def test_max_with_indices():
    text = """\
    signature: max(Tensor x, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)
    dtypes: [floating]
    shape: reduce(x, dim, keepdim)
    kernel:
      reduce: {map: x, combine: max}
    gradient: auto
    """
    op = parse(text, "max")
    assert op.has_indices and op.variants == ()
    round_trips(op)


@pytest.mark.parametrize("old, new, line, col, message", [
    ("reduce(x, dim, keepdim)", "reduce(y, dim, keepdim)", 3, 15, "reduce() reduces a tensor input; tensor inputs are: x"),
    ("reduce(x, dim, keepdim)", "reduce(x, keepdim)", 3, 18, "'keepdim' must be an 'int', 'int[]' or 'int[]?' argument"),
    ("int[1] dim,", "int? dim,", 3, 18, "or 'int[1]? dim=None' (None reduces every dim)"),
    ("reduce(x, dim, keepdim)", "reduce(x, dim, dim)", 3, 23, "'dim' must be a 'bool' argument"),
    ("combine: sum}", "combine: summ}", 5, 33, "unknown combine 'summ'; use one of sum, mean, prod, max, min, logsumexp"),
    ("combine: sum}", "combine: 'a + x'}", 5, 38, "unknown name 'x' in combine expression"),
    ("combine: sum}", "combine: 'a + b'}", 5, 11, "a custom combine needs an 'identity'"),
    ("combine: sum}", "combine: sum, identity: 0}", 5, 38, "'sum' has a built-in identity"),
    ("combine: sum}", "combine: sum, post: sqrt(x)}", 5, 49, "unknown name 'x' in post expression"),
    ("combine: sum}", "combine: sum, post: acc / count}", 5, 50, "for a mean, write combine: mean"),
    ("map: x * x, combine: sum}", "map: where(x > 0, x, 0), combine: sum}", 5, 30, "the expression of 'map' was cut at a comma"),
    ("map: x * x,", "map: x > 0,", 5, 17, "the map must compute a number from 'x'"),
    ("shape: reduce(x, dim, keepdim)", "shape: same(x)", 3, 8, "a reduction kernel needs the shape rule reduce(x, dim, keepdim)"),
    ("dtypes: [floating]", "dtypes: [int64]", 2, 9, "reductions accumulate in floating point"),
    ("  x: 2 * x * grad", "  x: 2 * x * grad * count * y", 7, 29, "unknown name 'y' in gradient formula"),
    ("-> Tensor", "-> (Tensor a, Tensor b)", 5, 33, "only max and min return indices"),
    ("(Tensor x, int[1] dim", "(Tensor x, Tensor y, int[1] dim", 1, 34,
     "a reduction reads one tensor input ('x'); 'y' is not supported: compute the map of several tensors with a pointwise op"),
    # names the expressions add must not hide an argument of the same name
    ("bool keepdim=False)", "bool keepdim=False, float acc=1.0)", 1, 72,
     "argument name 'acc' is taken: in the post expression it names the combined value; rename the argument"),
    ("bool keepdim=False)", "bool keepdim=False, float count=1.0)", 1, 72,
     "argument name 'count' is taken: in the gradient formula it names the number of elements reduced into each output"),
    ("bool keepdim=False)", "bool keepdim=False, float ties=1.0)", 1, 72,
     "argument name 'ties' is taken: in the gradient formula it names the number of elements whose map equals the result"),
])
def test_reduction_errors(old, new, line, col, message):
    assert old in SUM_SQUARES
    text = SUM_SQUARES.replace(old, new)
    if "acc" in new:
        text = text.replace("combine: sum}", "combine: sum, post: sqrt(acc)}")
    e = error(text, "sum_squares")
    assert message in e.message, e.message
    assert (e.location.line, e.location.col) == (line, col), str(e)


def test_reduction_attributes_may_share_the_accumulators_names_where_no_expression_uses_them():
    """A custom combine sees only its accumulators a and b, so attributes called a, b (or acc,
    without a post expression; count, without a gradient) are the map's."""
    text = SUM_SQUARES.replace("bool keepdim=False)", "bool keepdim=False, *, float a=1.0, float b=0.0, float acc=2.0)")
    text = text.replace("{map: x * x, combine: sum}", "{map: a * x * x + b + acc, combine: 'maximum(a, b)', identity: 0}")
    op = parse(text.replace("gradient:\n  x: 2 * x * grad\n", ""), "sum_squares")
    assert [a.name for a in op.schema.attributes][-3:] == ["a", "b", "acc"]
    round_trips(op)


def test_reduction_auto_gradient_is_limited_to_derivable_combines():
    e = error(SUM_SQUARES.replace("combine: sum}", "combine: prod}").replace("gradient:\n  x: 2 * x * grad", "gradient: auto"), "sum_squares")
    assert "'auto' derives gradients of sum, mean and logsumexp" in e.message


def test_handwritten_kernel_parses_and_round_trips():
    op = parse(LINEAR, "linear")
    assert op.is_custom and op.kernel == CustomKernel("linear.cpu.cpp")
    assert [n for n, _ in op.gradient.tensor_formulas] == ["x", "w", "bias"]
    round_trips(op)
    with_backward = parse(LINEAR.replace("  x: grad.mm(w)\n  w: grad.t().mm(x)\n  bias: grad.sum(0)",
                                         "  kernel: {cpu: linear_backward.cpu.cpp, cuda: linear_backward.cu}"), "linear")
    assert with_backward.gradient.kernel == CustomKernel("linear_backward.cpu.cpp", "linear_backward.cu")
    round_trips(with_backward)


@pytest.mark.parametrize("old, new, message", [
    ("cpu: linear.cpu.cpp", "cpu: ../linear.cpu.cpp", "a kernel file is a path relative to the spec's folder"),
    ("cpu: linear.cpu.cpp", "cpu: /tmp/linear.cpp", "a kernel file is a path relative to the spec's folder"),
    ("cpu: linear.cpu.cpp", "cpu: linear.cu", "a cpu kernel file ends in .cpp or .cc"),
    ("cpu: linear.cpu.cpp", "cuda: linear.cu", "a hand-written kernel needs at least its CPU file"),
    ("cpu: linear.cpu.cpp", "cpu: linear.cpu.cpp\n  pointwise: x", "give one kernel kind"),
    ("reference: torch.nn.functional.linear(x, w, bias)\n", "", "a hand-written kernel needs a 'reference'"),
    ("  x: grad.mm(w)", "  x: grad.mm(w, x)", "'mm' takes 1 arguments, got 2"),
    ("  x: grad.mm(w)", "  x: grad.mmm(w)", "unknown tensor method 'mmm'"),
    ("  x: grad.mm(w)", "  x: grad.mm(bias)", "unknown name 'bias' in gradient formula"),
    ("  x: grad.mm(w)", "  x: grad.sum(w)", "argument 1 of 'sum' must be a dim or a list of dims"),
    ("  x: grad.mm(w)", "  x: torch.mm(grad, w)", "unknown name 'torch' in gradient formula"),
    ("  x: grad.mm(w)", "  x: eps.mm(w)", "unknown name 'eps'"),
    ("  x: grad.mm(w)", "  x: grad.t(0)", "'t' takes 0 arguments, got 1"),
    ("  x: grad.mm(w)", "  x: grad.mm(w)[0]", "only a sized list attribute can be indexed, e.g. w[0] for float[2] w"),
    ("  x: grad.mm(w)", "  y: grad", "'y' is not a tensor input; gradients are for: x, w, bias"),
    ("  x: grad.mm(w)\n  w: grad.t().mm(x)\n  bias: grad.sum(0)\n", "  {x: grad.transpose(0, 1).t().mm(w), w: grad.t().mm(x)}\n",
     "'1).t().mm(w)' is not a tensor input; gradients are for: x, w, bias; the expression of 'x' was cut at a comma"),
    ("shape: [x.size(0), w.size(0)]", "shape: same(bias)", "the shape rule can use plain 'Tensor' inputs"),
    ("checks: [", "checks: [\"bias.size(0) == 1\", ", "'bias' may be None here; read it where it is known not to be"),
    ("shape: [x.size(0), w.size(0)]", "shape: [x.size(0), bias.size(0)]",
     "'bias' (Tensor?) can't be used in this expression; pointwise kernels read optional tensors (where(bias is None, ..., "
     "<uses of bias>)), checks after a test (bias is None or bias.dim() == 1)"),
    ("Tensor? bias=None)", "Tensor? bias=None, float out=1.0)",
     "argument name 'out' is the hand-written kernel's output parameter (void linear_cpu(const at::Tensor& out, ...)); rename it"),
])
def test_handwritten_errors(old, new, message):
    assert old in LINEAR
    e = error(LINEAR.replace(old, new), "linear")
    assert message in e.message, e.message


def test_tensor_formulas_print_as_aten():
    names = {"grad": T.TENSOR, "x": T.TENSOR, "eps": T.NUMBER}
    f = T.parse_formula("(x - x.mean(-1, True)) * (grad.sum([0, 1]) + eps) ** 2", names)
    assert f.text == "(x - x.mean(-1, True)) * (grad.sum([0, 1]) + eps) ** 2"
    assert T.parse_formula(f.text, names) == f
    assert T.cpp(f.expr, names) == (
        "((x - x.mean(at::IntArrayRef{int64_t{-1}}, true)) * (grad.sum(at::IntArrayRef{int64_t{0}, int64_t{1}}, false) "
        "+ static_cast<double>(eps)).pow(static_cast<double>(int64_t{2})))")


def test_bool_output_and_variants():
    text = """\
    signature: isclose(Tensor a, Tensor b, *, float atol=1e-8) -> Tensor
    dtypes: [floating]
    shape: broadcast(a, b)
    kernel:
      pointwise: abs(a - b) <= atol
    variants: [inplace]
    """
    e = error(text, "isclose")
    assert "an in-place variant writes a pointwise op's result into its first argument" in e.message
    op = parse(text.replace("    variants: [inplace]\n", "    variants: []\n"), "isclose")
    assert op.kernel.bool_output and op.variants == ()
    round_trips(op)
    assert "a comparison's output is bool and has no gradient" in error(text.replace("    variants: [inplace]\n", "    gradient: auto\n"), "isclose").message
    relu = """\
    signature: relu(Tensor x) -> Tensor
    dtypes: [floating]
    shape: same(x)
    kernel:
      pointwise: maximum(x, 0)
    variants: [inplace, out]
    """
    op = parse(relu, "relu")
    assert op.variants == ("out", "inplace")
    round_trips(op)
    assert "unknown variant 'in_place'" in error(relu.replace("[inplace, out]", "[in_place]"), "relu").message
    assert "'out' is listed twice" in error(relu.replace("[inplace, out]", "[out, out]"), "relu").message


@pytest.mark.parametrize("name", ["mode", "dispatch_key"])
def test_names_torch_compile_cannot_pass_to_a_mutating_overload(name):
    """torch.compile functionalizes out= and in-place overloads through auto_functionalized, which
    takes every argument by keyword beside a parameter of its own called `mode` (or
    `dispatch_key`): such an op builds, but fails opcheck and torch.compile. The spec says so."""
    scale = f"""\
    signature: scale(Tensor x, *, float {name}=1.0) -> Tensor
    dtypes: [floating]
    shape: same(x)
    kernel:
      pointwise: x * {name}
    """
    e = error(scale, "scale")  # out= by default
    assert (e.location.line, e.location.col) == (1, 37), str(e)  # at the name
    assert f"argument name '{name}' breaks torch.compile of the out= overload" in e.message
    assert f"rename it, e.g. 'scale_{name}', or add `variants: []` for no out= overload" in e.message
    e = error(scale + "variants: [inplace]\n", "scale")
    assert f"'{name}' breaks torch.compile of the in-place overload" in e.message and "or drop the variant" in e.message
    op = parse(scale + "variants: []\n", "scale")  # the functional op alone compiles fine
    assert op.variants == () and op.schema.arguments[1].name == name
    round_trips(op)
    assert parse(scale.replace(f"{name}=", "ctx=").replace(f"* {name}", "* ctx"), "scale").variants == ("out",)


def test_an_argument_named_out_needs_no_out_overload():
    scale = """\
    signature: scale(Tensor x, *, float out=1.0) -> Tensor
    dtypes: [floating]
    shape: same(x)
    kernel:
      pointwise: x * out
    """
    e = error(scale, "scale")
    assert (e.location.line, e.location.col) == (1, 37), str(e)
    assert e.message == ("argument name 'out' is the out= overload's own output argument; rename it, e.g. 'scale_out', "
                         "or add `variants: []` for no out= overload")
    assert "or drop the variant" in error(scale + "variants: [out, inplace]\n", "scale").message
    assert parse(scale + "variants: [inplace]\n", "scale").variants == ("inplace",)


NORM = """\
signature: norm(Tensor x, *, float eps=1e-5) -> (Tensor y, Tensor mean, Tensor rstd)
dtypes: [floating]
shape:
  y: same(x)
  mean: reduce(x, -1, True)
  rstd: reduce(x, -1, True)
kernel:
  cpu: norm.cpu.cpp
gradient:
  x: rstd * (grad_y - grad_y.mean(-1, True)) + grad_mean / x.size(-1) - grad_rstd * rstd ** 3 * (x - mean) / x.size(-1)
reference: torch.native_layer_norm(x, [x.shape[-1]], None, None, eps)
"""


def test_multi_output_handwritten_parses_and_round_trips():
    op = parse(NORM, "norm")
    assert op.multi_output and op.output_names == ("y", "mean", "rstd")
    assert [str(r) for r in op.shapes] == ["same(x)", "reduce(x, -1, True)", "reduce(x, -1, True)"]
    assert op.shapes[1].literal_dim and op.variants == ()
    round_trips(op)
    names = {"x": T.TENSOR, "rstd": T.TENSOR, "grad_mean": T.TENSOR}
    assert T.cpp(T.parse_formula("grad_mean / x.size(-1) * rstd", names).expr, names) == (
        "((grad_mean / c10::Scalar(x.sym_size(int64_t{-1}))) * rstd)")
    one = parse(NORM.replace("-> (Tensor y, Tensor mean, Tensor rstd)", "-> Tensor").replace(
        "shape:\n  y: same(x)\n  mean: reduce(x, -1, True)\n  rstd: reduce(x, -1, True)", "shape: reduce(x, -1)").replace(
        "  x: rstd * (grad_y - grad_y.mean(-1, True)) + grad_mean / x.size(-1) - grad_rstd * rstd ** 3 * (x - mean) / x.size(-1)",
        "  x: grad.unsqueeze(-1).expand_as(x) / x.size(-1)"), "norm")
    assert str(one.shape) == "reduce(x, -1)" and one.output_names == ("out",)
    round_trips(one)


@pytest.mark.parametrize("old, new, message", [
    ("(Tensor y, Tensor mean, Tensor rstd)", "(Tensor y, Tensor, Tensor rstd)", "name every output of a multi-output op"),
    ("(Tensor y, Tensor mean, Tensor rstd)", "(Tensor x, Tensor mean, Tensor rstd)", "output name 'x' collides"),
    ("(Tensor y, Tensor mean, Tensor rstd)", "(Tensor y, Tensor grad_m, Tensor rstd)", "output name 'grad_m' collides"),
    ("(Tensor y, Tensor mean, Tensor rstd)", "(Tensor y, Tensor mean, Tensor y)", "output name 'y' collides"),
    ("  rstd: reduce(x, -1, True)\n", "", "give a shape rule for every output; missing: rstd"),
    ("  rstd: reduce(x, -1, True)", "  rstd: reduce(x, -1, True)\n  var: same(x)", "unknown key 'var'; allowed keys: y, mean, rstd"),
    ("mean: reduce(x, -1, True)", "mean: reduce(x, 1.5)", "use reduce(x, dim)"),
    ("mean: reduce(x, -1, True)", "mean: reduce(x, -1, yes)", "'yes' must be a 'bool' argument"),
    ("grad_mean / x.size(-1)", "grad / x.size(-1)", "unknown name 'grad' in gradient formula"),
    ("grad_mean / x.size(-1)", "grad_mean / x.size(w)", "unknown name 'w'"),
    ("  x: rstd * (grad_y - grad_y.mean(-1, True)) + grad_mean", "  x: x.size(-1)  #",
     "a gradient formula computes a tensor"),
])
def test_multi_output_errors(old, new, message):
    assert old in NORM
    e = error(NORM.replace(old, new), "norm")
    assert message in e.message, e.message


def test_shape_mapping_needs_a_handwritten_multi_output_op():
    e = error(NORM.replace("-> (Tensor y, Tensor mean, Tensor rstd)", "-> Tensor"), "norm")
    assert "a mapping of shape rules is for ops with several outputs" in e.message
    e = error(SUM_SQUARES.replace("shape: reduce(x, dim, keepdim)", "shape: reduce(x, 0, keepdim)"), "sum_squares")
    assert "a reduction kernel reduces the dims its caller passes" in e.message


CARTESIAN = """\
signature: to_cartesian(Tensor r, Tensor theta) -> (Tensor x, Tensor y)
dtypes: [floating]
shape: broadcast(r, theta)
kernel:
  pointwise:
    x: r * cos(theta)
    y: r * sin(theta)
gradient:
  r: grad_x * cos(theta) + grad_y * sin(theta)
  theta: grad_y * x - grad_x * y
"""


def test_multi_output_pointwise_parses_round_trips_and_derives():
    from opgen import expr as E
    from opgen.derivatives import derived_formulas, substitute

    op = parse(CARTESIAN, "to_cartesian")
    assert op.multi_output and op.is_pointwise and len(op.kernel.exprs) == 2 and op.variants == ()
    assert op.kernel.text == "r * cos(theta); r * sin(theta)"
    round_trips(op)
    auto = parse(CARTESIAN.split("gradient:")[0] + "gradient: auto\n", "to_cartesian")
    derived = {n: E.unparse(f) for n, f in derived_formulas(auto)}
    assert derived == {"r": "grad_x * cos(theta) + grad_y * sin(theta)",
                       "theta": "grad_x * (r * -sin(theta)) + grad_y * (r * cos(theta))"}, derived
    # a tangent takes one output's terms: grad_y := 0 drops them
    f = dict(derived_formulas(auto))["theta"]
    assert E.unparse(substitute(f, {"grad_x": E.Name("grad"), "grad_y": E.Num(0)})) == "grad * (r * -sin(theta))"


def test_multi_output_gradients_split_into_pieces_masked_by_given_flags():
    """Each incoming gradient's terms of a formula, so a backward can leave out those of an output
    that was not used: exact pieces when every additive term reads one gradient, else the formula
    with the other gradients 0 (formulas are linear in them), kept whole when all are given."""
    from opgen import expr as E
    from opgen.derivatives import gradient_pieces, masked_by_given_gradients

    grads = ("grad_x", "grad_y")
    theta = E.parse_expr("grad_y * x - grad_x * y")
    exact, pieces = gradient_pieces(theta, grads)
    assert exact and [(g, sign, E.unparse(p)) for g, sign, p in pieces] == [("grad_y", 1, "grad_y * x"), ("grad_x", -1, "grad_x * y")]
    assert E.unparse(masked_by_given_gradients(theta, grads)) == \
        "where(grad_y__given, grad_y * x, 0) - where(grad_x__given, grad_x * y, 0)"
    grouped = E.parse_expr("grad_x * a - grad_y * b + grad_x * c")  # a gradient in two terms: one piece
    assert [(g, s, E.unparse(p)) for g, s, p in gradient_pieces(grouped, grads)[1]] == [
        ("grad_x", 1, "grad_x * a + grad_x * c"), ("grad_y", -1, "grad_y * b")]
    shared = E.parse_expr("(grad_x + grad_y) * exp(t)")
    exact, pieces = gradient_pieces(shared, grads)
    assert not exact and [E.unparse(p) for _, _, p in pieces] == ["grad_x * exp(t)", "grad_y * exp(t)"]
    assert E.unparse(masked_by_given_gradients(shared, grads)).startswith("where(grad_x__given and grad_y__given, (grad_x + grad_y) * exp(t), ")


@pytest.mark.parametrize("old, new, message", [
    ("    y: r * sin(theta)\n", "", "give an expression for every output; missing: y"),
    ("    y: r * sin(theta)", "    y: r * sin(theta)\n    z: r", "unknown key 'z'; allowed keys: x, y"),
    ("    y: r * sin(theta)", "    y: r > 0", "each output's expression computes a number"),
    ("  pointwise:\n    x: r * cos(theta)\n    y: r * sin(theta)", "  pointwise: r * cos(theta)", "one expression per output"),
    ("  theta: grad_y * x - grad_x * y", "  theta: grad * x", "unknown name 'grad'"),
    ("  theta: grad_y * x - grad_x * y", "  theta: result", "unknown name 'result'"),
    ("shape: broadcast(r, theta)", "shape: {x: same(r), y: same(theta)}", "one shape rule per output is for hand-written kernels"),
    ("(Tensor x, Tensor y)", "(Tensor x, Tensor r)", "output name 'r' collides"),
])
def test_multi_output_pointwise_errors(old, new, message):
    assert old in CARTESIAN
    e = error(CARTESIAN.replace(old, new), "to_cartesian")
    assert message in e.message, e.message
    if "variants" not in CARTESIAN:
        e = error(CARTESIAN + "variants: [out]\n", "to_cartesian")
        assert "the out variant is for ops with one output" in e.message


def test_shipped_pointwise_kernels_that_wait_on_memory_keep_float32_off_avx512():
    """Arithmetic-only loops (not comparisons) pass avx512_in_cache=false to opgen::pick_cpu_kernel:
    float32 / float64 data that fits in cache runs their AVX2 variant on AVX-512 CPUs; loops through
    exp, tanh, sin, ... and bool outputs take AVX-512 for all data."""
    from pathlib import Path

    from opgen.config import load_config
    from opgen.dest import pointwise
    from opgen.library import load_library

    root = Path(__file__).resolve().parent.parent
    ops = {op.name: op for op in load_library(load_config(root)).ops}
    memory_bound = {k.name: k.memory_bound for name in ops if ops[name].is_pointwise for k in pointwise.kernels(ops[name])}
    assert memory_bound == {
        "add": True, "add_backward": True, "weighted_sum": True, "weighted_sum_backward": True,
        "relu": True, "relu_backward": True, "clamp": True, "clamp_backward": True,
        "gelu": False, "gelu_backward": False, "bias_gelu": False, "bias_gelu_backward": False,
        "softplus": False, "softplus_backward": False,
        "sigmoid": False, "sigmoid_backward": True,  # its backward reads the result: grad * result * (1 - result)
        "to_cartesian": False, "to_cartesian_backward": False,
        "isclose": False,  # a comparison: its AVX-512 mask stores ran float64 2x faster
        # broadcast calls: cos(theta), sin(theta) and exp(log_scale) computed apart, then arithmetic only
        "to_cartesian_hoist": False, "to_cartesian_from_hoisted": True, "to_cartesian_backward_from_hoisted": True,
        "actnorm": False, "actnorm_backward": False,
        "actnorm_hoist": False, "actnorm_from_hoisted": True, "actnorm_backward_from_hoisted": True,
    }
    for name, op in ops.items():
        if not op.is_pointwise:
            continue
        text = (root / "generated" / "csrc" / "ops" / f"{name}.cpp").read_text()
        for kernel in pointwise.kernels(op):
            picks = [text[i:text.index(";", i)] for suffix in ("_contiguous", "_kernel")
                     if (i := text.find(f"pick_cpu_kernel(&cpu::DEFAULT::{kernel.name}{suffix}")) >= 0]
            assert picks, (name, kernel.name)
            for pick in picks:
                assert pick.endswith("/*avx512_in_cache=*/false)") is kernel.memory_bound, (name, kernel.name)


def _scale(attributes: int, *, gradient: bool = False, variants: str | None = None) -> str:
    """An op `scale` with `attributes` float attributes."""
    attrs = ", ".join(f"float w{i}=1.0" for i in range(attributes))
    lines = [f'signature: "scale(Tensor x, *, {attrs}) -> Tensor"', "dtypes: [floating]", "shape: same(x)",
             "kernel:", "  pointwise: x * w0"]
    lines += ["gradient:", "  x: grad * w0"] if gradient else []
    lines += [f"variants: {variants}"] if variants is not None else []
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("attributes, gradient, variants, message", [
    (64, False, "[]", "scale has 65 arguments: more than the 64 PyTorch's dispatcher allows in one schema"),
    (63, False, None, "scale has 64 arguments, which gives its out= overload up to 65: more than the 64"),
    (61, True, "[]", "scale has 62 arguments, which gives its backward op up to 65: more than the 64"),
])
def test_schemas_stay_within_the_dispatchers_64_arguments(attributes, gradient, variants, message):
    """c10 aborts the process that loads a library with a schema of more than 64 arguments, so
    the spec says so first, counting the overloads and the backward op the op brings."""
    e = error(_scale(attributes, gradient=gradient, variants=variants), "scale")
    assert message in e.message, e.message
    assert e.message.endswith("(a library with such a schema aborts when it loads); pass fewer arguments")
    assert (e.location.line, e.location.col) == (1, 13), str(e)  # the signature
    # one argument fewer fits: the backward's gradient, saved input and shape, and the attributes make 64
    fits = parse(_scale(attributes - 1, gradient=gradient, variants=variants), "scale")
    assert len(fits.schema.arguments) == attributes


def test_generated_shape_violation_test_targets_an_input_the_op_checks():
    """The generated property test breaks one input's shape and expects the error to name it: a
    plain Tensor that the op checks against the first (not a list, nor one a hand-written kernel's
    `same(x)` rule leaves alone)."""
    from opgen.dest.tests import _shape_violations

    sum_of = """\
    signature: sum_of(Tensor x, Tensor[] rest, Tensor y, Tensor? extra=None) -> Tensor
    dtypes: [floating]
    shape: same(x)
    kernel:
      cpu: sum_of.cpu.cpp
    reference: x + y
    """
    assert _shape_violations(parse(sum_of, "sum_of")) == []
    assert _shape_violations(parse(sum_of.replace("same(x)", "broadcast(x, y)"), "sum_of")) == [2]
    assert _shape_violations(parse(sum_of.replace("same(x)", "broadcast(y)"), "sum_of")) == []
    assert _shape_violations(parse(LINEAR, "linear")) == []
    relu = "signature: relu(Tensor x)-> Tensor\ndtypes: [floating]\nshape: same(x)\nkernel:\n  pointwise: maximum(x, 0)\n"
    assert _shape_violations(parse(relu, "relu")) == []
    gated = relu.replace("relu(Tensor x)", "gated(Tensor x, Tensor g)").replace("maximum(x, 0)", "x * g")
    assert _shape_violations(parse(gated, "gated")) == [1]  # a pointwise op checks g broadcasts to same(x)


def test_conditions_select_and_have_no_derivative():
    """where(cond, a, b) differentiates a and b only, whatever the condition: comparisons, and/or/not, isfinite."""
    from opgen import expr as E
    from opgen.derivatives import derivative

    e = E.parse_expr("where(isfinite(x) and not (x > w) or x == 0, x * x, w * x)")
    assert E.unparse(derivative(e, "x")) == "where(isfinite(x) and not x > w or x == 0, x + x, w)"


def test_softplus_inside_derives_through_sigmoid():
    """d log1p(exp(v)) = sigmoid(v) dv: the textbook exp(v) / (1 + exp(v)) is NaN once exp(v) overflows
    (mish at x = 100 in float32), where torch's own mish and softplus give 1."""
    from opgen import expr as E
    from opgen.derivatives import derivative

    assert E.unparse(derivative(E.parse_expr("log1p(exp(2 * x))"), "x")) == "sigmoid(2 * x) * 2"
    assert E.unparse(derivative(E.parse_expr("log1p(x * x)"), "x")) == "(x + x) / (1 + x * x)"


def test_inputs_read_only_through_rounding_or_conditions_get_a_zero_gradient():
    """`gradient: auto` gives such an input the formula 0 (differentiable, zeros, as torch.round's
    gradient), not "not implemented"; fmod and remainder pass -trunc / -floor of the quotient to b."""
    from opgen import expr as E
    from opgen.derivatives import derived_formulas, derivative, zero_gradient_inputs

    spec = ("signature: snap(Tensor x, Tensor step, Tensor m) -> Tensor\ndtypes: [float32]\nshape: broadcast(x, step, m)\n"
            "kernel:\n  pointwise: where(m > 0, round(x / step) * step, x)\ngradient: auto\n")
    op = parse(spec, "snap")
    formulas = {n: E.unparse(f) for n, f in derived_formulas(op)}
    assert formulas == {"x": "grad * where(m > 0, 0, 1)", "step": "grad * where(m > 0, round(x / step), 0)", "m": "0"}
    assert zero_gradient_inputs(op) == ("m",)
    assert E.unparse(derivative(E.parse_expr("fmod(x, y)"), "y")) == "-trunc(x / y)"
    assert E.unparse(derivative(E.parse_expr("remainder(x, y)"), "y")) == "-floor(x / y)"
    assert E.unparse(derivative(E.parse_expr("abs(x) + sign(x)"), "x")) == "sign(x)"


def test_test_values_default_to_the_domain_of_the_functions_an_input_is_passed_to():
    """Without test.ranges, [-3, 3] narrows to the domains of the functions taking an input
    directly, intersected; composite arguments (log(x + 1)) keep it, and the generic suite's
    test_test_values_lie_in_the_ops_domain says what to set."""
    from opgen.testing import input_range

    def ranges(kernel, test=""):
        spec = (f"signature: f(Tensor x, Tensor y) -> Tensor\ndtypes: [float32]\nshape: broadcast(x, y)\n"
                f"kernel:\n  pointwise: {kernel}\n{test}")
        op = parse(spec, "f")
        return input_range(op, "x"), input_range(op, "y")

    assert ranges("asin(x) + y") == ((-0.9, 0.9), (-3.0, 3.0))
    assert ranges("log(x) + acos(x) * log1p(y)") == ((0.1, 0.9), (-0.9, 3.0))
    assert ranges("x ** 0.5 + pow(y, x)") == ((0.1, 3.0), (0.1, 3.0))
    assert ranges("x ** 2 + pow(y, 3)") == ((-3.0, 3.0), (-3.0, 3.0))  # integer powers take any sign
    assert ranges("log(x + 1) + y") == ((-3.0, 3.0), (-3.0, 3.0))
    assert ranges("asin(x) + y", "test:\n  ranges: {x: [-2, 2]}\n") == ((-2.0, 2.0), (-3.0, 3.0))


@pytest.mark.parametrize("formula, message", [
    ("grad.mm(w) * s[1]", None),
    ("grad.mm(w) * s", "'s' is a list (2 elements); read one element, e.g. s[0]"),
    ("grad.mm(w) * s[2]", "index 2 is out of range: 's' has 2 element(s), s[0] to s[1]"),
    ("grad.mm(w) * s[-1]", "an index must be a literal integer from 0 to 1, e.g. s[0]"),
    ("grad.mm(w) * u[0]", "only a sized list attribute can be indexed"),
])
def test_handwritten_formulas_read_list_elements(formula, message):
    text = LINEAR.replace("Tensor? bias=None)", "Tensor? bias=None, *, float[2] s=[1.0, 2.0], float[] u=[1.0])").replace(
        "  x: grad.mm(w)", f"  x: {formula}")
    if message is None:
        op = parse(text, "linear")
        (f,) = [f for n, f in op.gradient.tensor_formulas if n == "x"]
        assert f.text == formula and f.indexed() == {"s"}
        assert parse(yaml.safe_dump(op.to_dict(), sort_keys=False), "linear") == op
        return
    assert message in error(text, "linear").message
