"""Function-schema parsing: the signature language of native_functions.yaml."""

from __future__ import annotations

import pytest

from opgen.schema import FunctionSchema, SchemaError

ROUND_TRIP = [
    "weighted_sum(Tensor a, Tensor b, *, float weight=1.0) -> Tensor",
    "relu(Tensor x) -> Tensor",
    "gelu(Tensor x, *, str approximate='tanh') -> Tensor",
    "f(Tensor x, int[2] dims=[0, 1], bool keepdim=False, float? eps=None, Scalar s=2) -> Tensor",
    "g(Tensor x, Tensor[] xs, Tensor? bias=None, SymInt n=3) -> (Tensor values, Tensor indices)",
    "h(Tensor(a!) x, float[] w=[0.5, 2.0], int k=-1, float lo=-1e-06) -> Tensor",
    "l(Tensor x, int[1]? dim=None, float[]? v=None, SymInt[]? s=None, bool[3] mask=[True, False, True], str? how=None) -> Tensor",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(text):
    schema = FunctionSchema.parse(text)
    assert FunctionSchema.parse(str(schema)) == schema
    assert str(FunctionSchema.parse(str(schema))) == str(schema)


def test_parts():
    s = FunctionSchema.parse("weighted_sum(Tensor a, Tensor b, *, float weight=1.0) -> Tensor")
    assert s.name == "weighted_sum"
    assert [a.name for a in s.tensor_inputs] == ["a", "b"]
    (w,) = s.attributes
    assert (w.name, w.type.base, w.default, w.kwarg_only) == ("weight", "float", 1.0, True)


@pytest.mark.parametrize(
    "text, col, message",
    [
        ("f(Tensor x -> Tensor", 11, "expected ',' or ')'"),
        ("f(Tensr x) -> Tensor", 2, "unknown type 'Tensr'; types are Tensor, int, float, bool, str, Scalar, SymInt; did you mean 'Tensor'?"),
        ("f(Tensor x, Tensor x) -> Tensor", 12, "duplicate argument name 'x'"),
        ("f(Tensor class) -> Tensor", 9, "invalid argument name 'class'"),
        ("f(Tensor x) -> int", 15, "ops return tensors"),
        ("f(Tensor x, float w=abc) -> Tensor", 20, "a float default must be a number"),
        ("f(Tensor x, bool b=1) -> Tensor", 19, "a bool default must be True or False"),
        ("f(Tensor x, float w=None) -> Tensor", 20, "default None needs an optional type"),
        ("f(Tensor x, str s='a\"b') -> Tensor", 18, "a str default may contain only letters"),
        ("f(Tensor x, *) -> Tensor", 12, "'*' must be followed by keyword-only arguments"),
        ("f(Tensor x) Tensor", 12, "expected '->'"),
        ("f.out(Tensor x) -> Tensor", 0, "overload names"),
        ("f(Tensor x, float w=1.0, Tensor y) -> Tensor", 25, "without a default follows one with a default"),
        ("f(Tensor x) -> Tensor; system('x')", 21, "unexpected character ';'"),
        ("f(Tensor __x) -> Tensor", 9, "names must start with a letter"),
        ("f(Tensor x, float hi=inf) -> Tensor", 21, "a float default must be 0 or a normal double, found 'inf'"),
        ("f(Tensor x, Scalar lo=-inf) -> Tensor", 22, "a Scalar default must be 0 or a normal double, found '-inf'"),
        ("f(Tensor x, float w=1e-400) -> Tensor", 20, "for no bound use a large number such as 1e30"),
        ("f(Tensor x, float w=1e-310) -> Tensor", 20, "(PyTorch reads defaults with std::stod"),
        ("f(Tensor x, float w=1.8e308) -> Tensor", 20, "a float default must be 0 or a normal double"),
        ("f(Tensor x, int k=9223372036854775808) -> Tensor", 18, "an int default must fit in int64, found '9223372036854775808'"),
        ("f(Tensor x, Scalar k=-9223372036854775809) -> Tensor", 21, "a Scalar default must fit in int64"),
        ("f(Tensor x, int[2] k=[1, 99999999999999999999]) -> Tensor", 25, "(PyTorch reads defaults with std::stoll"),
        ("f(Tensor x, bool[] m) -> Tensor", 12, "a bool list needs a fixed size and can't be optional, as ATen's 'bool[3] output_mask'"),
        ("f(Tensor x, bool[2]? m=None) -> Tensor", 12, "a bool list needs a fixed size"),
    ],
)
def test_errors_point_at_the_problem(text, col, message):
    with pytest.raises(SchemaError) as info:
        FunctionSchema.parse(text)
    assert message in info.value.message
    assert info.value.col == col


@pytest.mark.parametrize("argument", ["float w=0e5", "float w=-0.0", "float w=2.2250738585072014e-308",
                                      "float w=1.7976931348623157e308", "float w=1e30", "float w=.5",
                                      "int k=-9223372036854775808", "int k=9223372036854775807", "Scalar s=-9223372036854775808"])
def test_defaults_that_torch_reads_are_accepted(argument):
    """The edges of what torch's schema parser (std::stod, std::stoll) takes, checked against torch itself."""
    import torch

    text = f"f(Tensor x, {argument}) -> Tensor"
    default = FunctionSchema.parse(text).attributes[0].default
    literal = argument.split("=")[1]
    assert (default, type(default)) == ((float(literal), float) if "float" in argument else (int(literal), int))
    torch._C.parse_schema(str(FunctionSchema.parse(text)))


@pytest.mark.parametrize("text, cpp_type", [
    ("int[1]?", "at::OptionalIntArrayRef"),
    ("SymInt[]?", "at::OptionalSymIntArrayRef"),
    ("float[]?", "std::optional<at::ArrayRef<double>>"),  # as torchgen: the dispatcher knows no OptionalArrayRef<double>
    ("float[]", "at::ArrayRef<double>"),
    ("bool[2]", "std::array<bool, 2>"),
    ("Scalar?", "const std::optional<at::Scalar>&"),
])
def test_cpp_types_are_the_dispatchers(text, cpp_type):
    from opgen.api import cpp

    (arg,) = FunctionSchema.parse(f"f(Tensor x, *, {text} a) -> Tensor").attributes
    assert cpp.argument_type(arg.type) == cpp_type
