"""`opgen build`: compiles the generated C++ into one shared library with ninja.

Layout of the build folder:
    build.ninja                 written here; ninja does the incremental work
    torch-flags.json            torch's compiler and linker flags, kept while the same torch is installed
    pch.json                    the precompiled headers it uses (the op files'; the kernels', one per
                                CPU capability), from the cache every project shares (see pch_cache.py)
    obj/<CAP>/...               object files
    lib<namespace>.so           the extension that `opgen.load()` loads
    cuda/                       the same with the CUDA kernels (`--cuda`, a CUDA build of torch)

Kernels (csrc/kernels/*_cpu.cpp) are compiled once per CPU capability with ATen's
CPU_CAPABILITY convention; everything else once, for DEFAULT. With CUDA, every .cpp is built
with -DOPGEN_WITH_CUDA (which registers the CUDA dispatch key) and every .cu with nvcc.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import pch_cache
from .capabilities import CPU_CAPABILITIES
from .config import ProjectConfig
from .errors import OpgenError
from .generate import MANIFEST

CAPABILITY_FLAGS = {  # one per CPU_CAPABILITIES, in its order (tests/test_pch_cache.py)
    "DEFAULT": ["-DCPU_CAPABILITY=DEFAULT", "-DCPU_CAPABILITY_DEFAULT"],
    "AVX2": ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2", "-mavx2", "-mfma", "-mf16c"],
    # ATen's own AVX512 flags (what torch.backends.cpu.get_cpu_capability() == "AVX512" promises)
    "AVX512": ["-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
               "-mfma", "-mf16c"],
}
OPS_PCH = "opgen_pch.h"  # what the op files, library.cpp and hand-written kernels include
KERNEL_PCH = "opgen_kernel_pch.h"  # what the generated CPU kernels include


@dataclass(frozen=True)
class BuildResult:
    library: Path
    steps: dict[str, int]  # steps ninja ran, by kind (CXX, NVCC, PCH, LINK)

    @property
    def ran(self) -> bool:
        return bool(self.steps)

    def summary(self) -> str:
        return ", ".join(f"{n} {kind}" for kind, n in sorted(self.steps.items()))


# Hopper as SASS plus PTX, so later GPUs JIT the kernels. OPGEN_CUDA_ARCHS="80;90" overrides.
DEFAULT_CUDA_ARCHS = "90"
_CUDA_ARCH = re.compile(r"(compute_)?([1-9][0-9]+[af]?)")
NVCC_WARNINGS = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-local-typedefs", "-Werror"]


def variant_dir(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None, cuda: bool = False) -> Path:
    """build/ for the normal build; build/debug, build/sanitize or build/cuda for the others, so
    switching between them never throws away the normal build's objects."""
    if sanitize:
        return config.build_dir / "sanitize"
    if cuda:
        return config.build_dir / "cuda"
    return config.build_dir / "debug" if debug else config.build_dir


def library_path(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None, cuda: bool = False) -> Path:
    return variant_dir(config, debug=debug, sanitize=sanitize, cuda=cuda) / f"lib{config.namespace}.so"


def _nvcc() -> str | None:
    """nvcc, with symlinks resolved: /usr/local/cuda/bin/nvcc and $CUDA_HOME/bin/nvcc are often
    the same file, and a build line that names it either way would rebuild every .cu file."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    candidates = [os.path.join(home, "bin", "nvcc")] if home else []
    candidates += ["/usr/local/cuda/bin/nvcc", shutil.which("nvcc") or ""]
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    return os.path.realpath(found) if found else None


def _cuda_home() -> Path:
    return Path(_nvcc()).resolve().parent.parent


def _torch_dir() -> Path:
    """The installed torch package, found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise OpgenError("torch is not installed in this environment; pip install torch")
    return Path(spec.origin).parent


def torch_version() -> tuple[str, str | None]:
    """torch's version and its CUDA version (None for a CPU build), read from torch/version.py:
    importing torch takes seconds, longer than a build with nothing to do."""
    values: dict[str, object] = {}
    exec(compile((_torch_dir() / "version.py").read_text(encoding="utf-8"), "torch/version.py", "exec"), values)
    cuda = values.get("cuda")
    return str(values["__version__"]), str(cuda) if cuda else None


