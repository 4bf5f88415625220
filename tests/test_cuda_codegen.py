"""CUDA code generation without a GPU: every expression function has a device overload, every op
gets a .cu file, and `opgen build --cuda on` explains why it cannot build on a CPU-only torch.
Compiling and linking the CUDA extension is .ci/cuda's job (it needs a CUDA build of torch)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from opgen.cli import main
from opgen.functions import FUNCTIONS

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "generated" / "csrc"


def _defined(header: Path) -> set[str]:
    text = header.read_text()
    return set(re.findall(r"OPGEN_(?:UNARY|BINARY)\((\w+),", text)) | set(re.findall(r"inline (?:T|auto|bool) (\w+)\(", text))


def test_every_kernel_function_has_cpu_and_cuda_overloads():
    kernel_functions = set(FUNCTIONS) | {"logical_and", "logical_or", "logical_not"}
    assert kernel_functions <= _defined(CSRC / "opgen_math.h")
    assert kernel_functions <= _defined(CSRC / "opgen_math_cuda.cuh"), kernel_functions - _defined(CSRC / "opgen_math_cuda.cuh")


def test_every_op_has_a_cuda_translation_unit_registered_under_the_cuda_key():
    from opgen.config import load_config
    from opgen.library import load_library

    for op in load_library(load_config(ROOT)).ops:
        registration = (CSRC / "ops" / f"{op.name}.cpp").read_text()
        if op.is_custom:  # hand-written: registered for CUDA when the spec names a .cu file
            cuda = op.kernel.cuda is not None
            assert ("TORCH_LIBRARY_IMPL(opgen_ops, CUDA, m)" in registration) == cuda, op.name
            assert not (CSRC / "kernels" / f"{op.name}_cuda.cu").exists()
            continue
        cu = (CSRC / "kernels" / f"{op.name}_cuda.cu").read_text()
        assert "c10::cuda::CUDAGuard" in cu
        assert "#if defined(OPGEN_WITH_CUDA)\nTORCH_LIBRARY_IMPL(opgen_ops, CUDA, m)" in registration
        if op.is_reduction:
            assert f"void {op.name}_kernel(at::TensorIterator& _iter" in cu and "at::native::gpu_reduce_kernel" in cu
            continue
        assert f"void {op.name}_kernel(at::TensorIteratorBase& _iter" in cu and "at::native::gpu_kernel" in cu
        if (CSRC / "autograd" / f"{op.name}.cpp").is_file():
            assert f"void {op.name}_backward_kernel(" in cu


@pytest.mark.skipif(torch.version.cuda is not None, reason="this torch can build CUDA kernels")
def test_build_cuda_on_a_cpu_torch_exits_2_saying_why(tmp_path, capsys):
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "cudaless"\n')
    shutil.copy(ROOT / "specs" / "relu.yaml", root / "specs")
    assert main(["--project", str(root), "generate"]) == 0
    assert main(["--project", str(root), "build", "--cuda", "on"]) == 2
    err = capsys.readouterr().err
    assert "cannot build the CUDA kernels" in err and "CPU build" in err and "torch==2.14.1" in err
    assert not (root / "build" / "cuda" / "libcudaless.so").exists()


@pytest.mark.parametrize("archs, gencode", [
    ("90", ["arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"]),
    ("80; 90a", ["arch=compute_80,code=sm_80", "arch=compute_90a,code=sm_90a", "arch=compute_90a,code=compute_90a"]),
    ("compute_90", ["arch=compute_90,code=compute_90"]),
    ("80,compute_90", ["arch=compute_80,code=sm_80", "arch=compute_90,code=compute_90"]),
])
def test_cuda_archs_select_sass_and_ptx(archs, gencode):
    from opgen.build import cuda_gencode

    assert cuda_gencode(archs) == [f"-gencode={g}" for g in gencode]


@pytest.mark.parametrize("archs", ["", "9.0", "sm_90", "90;x", "compute_"])
def test_unreadable_cuda_archs_name_the_entry(archs):
    from opgen.build import cuda_gencode
    from opgen.errors import OpgenError

    with pytest.raises(OpgenError, match="OPGEN_CUDA_ARCHS=.*can't read"):
        cuda_gencode(archs)
