"""Spec validation: every rejection is located (path:line:col) and says how to fix it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from opgen import expr as E
from opgen.errors import SpecError
from opgen.model import OpSpec
from opgen.yaml_source import load_spec_source

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
signature: weighted_sum(Tensor a, Tensor b, *, float weight=1.0) -> Tensor
doc: Fused `weight * a + b` with NumPy-style broadcasting.
dtypes: [float32, float64, float16, bfloat16]
shape: broadcast(a, b)
kernel:
  pointwise: weight * a + b
gradient:
  a: grad * weight
  b: grad
"""


def parse(text: str, path: str = "specs/weighted_sum.yaml") -> OpSpec:
    return OpSpec.parse(load_spec_source(path, textwrap.dedent(text).encode()))


def error(text: str, path: str = "specs/weighted_sum.yaml") -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(text, path)
    return info.value


def test_issue_example_parses():
    op = parse(GOOD)
    assert op.name == "weighted_sum"
    assert [d.name for d in op.dtypes] == ["float32", "float64", "float16", "bfloat16"]
    assert str(op.shape) == "broadcast(a, b)"
    assert op.kernel.text == "weight * a + b"
    assert [n for n, _ in op.gradient.formulas] == ["a", "b"]


@pytest.mark.parametrize("spec", sorted((ROOT / "specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_round_trip(spec):
    op = OpSpec.parse(load_spec_source(f"specs/{spec.name}", spec.read_bytes()))
    again = OpSpec.parse(load_spec_source(f"specs/{spec.name}", yaml.safe_dump(op.to_dict(), sort_keys=False).encode()))
    assert again == op
    assert again.to_dict() == op.to_dict()


def test_groups_expand_in_canonical_order():
    op = parse(GOOD.replace("[float32, float64, float16, bfloat16]", "[bfloat16, floating]"))
    assert [d.name for d in op.dtypes] == ["float32", "float64", "float16", "bfloat16"]


CASES = [
    # (replace this, with this, line, col, message fragment)
    ("kernel:", "kernal:", 5, 1, "unknown key 'kernal'; allowed keys: signature, doc, dtypes, shape, checks, let, kernel, gradient, variants, autocast, reference, test; did you mean 'kernel'?"),
    ("  pointwise:", "  pointwize:", 6, 3, "did you mean 'pointwise'?"),
    ("pointwise: weight * a + b", "pointwise: weight * a + c", 6, 27, "unknown name 'c' in kernel expression; known names: a, b, weight"),
    ("pointwise: weight * a + b", "pointwise: wieght * a + b", 6, 14, "did you mean 'weight'?"),
    ("pointwise: weight * a + b", "pointwise: weight * expp(a) + b", 6, 23, "unknown function 'expp'"),
    ("pointwise: weight * a + b", "pointwise: weight * a +", 6, 26, "invalid expression syntax"),
    ("pointwise: weight * a + b", "pointwise: __import__('os')", 6, 14, "unknown function '__import__'"),
    ("pointwise: weight * a + b", "pointwise: a.size(0)", 6, 14, "tensor methods are not available"),
    ("pointwise: weight * a + b", "pointwise: weight * 2", 6, 14, "must use at least one tensor input"),
    ("float16, bfloat16]", "float16, bfloat61]", 3, 37, "unknown dtype 'bfloat61'"),
    ("float16, bfloat16]", "float16, half]", 3, 37, "write 'float16' instead of 'half'"),
    ("float16, bfloat16]", "float16, int32]", 3, 9, "pointwise kernels compute in floating point"),
    ("broadcast(a, b)", "broadcast(a, c)", 4, 21, "broadcast() takes tensor inputs"),
    ("broadcast(a, b)", "brodcast(a, b)", 4, 8, "did you mean 'broadcast'?"),
    ("broadcast(a, b)", "same(a, b)", 4, 16, "same() takes one tensor"),
    ("  a: grad * weight", "  c: grad * weight", 8, 3, "'c' is not a tensor input; gradients are for: a, b"),
    ("  a: grad * weight", "  a: grad * weight * undefined", 8, 22, "unknown name 'undefined' in gradient formula"),
    ("  a: grad * weight", "  a: weight", 8, 6, "usually involving grad (write 0 for an input whose gradient is zero)"),
    ("pointwise: weight * a + b", "pointwise: a % b", 6, 14, "write remainder(a, b) (the sign of b, as Python's %) or fmod(a, b)"),
    ("pointwise: weight * a + b", "pointwise: arctan2(a, b)", 6, 14, "did you mean 'atan2'?"),
    ("shape: broadcast(a, b)\n", "shape: broadcast(a, b)\nchecks: ['weight > 0 and sqrt(weight) < 10']\n", 5, 26,
     "checks call no function but isfinite(); compare the values themselves"),
    ("weighted_sum(Tensor a", "weighted_sum(Tensr a", 1, 25, "unknown type 'Tensr'"),
    ("float weight=1.0", "float weight=one", 1, 61, "a float default must be a number"),
    ("float weight=1.0", "float? weight=None", 6, 14, "'weight' may be None here; read it where it is known not to be"),
    # a YAML flow mapping splits an expression at its commas: the error says so
    ("kernel:\n  pointwise: weight * a + b", "kernel: {pointwise: where(a > 0, a, b)}", 5, 34,
     "unknown key 'a'; allowed keys: pointwise, reduce, cpu, cuda; the expression of 'pointwise' was cut at a comma"),
    ("  a: grad * weight\n  b: grad", "  {a: where(a > 0, grad, 0), b: grad}", 8, 20,
     "'grad' is not a tensor input; gradients are for: a, b; the expression of 'a' was cut at a comma"),
]


@pytest.mark.parametrize("old, new, line, col, message", CASES, ids=[c[4][:40] for c in CASES])
def test_located_errors(old, new, line, col, message):
    assert old in GOOD
    e = error(GOOD.replace(old, new, 1))
    assert message in e.message
    assert (e.location.line, e.location.col) == (line, col), str(e)
    assert str(e).startswith(f"specs/weighted_sum.yaml:{line}:{col}: ")


def test_name_must_match_file():
    e = error(GOOD, path="specs/other.yaml")
    assert e.message.endswith("op name 'weighted_sum' must equal the file name 'other'; rename the file to "
                              "weighted_sum.yaml or the op to other")
    assert (e.location.line, e.location.col) == (1, 12)
    # a stem that is no valid op name is not offered as one
    e = error(GOOD, path="specs/Weighted-Sum.yaml")
    assert e.message.endswith("the file name 'Weighted-Sum'; rename the file to weighted_sum.yaml"), e.message


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("signature: [1, 2]\ndtypes: [float32]\nshape: same(x)\nkernel: {pointwise: x}\n", 1, "'signature' must be a string"),
        ("- a\n- b\n", 1, "a spec must be a mapping"),
        ("signature: x(Tensor a) -> Tensor\nsignature: y\n", 2, "duplicate key 'signature' (first defined at line 1)"),
        ("signature: 'unterminated\n", 2, "invalid YAML"),
        ("signature: x(Tensor a, int[2] p) -> Tensor\nshape: [a.size(0) + p[0]]\n", 2,
         "invalid YAML: did not find expected ',' or ']'; quote an expression with brackets inside a [...] list"),
        ("signature: x(Tensor a) -> Tensor\n", 1, "missing required key 'dtypes'"),
        ("a: &x [1]\nb: *x\n<<: {c: 1}\n", 3, "mapping keys must be plain strings"),
    ],
)
def test_document_errors(text, line, message):
    e = error(text, path="specs/x.yaml")
    assert message in e.message
    assert e.location.line == line


def test_non_utf8_is_located():
    with pytest.raises(SpecError) as info:
        load_spec_source("specs/x.yaml", b"signature: ok\ndoc: caf\xe9\n")
    assert (info.value.location.line, info.value.location.col) == (2, 9)
    assert "UTF-8" in info.value.message


def test_checks_must_be_conditions():
    e = error(GOOD.replace("kernel:", "checks: [\"weight + 1\"]\nkernel:"))
    assert "a check must be a condition" in e.message
    e = error(GOOD.replace("kernel:", "checks: [\"weight > a\"]\nkernel:"))
    assert "tensor 'a' can't be used as a value in a check" in e.message
    op = parse(GOOD.replace("kernel:", "checks: [\"weight > 0\", \"a.dim() >= 1 and a.size(-1) == b.size(-1)\"]\nkernel:"))
    assert [c.text for c in op.checks] == ["weight > 0", "a.dim() >= 1 and a.size(-1) == b.size(-1)"]


def test_explicit_shape_rule():
    op = parse(GOOD.replace("broadcast(a, b)", "[a.size(0), b.size(-1)]"))
    assert str(op.shape) == "[a.size(0), b.size(-1)]"
    e = error(GOOD.replace("broadcast(a, b)", "[a.size(0), weight]"))
    assert "a size must be an integer expression" in e.message


def test_reference_is_validated():
    e = error(GOOD + "reference: os.system('x')\n")
    assert "unknown name 'os' in reference" in e.message
    e = error(GOOD + "reference: a.__class__\n")
    assert "private attributes" in e.message
    op = parse(GOOD + "reference: torch.add(b, a, alpha=weight)\n")
    assert op.reference == "torch.add(b, a, alpha=weight)"


def test_test_ranges():
    op = parse(GOOD + "test:\n  ranges:\n    a: [0.1, 2]\n")
    assert op.test.range("a") == (0.1, 2.0)
    e = error(GOOD + "test:\n  ranges:\n    a: [2, 1]\n")
    assert "low < high" in e.message and e.location.line == 12


@pytest.mark.parametrize("name", ["ops", "Tensor", "return_types"])
def test_op_names_the_python_package_defines_are_refused(name):
    e = error(GOOD.replace("weighted_sum(", f"{name}("), path=f"specs/{name}.yaml")
    assert f"invalid op name '{name}': '{name}' is a name the generated Python package defines" in e.message


def test_zero_gradient_formula():
    """`0` says an input is differentiable with a zero gradient (as torch.round's); it round-trips
    and the backward leaves it to the node (no fused output, no tangent term)."""
    from opgen.dest import backward

    op = parse(GOOD.replace("  a: grad * weight", "  a: 0"))
    assert [(n, E.unparse(f)) for n, f in op.gradient.formulas] == [("a", "0"), ("b", "grad")]
    assert OpSpec.parse(load_spec_source(op.path, yaml.safe_dump(op.to_dict(), sort_keys=False).encode())) == op
    plan = backward.plan(op)
    assert plan.zeros == ("a",) and plan.differentiated == ("b",) and plan.fused == () and plan.computed == ()


def test_gradient_of_an_optional_input_reads_its_given_branch():
    """The gradient of a Tensor? input exists only where it is given: d/db of `where(b is None, ...)`
    is the second branch's, so bias_gelu's formulas for x and bias are the same."""
    from opgen.derivatives import derivative
    from opgen.dest import backward

    def d(text, x):
        return E.unparse(derivative(E.parse_expr(text), x))

    assert d("where(b is None, a, a * b)", "b") == "a"
    assert d("where(not (b is None), a * b, a)", "b") == "a"
    assert d("where(b is None, a, a * b)", "a") == "where(b is None, 1, b)"  # a's gradient exists either way
    plan = backward.plan(OpSpec.parse(load_spec_source("specs/bias_gelu.yaml", (ROOT / "specs" / "bias_gelu.yaml").read_bytes())))
    assert plan.formulas[0] == plan.formulas[1]


def test_inputs_with_the_same_gradient_formula_share_one_kernel_output():
    """bias_gelu's x and bias, actnorm's x and bias: one buffer, the second summed from it; the
    kernel stores per buffer whether one of its inputs was asked for."""
    from opgen.dest import backward

    def plan(name):
        return backward.plan(OpSpec.parse(load_spec_source(f"specs/{name}.yaml", (ROOT / "specs" / f"{name}.yaml").read_bytes())))

    bias_gelu, actnorm, to_cartesian = plan("bias_gelu"), plan("actnorm"), plan("to_cartesian")
    assert bias_gelu.fused == (0, 1) and bias_gelu.kernel_outputs == (0,) and bias_gelu.sharing(0) == (0, 1)
    assert bias_gelu.masked and not bias_gelu.kernel_masked and len(bias_gelu.kernel_formulas) == 1
    assert actnorm.kernel_outputs == (0, 2) and [actnorm.buffer(k) for k in range(3)] == [0, 0, 2]
    assert actnorm.store_mask == "std::array<bool, 2>{output_mask[0] || output_mask[1], output_mask[2]}"
    assert to_cartesian.kernel_outputs == to_cartesian.fused and to_cartesian.store_mask == "output_mask"


STE = GOOD.replace("pointwise: weight * a + b", "pointwise: weight * round(a) + b") + """\
reference: weight * (a + (torch.round(a) - a).detach()) + b
test:
  surrogate: [a]
"""


def test_surrogate_gradient_round_trips():
    op = parse(STE)
    assert op.test.surrogate == ("a",)
    assert OpSpec.parse(load_spec_source(op.path, yaml.safe_dump(op.to_dict(), sort_keys=False).encode())) == op


@pytest.mark.parametrize("old, new, line, col, message", [
    ("surrogate: [a]", "surrogate: a", 12, 14, "'surrogate' lists tensor inputs whose gradient is not the kernel's derivative"),
    ("surrogate: [a]", "surrogate: [c]", 12, 15, "'c' has no gradient formula of its own"),
    ("reference: weight * (a + (torch.round(a) - a).detach()) + b\n", "", 11, 14,
     "a surrogate gradient is checked against the reference's autograd: give a 'reference'"),
])
def test_surrogate_gradient_errors(old, new, line, col, message):
    assert old in STE
    e = error(STE.replace(old, new, 1))
    assert message in e.message
    assert (e.location.line, e.location.col) == (line, col), str(e)


def test_autocast_policy_round_trips():
    op = parse(GOOD + "autocast: lower_precision\n")
    assert op.autocast == "lower_precision"
    assert op.to_dict()["autocast"] == "lower_precision"
    assert OpSpec.parse(load_spec_source(op.path, yaml.safe_dump(op.to_dict(), sort_keys=False).encode())) == op
    assert parse(GOOD).autocast is None


@pytest.mark.parametrize("value, dtypes, message", [
    ("fp16", "[floating]", "'autocast' says what torch.autocast casts the floating inputs to: lower_precision: autocast's dtype"),
    ("fp16", "[floating]", "did you mean 'lower_precision'?"),
    ("fp23", "[floating]", "did you mean 'fp32'?"),
    ("[fp32]", "[floating]", "'autocast' says what torch.autocast casts"),
    ("lower_precision", "[float32, float64]", "autocast: lower_precision casts the inputs to float16, bfloat16, which 'dtypes' "
                                             "leaves out; add float16 and bfloat16 to 'dtypes'"),
    ("fp32", "[float64]", "autocast: fp32 casts the inputs to float32, which 'dtypes' leaves out"),
])
def test_autocast_errors(value, dtypes, message):
    e = error(GOOD.replace("[float32, float64, float16, bfloat16]", dtypes) + f"autocast: {value}\n")
    assert message in e.message, e.message
    assert (e.location.line, e.location.col) == (10, 11), str(e)


@pytest.mark.parametrize("declared, message", [
    ("float[2] weight=[1.0, 2.0]", None),
    ("float[] weight=[1.0]", "'weight' is a list without a size (float[]); declare one to read its elements, e.g. float[2] weight, then weight[0]"),
    ("float[2]? weight=None", "'weight' (float[2]?) can't be used in an expression; elements of sized float, int and bool lists can"),
    ("SymInt[2] weight=[1, 2]", "'weight' (SymInt[2]) holds sizes, which checks and shape rules read (weight[0]); a kernel reads an int[2]"),
    ("SymInt[] weight=[1]", "'weight' is a list without a size (SymInt[])"),
])
def test_list_elements_in_expressions(declared, message):
    text = GOOD.replace("float weight=1.0", declared).replace("weight * a + b", "weight[0] * a + b").replace(
        "grad * weight", "grad * weight[0]")
    if message is None:
        op = parse(text)
        assert E.unparse(op.kernel.expr) == "weight[0] * a + b"
        assert parse(yaml.safe_dump(op.to_dict(), sort_keys=False)) == op
        return
    e = error(text)
    assert message in e.message and (e.location.line, e.location.col) == (6, 14), str(e)


@pytest.mark.parametrize("value", ["none", "None", "null", "false"])
def test_no_gradient_is_said_by_leaving_it_out(value):
    e = error(GOOD.replace("gradient:\n  a: grad * weight\n  b: grad\n", f"gradient: {value}\n"))
    assert "to say the op has no gradient, leave 'gradient' out" in e.message and e.location.line == 7, str(e)


def test_optional_attributes_that_expressions_cannot_read():
    text = GOOD.replace("float weight=1.0", "SymInt? weight=None").replace("weight * a + b", "where(weight is None, a, a + b)")
    e = error(text)
    assert "'weight' (SymInt?) can't be used in an expression; optional float, Scalar, int, bool and str attributes can" in e.message
    op = parse(GOOD.replace("float weight=1.0", "Scalar? weight=None").replace("weight * a + b", "where(weight is None, a, weight * a) + b")
               .replace("grad * weight", "where(weight is None, grad, grad * weight)"))
    assert E.unparse(op.kernel.expr) == "where(weight is None, a, weight * a) + b"


def test_test_values_of_list_attributes():
    from opgen import testing

    op = parse("""\
        signature: f(Tensor a, *, int[2] k=1, float[2] c=[0.5, 2.0]) -> Tensor
        dtypes: [float64]
        shape: same(a)
        checks: ["c[0] < c[1]", "k[0] > 0"]
        kernel: {pointwise: "a * k[0] + c[1] - c[0]"}
        """, "specs/f.yaml")
    sets = testing.attribute_sets(op, limit=8)
    assert sets[0] == {"k": (1, 1), "c": (0.5, 2.0)}  # `int[2] k=1` as the dispatcher expands it
    assert all(s["c"][0] < s["c"][1] and s["k"][0] > 0 for s in sets) and len({s["k"] for s in sets}) > 1
    # elements differ, so each check has a violation to try
    assert [check for _, check in testing.invalid_attribute_sets(op)] == ["c[0] < c[1]", "k[0] > 0"]


def test_optional_tensors_in_pointwise_ops():
    optional_b = GOOD.replace("Tensor b", "Tensor? b=None")
    op = parse(optional_b.replace("weight * a + b", "where(b is None, weight * a, weight * a + b)")
               .replace("  b: grad", "  b: where(b is None, 0, grad)"))
    assert E.unparse(op.kernel.expr) == "where(b is None, weight * a, weight * a + b)"
    assert OpSpec.parse(load_spec_source("specs/weighted_sum.yaml", yaml.safe_dump(op.to_dict()).encode())) == op
    e = error(optional_b)  # read where it may be None
    assert "'b' may be None here; read it where it is known not to be" in e.message and (e.location.line, e.location.col) == (6, 27)
    e = error(GOOD.replace("Tensor a, Tensor b", "Tensor? a, Tensor b").replace("weight * a + b", "where(a is None, b, a + b)"))
    assert "a pointwise op's first tensor input is a plain 'Tensor'" in e.message and (e.location.line, e.location.col) == (1, 25)
    e = error(optional_b.replace("broadcast(a, b)", "same(b)").replace("weight * a + b", "where(b is None, a, b)"))
    assert "'b' may be None, so the output can't take its shape: use broadcast(..., b)" in e.message
    e = error(optional_b.replace("broadcast(a, b)", "[b.size(0)]").replace("weight * a + b", "where(b is None, a, b)"))
    assert "'b' (Tensor?) may be None, so a shape rule can't read its sizes" in e.message and (e.location.line, e.location.col) == (4, 9)
    e = error(optional_b.replace("broadcast(a, b)\n", "broadcast(a, b)\nchecks: ['b.dim() == 1']\n"))
    assert "'b' may be None here" in e.message and (e.location.line, e.location.col) == (5, 11)
    e = error(GOOD.replace("Tensor b", "Tensor[] b"))
    assert "pointwise kernels take 'Tensor' and 'Tensor?' inputs; 'Tensor[] b' is not supported" in e.message