def cuda_unavailable() -> str | None:
    """Why the CUDA kernels cannot be built here, or None when they can."""
    version, cuda = torch_version()
    if cuda is None:
        return (f"torch {version} is a CPU build; the CUDA kernels compile against a CUDA build "
                "of torch (e.g. torch==2.14.1)")
    if _nvcc() is None:
        return "nvcc not found (set CUDA_HOME or put nvcc on PATH)"
    return None


def capabilities() -> list[str]:
    """The CPU capabilities kernels are compiled for; OPGEN_CPU_CAPABILITIES=DEFAULT narrows them
    (a compile check that needs one variant, e.g. .ci/cuda)."""
    caps = list(CPU_CAPABILITIES) if platform.machine() in ("x86_64", "AMD64") else ["DEFAULT"]
    wanted = os.environ.get("OPGEN_CPU_CAPABILITIES")
    if wanted:
        caps = [c for c in caps if c in {w.strip().upper() for w in wanted.split(",")}] or ["DEFAULT"]
    return caps


def _ninja() -> str:
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja

        return os.path.join(ninja.BIN_DIR, "ninja")
    except ImportError:
        raise OpgenError("ninja not found; pip install ninja") from None


def _plain_compiler() -> list[str]:
    """$CXX (default c++) as a command."""
    return shlex.split(os.environ.get("CXX", "c++"))


def _compiler() -> list[str]:
    """The compiler for translation units: $CXX, through ccache when it is installed."""
    cxx = _plain_compiler()
    if os.environ.get("OPGEN_CCACHE", "1") != "0" and shutil.which("ccache") and "ccache" not in cxx[0]:
        # ccache reuses results with a precompiled header only when told the PCH is safe
        cxx = ["env", "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime", "ccache"] + cxx
    return cxx


def _torch_identity() -> list[object]:
    """What tells one installed torch from another without importing it."""
    version = _torch_dir() / "version.py"
    stat = version.stat()
    return [str(version), stat.st_mtime_ns, stat.st_size]


def _file_identity(program: str) -> list[object]:
    """A program found on PATH, by where it is and when it changed (a compiler upgrade)."""
    found = shutil.which(program)
    if not found:
        return [program]
    stat = os.stat(os.path.realpath(found))
    return [os.path.realpath(found), stat.st_mtime_ns, stat.st_size]


