"""Specs in, generated files out: runs every emitter over a loaded library."""

from __future__ import annotations

import json

from .library import Library
from .model import OpSpec
from .dest import autocast_cpp, autograd_cpp, autograd_custom, autograd_reduction, docs, kernel_cpu, kernel_cuda, op_cpp, python_api, runtime, tests
from .dest import custom
from .dest.files import GeneratedFile, Part

MANIFEST = "opgen-manifest.json"


def op_files(op: OpSpec, lib: Library) -> list[GeneratedFile | Part]:
    """The files of one op, and its parts of library-wide files; they depend on the op and the
    library's settings, not on other ops."""
    autograd = (autograd_reduction if op.is_reduction else autograd_custom if op.is_custom else autograd_cpp).emit(op, lib)
    files = [op_cpp.emit(op, lib, autograd, autocast_cpp.emit(op, lib))]
    if op.is_custom:
        files.append(op_cpp.emit_kernel_header(op, lib))
    else:
        files += kernel_cpu.emit(op, lib)
        files.append(kernel_cuda.emit(op, lib))
    files += python_api.emit_op(op, lib)
    files.append(docs.emit_op(op, lib))
    files.append(tests.emit_op(op, lib, lib.output))
    return files


def generate_files(lib: Library, per_op: dict[str, list[GeneratedFile | Part]] | None = None) -> dict[str, str]:
    """Every generated file by path (relative to the output folder), manifest included.
    ``per_op`` holds ops' output emitted elsewhere (by worker processes)."""
    files: list[GeneratedFile] = []
    sections: dict[str, list[str]] = {}  # the ops' parts of library-wide files, by template
    for op in lib.ops:
        for item in per_op[op.name] if per_op is not None else op_files(op, lib):
            if isinstance(item, Part):
                sections.setdefault(item.template, []).append(item.text)
            else:
                files.append(item)
    files += runtime.emit(lib)
    files += kernel_cpu.emit_rows_summed(sections)
    files += python_api.emit_package(lib, sections)
    files.append(docs.emit_index(lib))
    files.append(tests.emit_conftest(lib))
    out = {f.path: f.content for f in files}
    assert len(out) == len(files), "two emitters produced the same path"
    manifest = {
        "generator": "opgen",
        "note": "Files opgen generated here; `opgen generate` replaces or deletes only these.",
        "namespace": lib.namespace,
        "ops": [op.name for op in lib.ops],
        "sources": sorted(f.file for op in lib.ops if op.is_custom for f in custom.custom(op).files),
        "files": sorted(out),
    }
    out[MANIFEST] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    return dict(sorted(out.items()))
