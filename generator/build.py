"""`opgen build`: compiles the generated C++ into one shared library with ninja.

Layout of the build folder:
    build.ninja                 written here; ninja does the incremental work
    pch/<CAP>/opgen_pch.h.gch   the precompiled header, one per CPU capability
    obj/<CAP>/...               object files
    lib<namespace>.so           the extension that `opgen.load()` loads

Kernels (csrc/kernels/*_cpu.cpp) are compiled once per CPU capability with ATen's
CPU_CAPABILITY convention; everything else once, for DEFAULT.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import ProjectConfig
from .errors import OpgenError
from .generate import MANIFEST

CAPABILITY_FLAGS = {
    "DEFAULT": ["-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"],
    "AVX2": ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
}


@dataclass(frozen=True)
class BuildResult:
    library: Path
    ran: bool  # ninja had work to do


def variant_dir(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None) -> Path:
    """build/ for the normal build; build/debug or build/sanitize for the others, so switching
    between them never throws away the normal build's objects."""
    if sanitize:
        return config.build_dir / "sanitize"
    return config.build_dir / "debug" if debug else config.build_dir


def library_path(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None) -> Path:
    return variant_dir(config, debug=debug, sanitize=sanitize) / f"lib{config.namespace}.so"


def capabilities() -> list[str]:
    return ["DEFAULT", "AVX2"] if platform.machine() in ("x86_64", "AMD64") else ["DEFAULT"]


def _ninja() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja

        return os.path.join(ninja.BIN_DIR, "ninja")
    except ImportError:
        raise OpgenError("ninja not found; pip install ninja") from None


def _compiler() -> list[str]:
    cxx = shlex.split(os.environ.get("CXX", "c++"))
    if os.environ.get("OPGEN_CCACHE", "1") != "0" and shutil.which("ccache") and "ccache" not in cxx[0]:
        # ccache reuses results with a precompiled header only when told the PCH is safe
        cxx = ["env", "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime", "ccache"] + cxx
    return cxx


def _torch_flags() -> tuple[list[str], list[str]]:
    import torch
    from torch.utils import cpp_extension

    cflags = [f"-isystem{p}" for p in cpp_extension.include_paths()]
    cflags.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    ldflags = []
    for p in cpp_extension.library_paths():
        ldflags += [f"-L{p}", f"-Wl,-rpath,{p}"]
    ldflags += ["-fopenmp", "-lc10", "-ltorch_cpu", "-ltorch"]
    return cflags, ldflags


def _sources(config: ProjectConfig) -> list[str]:
    manifest = config.output_dir / MANIFEST
    if not manifest.is_file():
        raise OpgenError(f"{config.output}/{MANIFEST} not found; run `opgen generate` first")
    files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    return sorted(f for f in files if f.startswith("csrc/") and f.endswith(".cpp"))