def _torch_flags(cuda: bool, cache: Path) -> tuple[list[str], list[str]]:
    """Compiler and linker flags for torch, kept in ``cache`` for as long as the same torch is
    installed: asking torch means importing it."""
    key = [sys.executable, *_torch_identity(), cuda, os.environ.get("CUDA_HOME", ""), _nvcc() if cuda else None]
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        if data["key"] == key:
            return list(data["cflags"]), list(data["ldflags"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cflags, ldflags = _ask_torch_for_flags(cuda)
    _write_if_changed(cache, json.dumps({"key": key, "cflags": cflags, "ldflags": ldflags}, indent=1) + "\n")
    return cflags, ldflags


def _ask_torch_for_flags(cuda: bool) -> tuple[list[str], list[str]]:
    if cuda:
        # torch.utils.cpp_extension guesses CUDA_HOME from `which nvcc` (and warns) unless told
        os.environ.setdefault("CUDA_HOME", str(_cuda_home()))
    import torch
    from torch.utils import cpp_extension

    cflags = [f"-isystem{p}" for p in cpp_extension.include_paths()]
    cflags.append(f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}")
    ldflags = []
    for p in cpp_extension.library_paths():
        ldflags += [f"-L{p}", f"-Wl,-rpath,{p}"]
    ldflags += ["-fopenmp", "-lc10", "-ltorch_cpu", "-ltorch"]
    if cuda:
        cuda_lib = _cuda_home() / "lib64"
        ldflags += [f"-L{cuda_lib}", "-lc10_cuda", "-ltorch_cuda", "-lcudart"]
    return cflags, ldflags


def _cuda_include_flags() -> list[str]:
    """CUDA's headers, plus those of the pip `nvidia` wheels installed with torch: ATen's CUDA
    headers include cuBLAS and cuSPARSE ones that a bare toolkit may lack."""
    flags = [f"-isystem{_cuda_home() / 'include'}"]
    nvidia = _torch_dir().parent / "nvidia"
    flags += [f"-isystem{p}" for p in sorted(nvidia.glob("cu*/include"))]
    return flags


def cuda_gencode(archs: str) -> list[str]:
    """nvcc's -gencode flags for OPGEN_CUDA_ARCHS: "80;90" is SASS for sm_80 and sm_90 plus PTX
    of compute_90 (for later GPUs to JIT); a "compute_90" entry is PTX alone (no ptxas: a third
    of nvcc's time, which a compile check such as .ci/cuda can skip), and then the SASS entries
    get no PTX of their own."""
    entries = [a.strip() for a in archs.replace(",", ";").split(";") if a.strip()]
    matches = [_CUDA_ARCH.fullmatch(a) for a in entries]
    if not entries or not all(matches):
        bad = next((a for a, m in zip(entries, matches) if not m), archs)
        raise OpgenError(f"OPGEN_CUDA_ARCHS={archs!r}: can't read {bad!r}; list compute capabilities without the dot, "
                         f"separated by ';': \"80;90\" (SASS, plus PTX of the last), \"compute_90\" (PTX only)")
    sass = [m.group(2) for m in matches if not m.group(1)]
    ptx = [m.group(2) for m in matches if m.group(1)] or sass[-1:]
    return ([f"-gencode=arch=compute_{a},code=sm_{a}" for a in sass]
            + [f"-gencode=arch=compute_{a},code=compute_{a}" for a in ptx])


def _nvcc_flags(torch_cflags: list[str], opt: list[str]) -> list[str]:
    gencode = cuda_gencode(os.environ.get("OPGEN_CUDA_ARCHS", DEFAULT_CUDA_ARCHS))
    # The same half/bfloat16 rules as torch's own CUDA build: c10 types, not CUDA's operators.
    no_cuda_half = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]
    return ["-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda", "-Werror", "all-warnings",
            "-Xcompiler", ",".join(["-fPIC", "-fvisibility=hidden", *NVCC_WARNINGS]), *opt, *gencode, *no_cuda_half,
            *_split_isystem(torch_cflags + _cuda_include_flags()), "-DOPGEN_WITH_CUDA"]


def _split_isystem(flags: list[str]) -> list[str]:
    """nvcc takes `-isystem DIR`, not gcc's `-isystemDIR`."""
    out: list[str] = []
    for f in flags:
        out += ["-isystem", f.removeprefix("-isystem")] if f.startswith("-isystem") else [f]
    return out


def _sources(config: ProjectConfig, cuda: bool = False) -> list[str]:
    manifest = config.output_dir / MANIFEST
    if not manifest.is_file():
        raise OpgenError(f"{config.output}/{MANIFEST} not found; run `opgen generate` first")
    data = json.loads(manifest.read_text(encoding="utf-8"))
    suffixes = (".cpp", ".cc", ".cu") if cuda else (".cpp", ".cc")
    generated = sorted(f for f in data["files"] if f.startswith("csrc/") and f.endswith(suffixes))
    return generated + [f for f in data.get("sources", []) if f.endswith(suffixes)]


def write_ninja(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None,
                cuda: bool = False) -> tuple[Path, list[pch_cache.SharedPch]]:
    """Writes build.ninja; returns it and the shared precompiled headers its units include,
    which the caller makes before running ninja."""
    from ninja import ninja_syntax  # the pip ninja package ships the writer

    build = variant_dir(config, debug=debug, sanitize=sanitize, cuda=cuda)
    build.mkdir(parents=True, exist_ok=True)
    csrc = (config.output_dir / "csrc").resolve()
    torch_cflags, ldflags = _torch_flags(cuda, build / "torch-flags.json")
    opt = ["-O0", "-g"] if debug else (["-O1", "-g"] if sanitize else ["-O3", "-DNDEBUG"])
    # Op files hold only the call path (checks, allocation, dispatch, the autograd node): -Og
    # compiles them 0-25% faster than -O1 and ~35% faster than -O3, and a call runs as many
    # instructions as at -O1 (3.6% more with grad; callgrind). The kernels keep -O3; the
    # precompiled header, made with -O3, serves both (tests/test_pch_cache.py).
    opt_call_path = ["-Og"] if opt[0] == "-O3" else []
    # torch itself is not built with UBSan, so its RTTI can't back the vptr check
    san = [f"-fsanitize={sanitize}", "-fno-sanitize=vptr", "-fno-omit-frame-pointer"] if sanitize else []
    # -fopenmp: at::parallel_for is inline; without it the flat contiguous loops run on one thread
    common = ["-std=c++20", "-fPIC", "-fvisibility=hidden", "-fopenmp", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-unused-local-typedefs", "-Wno-psabi", "-Wno-maybe-uninitialized",
              "-Werror", *opt, *san, *torch_cflags, *(["-DOPGEN_WITH_CUDA"] if cuda else [])]
    # g++ fuses a multiply and an add into an FMA only where the product has no other use, so
    # the same formula could round differently in two loops that compute different things
    # beside it (a fused backward's loop of one gradient and its loop of all); kernels are
    # compiled without contraction, as the C++ standard reads them. No cost measured: the vector
    # math that wants FMAs (ATen's Sleef, opgen_math.h's polynomials) calls them explicitly.
    kernel_only = ["-ffp-contract=off"]
    caps = capabilities()
    # Only the translation units see these: the shared precompiled header must not depend on them.
    unit_only = [f"-I{csrc}", *(f"-DOPGEN_HAVE_{cap}" for cap in caps if cap != "DEFAULT"), "-Winvalid-pch", "-Wno-error=invalid-pch"]

    import io

    buf = io.StringIO()
    n = ninja_syntax.Writer(buf, width=120)
    n.comment("Written by `opgen build`; rerun it rather than editing this file.")
    n.variable("ninja_required_version", "1.3")
    n.variable("builddir", str(build))  # .ninja_log and .ninja_deps live here, whatever the cwd
    n.variable("cxx", " ".join(shlex.quote(c) for c in _compiler()))
    n.variable("cxx_plain", " ".join(shlex.quote(c) for c in _plain_compiler()))
    n.variable("common", " ".join(shlex.quote(c) for c in common + unit_only))
    n.variable("ldflags", " ".join(shlex.quote(c) for c in ldflags + san))
    n.rule("cxx", "$cxx $common $capflags $unitflags -include $pch_header -MMD -MF $out.d -c $in -o $out",
           depfile="$out.d", deps="gcc", description="CXX $capname $label")
    n.rule("link", "$cxx_plain -shared $in -o $out $ldflags", description="LINK $out")
    if cuda:
        n.variable("nvcc", shlex.quote(_nvcc()))
        n.variable("nvcc_flags", " ".join(shlex.quote(c) for c in _nvcc_flags(torch_cflags, opt) + [f"-I{csrc}"]))
        n.rule("nvcc", "$nvcc $nvcc_flags -MD -MF $out.d -c $in -o $out", depfile="$out.d", deps="gcc",
               description="NVCC $label")

    # Precompiled headers, shared with every other project built with the same headers, compiler,
    # flags and torch: the op files' (dispatcher, autograd), and the kernels' per capability (the
    # vectorized math only). A unit pays for every template its header's inline functions use
    # whether it calls them or not (gcc instantiates them at the end of each unit): with the op
    # files' header a kernel took 5.6 s, with its own 2.6 s.
    pch_root = pch_cache.cache_root(fallback=config.build_dir / "pch-cache")
    pch: dict[tuple[str, str], pch_cache.SharedPch] = {}
    identity = [_torch_identity(), _file_identity(_plain_compiler()[0])]

    def precompiled(cap: str, entry: str) -> tuple[str, str]:
        if (cap, entry) not in pch:
            command = [*_plain_compiler(), *common, *CAPABILITY_FLAGS[cap]]
            pch[cap, entry] = pch_cache.plan(pch_root, f"pch/{cap}/{entry}.gch", csrc, command, identity, entry)
        return str(pch[cap, entry].header), str(pch[cap, entry].gch)

    objects: list[str] = []
    for src in _sources(config, cuda):
        # generated files are named relative to the output folder, hand-written kernels relative to the project
        path = csrc.parent / src if src.startswith("csrc/") else (config.root / src).resolve()
        if src.endswith(".cu"):
            obj = str(build / "obj" / "cuda" / (src + ".o"))
            n.build(obj, "nvcc", str(path), variables={"label": src})
            objects.append(obj)
            continue
        kind = src.split("/")[1] if src.startswith("csrc/") and src.count("/") >= 2 else "library"
        for cap in caps if kind == "kernels" else ["DEFAULT"]:
            header, gch = precompiled(cap, KERNEL_PCH if kind == "kernels" else OPS_PCH)
            obj = str(build / "obj" / cap / (src + ".o"))
            n.build(obj, "cxx", str(path), implicit=[gch],
                    variables={"capflags": " ".join(CAPABILITY_FLAGS[cap]), "capname": cap, "pch_header": header,
                               "unitflags": " ".join(opt_call_path if kind == "ops" else kernel_only if kind == "kernels" else []), "label": src})
            objects.append(obj)
    library = str(library_path(config, debug=debug, sanitize=sanitize, cuda=cuda))
    n.build(library, "link", objects)
    n.default(library)
    path = build / "build.ninja"
    _write_if_changed(path, buf.getvalue())
    _write_if_changed(build / "pch.json", json.dumps([{"label": p.label, "folder": str(p.folder)} for p in pch.values()], indent=1) + "\n")
    shutil.rmtree(build / "pch", ignore_errors=True)  # where builds before the shared cache kept theirs
    return path, list(pch.values())


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def build(config: ProjectConfig, *, jobs: int | None = None, verbose: bool = False, debug: bool = False,
          sanitize: str | None = None, cuda: bool = False) -> BuildResult:
    if cuda and (reason := cuda_unavailable()):
        raise OpgenError(f"cannot build the CUDA kernels: {reason}")
    ninja_file, pchs = write_ninja(config, debug=debug, sanitize=sanitize, cuda=cuda)
    cmd = [_ninja(), "-f", str(ninja_file)]
    if jobs:
        cmd += ["-j", str(jobs)]
    if verbose:
        cmd.append("-v")
    with pch_cache.in_use(pchs):  # another project's build would otherwise evict them mid-build
        made = pch_cache.ensure(pchs, jobs or os.cpu_count() or 1)
        steps, output, code = _run_ninja(cmd, verbose)
    if made:
        steps["PCH"] = len(made)
    if code != 0:
        if not verbose:
            sys.stderr.write("".join(output))
        raise OpgenError(f"build failed (ninja exit {code}); see the compiler output above")
    return BuildResult(library_path(config, debug=debug, sanitize=sanitize, cuda=cuda), steps)


_STATUS = re.compile(r"^\[(\d+)/(\d+) +([\d.]+)s\] (\S+)")


def _run_ninja(cmd: list[str], verbose: bool) -> tuple[dict[str, int], list[str], int]:
    """Runs ninja, showing its progress on stderr (one updating line on a terminal, a line per
    step otherwise); returns the steps run by kind, the output, and the exit code."""
    env = {**os.environ, "NINJA_STATUS": "[%f/%t %es] "}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    steps: Counter[str] = Counter()
    output: list[str] = []
    tty = sys.stderr.isatty()
    assert proc.stdout is not None
    for line in proc.stdout:
        output.append(line)
        status = _STATUS.match(line)
        if status:
            steps[status.group(4)] += 1
        if verbose:
            sys.stderr.write(line)
        elif status:
            sys.stderr.write(f"\r\033[K{line.rstrip()[:150]}" if tty else line)
        sys.stderr.flush()
    code = proc.wait()
    if tty and steps and not verbose:
        sys.stderr.write("\r\033[K")
    return dict(steps), output, code


def timings(config: ProjectConfig, *, debug: bool = False, sanitize: str | None = None, cuda: bool = False) -> list[tuple[float, str]]:
    """Seconds per output of the last build that made it, from ninja's log, slowest first."""
    log = variant_dir(config, debug=debug, sanitize=sanitize, cuda=cuda) / ".ninja_log"
    ninja_file = log.parent / "build.ninja"
    text = ninja_file.read_text(encoding="utf-8") if ninja_file.is_file() else ""
    text = re.sub(r"(?<!\$)\$\n[ \t]*", "", text)  # ninja_syntax wraps a long line with `$` + newline
    current = set(re.findall(r"^build (\S+):", text, re.M))
    latest: dict[str, float] = {}
    if log.is_file():
        for line in log.read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) == 5 and not line.startswith("#"):
                latest[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000
    root = str(variant_dir(config, debug=debug, sanitize=sanitize, cuda=cuda)) + os.sep
    steps = [(t, o.removeprefix(root)) for o, t in latest.items() if o in current]
    try:
        shared = json.loads((log.parent / "pch.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        shared = []
    for entry in shared:
        seconds = pch_cache.seconds(Path(entry["folder"]))
        if seconds is not None:
            steps.append((seconds, f"{entry['label']} (shared)"))
    return sorted(steps, reverse=True)
