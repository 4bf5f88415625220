"""`let:` names sub-expressions: what reads a let reads its expression, checked where it is written."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from opgen.errors import SpecError
from opgen.model import OpSpec
from opgen.yaml_source import load_spec_source

ROOT = Path(__file__).resolve().parent.parent

LET = """\
signature: softplus(Tensor x, Tensor? bias=None, *, float beta=1.0, float threshold=20.0) -> Tensor
dtypes: [floating]
shape: broadcast(x, bias)
checks: ["inv_beta < 1e30"]
let:
  inv_beta: 1 / beta
  u: where(bias is None, x, x + bias)
  bu: beta * u
  big: bu > threshold
kernel:
  pointwise: where(big, u, log1p(exp(bu)) * inv_beta)
gradient:
  x: where(big, grad, grad * sigmoid(bu))
  bias: where(big, grad, grad * sigmoid(bu))
"""

WRITTEN_OUT = """\
signature: softplus(Tensor x, Tensor? bias=None, *, float beta=1.0, float threshold=20.0) -> Tensor
dtypes: [floating]
shape: broadcast(x, bias)
checks: ["1 / beta < 1e30"]
kernel:
  pointwise: >-
    where(beta * where(bias is None, x, x + bias) > threshold, where(bias is None, x, x + bias),
          log1p(exp(beta * where(bias is None, x, x + bias))) * (1 / beta))
gradient:
  x: where(beta * where(bias is None, x, x + bias) > threshold, grad, grad * sigmoid(beta * where(bias is None, x, x + bias)))
  bias: where(beta * where(bias is None, x, x + bias) > threshold, grad, grad * sigmoid(beta * where(bias is None, x, x + bias)))
"""


def parse(text: str, path: str = "specs/softplus.yaml") -> OpSpec:
    return OpSpec.parse(load_spec_source(path, textwrap.dedent(text).encode()))


def error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse(text)
    return info.value


def test_a_let_is_its_expression_written_out():
    op, written = parse(LET), parse(WRITTEN_OUT)
    assert op == written
    assert op.kernel.text == written.kernel.text  # what docs and generated comments show
    assert op.to_dict() == written.to_dict()  # the round trip writes the expressions out


def test_shipped_specs_with_lets_are_their_written_out_forms():
    """bias_gelu and softplus use lets; the op they define is the one their expressions written out define."""
    text = (ROOT / "specs" / "bias_gelu.yaml").read_text()
    u = "where(bias is None, x, x + bias)"
    assert f"  u: {u}\n" in text
    written = text.replace(f"let:\n  u: {u}\n", "").replace("pointwise: 0.5 * u * (1 + tanh(0.7978845608028654 * u * (1 + 0.044715 * u * u)))",
                                                            f"pointwise: 0.5 * {u} * (1 + tanh(0.7978845608028654 * {u} * (1 + 0.044715 * {u} * {u})))")
    assert parse(text, "specs/bias_gelu.yaml") == parse(written, "specs/bias_gelu.yaml")
    assert parse(text, "specs/bias_gelu.yaml").kernel.text.count(u) == 4


LET_BLOCK = LET[LET.index("let:"):LET.index("kernel:")]
CASES = [
    # (replace this, with this, line, col, message fragment)
    ("  u: where(bias is None, x, x + bias)", "  u: x + bias", 7, 10, "'bias' may be None here"),
    ("  big: bu > threshold", "  big: bu > threshold\n  unused: x * 2", 10, 3, "let 'unused' is never used; use it in an expression or remove it"),
    ("  u: where(", "  x: where(", 7, 3, "can't name a let 'x': an argument of the signature has that name"),
    ("  u: where(", "  grad: where(", 7, 3, "can't name a let 'grad': expressions already use that name"),
    ("  u: where(", "  exp: where(", 7, 3, "can't name a let 'exp': exp() is a function"),
    ("  u: where(", "  lambda: where(", 7, 3, "can't name a let 'lambda': a let's name is an identifier"),
    ("  inv_beta: 1 / beta", "  inv_beta: 1 / beta + u", 6, 24, "unknown name 'u' in let 'inv_beta'; known names: beta, bias, threshold, x; 'u' is a let below this one"),
    ("  inv_beta: 1 / beta", "  inv_beta: 1 / inv_beta", 6, 17, "a let can't read itself"),
    ("  inv_beta: 1 / beta", "  inv_beta: grad", 6, 13, "'grad' belongs to gradient formulas"),
    ("  inv_beta: 1 / beta", "  inv_beta: \"'beta'\"", 6, 14, "a let names a number or a condition, not a string"),
    ("pointwise: where(big,", "pointwise: where(bu is None,", 11, 20, "'bu' is a let, a value that is never None"),
    ("pointwise: where(big,", "pointwise: where(u.size(0) > 1,", 11, 20, "'u' is a let, a per-element value"),
    ("pointwise: where(big,", "pointwise: where(bigg,", 11, 20, "unknown name 'bigg' in kernel expression; known names: beta, bias, threshold, x; lets: inv_beta, u, bu, big; did you mean 'big'?"),
    # an error inside a let's expression, found where it is read, points at the use and names the let
    ('checks: ["inv_beta < 1e30"]', 'checks: ["bu < 1e30"]', 4, 11, "tensor 'x' can't be used as a value in a check; use x.size(i), x.dim() or x.numel() (inside let 'bu')"),
    # ... but not when the error is about the expression around the use
    ("pointwise: where(big,", "pointwise: where(bu // 2 > 0,", 11, 20, "'//' is for sizes; use floor(a / b) on tensor values"),
    (LET_BLOCK, "let: {inv_beta: where(beta > 0, 1 / beta, 0)}\n", 5, 33,
     "can't name a let '1 / beta': a let's name is an identifier such as u or scaled_x; the expression of 'inv_beta' was cut at a comma"),
    (LET_BLOCK, "let: [inv_beta]\n", 5, 6, "'let' is a mapping from names to expressions"),
    ("kernel:\n  pointwise: where(big, u, log1p(exp(bu)) * inv_beta)", "kernel:\n  cpu: softplus.cpu.cpp", 5, 1,
     "'let' names sub-expressions of kernel expressions; a hand-written op has none"),
]


@pytest.mark.parametrize("old, new, line, col, message", CASES, ids=[c[4][:40] for c in CASES])
def test_located_let_errors(old, new, line, col, message):
    assert old in LET
    e = error(LET.replace(old, new, 1))
    assert message in e.message, str(e)
    assert (e.location.line, e.location.col) == (line, col), str(e)


def test_lets_in_reductions_skip_the_combine():
    """A custom combine folds its accumulators `a` and `b` alone: a let of that name is for the map."""
    op = parse("""\
        signature: abs_max(Tensor x, int[1] dim, bool keepdim=False) -> Tensor
        dtypes: [floating]
        shape: reduce(x, dim, keepdim)
        let:
          a: abs(x)
        kernel:
          reduce: {map: a, combine: "maximum(a, b)", identity: 0}
        """, "specs/abs_max.yaml")
    assert op.kernel.text == "abs(x)" and op.kernel.combine_text == "maximum(a, b)"
