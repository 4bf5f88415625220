"""Library-wide C++: runtime and math headers, the precompiled headers, TORCH_LIBRARY."""

from __future__ import annotations

from ..dtypes import DTYPES
from ..library import Library
from ..render import render
from .files import GeneratedFile


def emit(lib: Library) -> list[GeneratedFile]:
    return [
        GeneratedFile("csrc/opgen_runtime.h", render("csrc/opgen_runtime.h.j2", dtypes=list(DTYPES.values()))),
        GeneratedFile("csrc/opgen_math.h", render("csrc/opgen_math.h.j2")),
        GeneratedFile("csrc/opgen_reduce.h", render("csrc/opgen_reduce.h.j2")),
        GeneratedFile("csrc/opgen_math_cuda.cuh", render("csrc/opgen_math_cuda.cuh.j2")),
        GeneratedFile("csrc/opgen_pch.h", render("csrc/opgen_pch.h.j2")),
        GeneratedFile("csrc/opgen_kernel_pch.h", render("csrc/opgen_kernel_pch.h.j2")),
        GeneratedFile("csrc/opgen_autograd.h", render("csrc/opgen_autograd.h.j2")),
        GeneratedFile("csrc/library.cpp", render("csrc/library.cpp.j2", ns=lib.namespace)),
    ]