def write_ninja(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None) -> Path:
    from ninja import ninja_syntax  # the pip ninja package ships the writer

    build = variant_dir(config, debug=debug, sanitize=sanitize)
    build.mkdir(parents=True, exist_ok=True)
    csrc = (config.output_dir / "csrc").resolve()
    torch_cflags, ldflags = _torch_flags()
    opt = ["-O0", "-g"] if debug else (["-O1", "-g"] if sanitize else ["-O3", "-DNDEBUG"])
    # torch itself is not built with UBSan, so its RTTI can't back the vptr check
    san = [f"-fsanitize={sanitize}", "-fno-sanitize=vptr", "-fno-omit-frame-pointer"] if sanitize else []
    # -fopenmp: at::parallel_for is inline; without it the flat contiguous loops run on one thread
    common = ["-std=c++20", "-fPIC", "-fvisibility=hidden", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-local-typedefs", "-Wno-psabi", "-Wno-maybe-uninitialized",
              "-Werror", *opt, *san, *torch_cflags]
    caps = capabilities()
    have_avx2 = ["-DOPGEN_HAVE_AVX2"] if "AVX2" in caps else []

    import io

    buf = io.StringIO()
    n = ninja_syntax.Writer(buf, width=120)
    n.comment("Written by `opgen build`; rerun it rather than editing this file.")
    n.variable("ninja_required_version", "1.3")
    n.variable("builddir", str(build))  # .ninja_log and .ninja_deps live here, whatever the cwd
    n.variable("cxx", " ".join(shlex.quote(c) for c in _compiler()))
    n.variable("cxx_plain", " ".join(shlex.quote(c) for c in shlex.split(os.environ.get("CXX", "c++"))))
    n.variable("common", " ".join(shlex.quote(c) for c in common + have_avx2))
    n.variable("ldflags", " ".join(shlex.quote(c) for c in ldflags + san))
    n.rule("pch", "$cxx_plain -x c++-header $common $capflags -MMD -MF $out.d -c $in -o $out",
           depfile="$out.d", deps="gcc", description="PCH $capname")
    n.rule("cxx", "$cxx $common $capflags -include $pch_header -MMD -MF $out.d -c $in -o $out",
           depfile="$out.d", deps="gcc", description="CXX $capname $label")
    n.rule("link", "$cxx_plain -shared $in -o $out $ldflags", description="LINK $out")

    # One precompiled header per (capability, header): kernels per capability; op definitions
    # with the light runtime header; autograd wrappers with the heavier autograd header.
    pch: dict[tuple[str, str], tuple[str, str]] = {}

    def precompiled(cap: str, header_name: str) -> tuple[str, str]:
        if (cap, header_name) not in pch:
            folder = build / "pch" / cap / Path(header_name).stem
            folder.mkdir(parents=True, exist_ok=True)
            header = folder / header_name
            _write_if_changed(header, f'#include "{csrc / header_name}"\n')
            gch = f"{header}.gch"
            n.build(gch, "pch", str(header), variables={"capflags": " ".join(CAPABILITY_FLAGS[cap]), "capname": cap})
            pch[(cap, header_name)] = (str(header), gch)
        return pch[(cap, header_name)]

    objects: list[str] = []
    for src in _sources(config):
        kind = src.split("/")[1] if src.count("/") >= 2 else "library"
        header_name = "opgen_autograd.h" if kind == "autograd" else "opgen_pch.h"
        for cap in caps if kind == "kernels" else ["DEFAULT"]:
            header, gch = precompiled(cap, header_name)
            obj = str(build / "obj" / cap / (src + ".o"))
            n.build(obj, "cxx", str(csrc.parent / src), implicit=[gch],
                    variables={"capflags": " ".join(CAPABILITY_FLAGS[cap]), "capname": cap, "pch_header": header,
                               "label": src})
            objects.append(obj)
    library = str(library_path(config, debug=debug, sanitize=sanitize))
    n.build(library, "link", objects)
    n.default(library)
    path = build / "build.ninja"
    _write_if_changed(path, buf.getvalue())
    return path


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def build(config: ProjectConfig, *, jobs: int | None = None, verbose: bool = False, debug: bool = False,
          sanitize: str | None = None) -> BuildResult:
    ninja_file = write_ninja(config, debug=debug, sanitize=sanitize)
    cmd = [_ninja(), "-f", str(ninja_file)]
    if jobs:
        cmd += ["-j", str(jobs)]
    if verbose:
        cmd.append("-v")
    dry = subprocess.run(cmd + ["-n"], capture_output=True, text=True)
    ran = "no work to do" not in dry.stdout
    proc = subprocess.run(cmd, stdout=None if verbose else subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        if proc.stdout:
            sys.stderr.write(proc.stdout)
        raise OpgenError(f"build failed (ninja exit {proc.returncode}); see the compiler output above")
    if proc.stdout and ran and verbose:
        sys.stdout.write(proc.stdout)
    return BuildResult(library_path(config, debug=debug, sanitize=sanitize), ran)
