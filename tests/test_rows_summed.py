"""csrc/kernels/rows_summed.cpp: the driver of the backwards by rows, compiled once per CPU
capability for the library (not in each op's kernel file), written only when an op's backward
goes by rows, instantiated for the dtypes those take. The numbers are tested by the generic
suite (`test_broadcast_gradients_summed_row_by_row`)."""

from __future__ import annotations

import textwrap

from opgen.generate import generate_files
from opgen.library import Library
from opgen.model import OpSpec
from opgen.yaml_source import load_spec_source

ROWS = "csrc/kernels/rows_summed.cpp"


def _op(name: str, text: str) -> OpSpec:
    return OpSpec.parse(load_spec_source(f"specs/{name}.yaml", textwrap.dedent(text).encode()))


def _files(*ops: OpSpec) -> dict[str, str]:
    return generate_files(Library(namespace="opgen_ops", ops=ops, build_dir_from_python="../../../build"))


def _scale(dtypes: str) -> OpSpec:
    return _op("scale", f"""\
        signature: scale(Tensor x, Tensor s) -> Tensor
        dtypes: {dtypes}
        shape: broadcast(x, s)
        kernel:
          pointwise: x * s
        gradient: auto
        """)


SQUARE = _op("square", """\
    signature: square(Tensor x) -> Tensor
    dtypes: [floating]
    shape: same(x)
    kernel:
      pointwise: x * x
    gradient: auto
    """)


def test_written_for_the_dtypes_of_backwards_by_rows():
    files = _files(_scale("[float32, bfloat16]"), SQUARE)
    rows = files[ROWS]
    assert "template void rows_summed<float>(" in rows and "rows_summed<double>" not in rows
    # the op's kernel file calls it and does not compile it
    kernel = files["csrc/kernels/scale_cpu.cpp"]
    assert "opgen::rows_summed<scalar_t>(" in kernel and "void rows_summed" not in kernel
    assert "T* const*)> row);" in files["csrc/opgen_math.h"]  # declared there, not defined
    assert ROWS in files["opgen-manifest.json"]
    both = _files(_scale("[floating]"))[ROWS]
    assert both.index("rows_summed<float>(") < both.index("rows_summed<double>(")


def test_not_written_without_a_backward_by_rows():
    # one input (nothing broadcasts against it), half precision only (not taken by rows)
    for ops in [(SQUARE,), (_scale("[float16, bfloat16]"),)]:
        files = _files(*ops)
        assert ROWS not in files and ROWS not in files["opgen-manifest.json"]
