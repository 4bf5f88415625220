"""The precompiled header shared by every project: one per set of headers, compiler, flags and
torch; made once even when builds race; the least recently used ones removed. A fake compiler
stands in for gcc (the real one is exercised by every build in the suite)."""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from opgen import pch_cache
from opgen.capabilities import CPU_CAPABILITIES
from opgen.errors import OpgenError

FAKE_CXX = """#!{python}
import os, sys, time
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
if "-DFAIL" in args:
    print("fake.h:1:1: error: no", file=sys.stderr)
    sys.exit(1)
time.sleep(float(os.environ.get("FAKE_CXX_SLEEP", "0")))
header = args[args.index("-c") + 1]
with open(args[args.index("-o") + 1], "w") as out:
    out.write(open(os.path.join(os.path.dirname(header), "opgen_runtime.h")).read())
"""


@pytest.fixture
def cxx(tmp_path) -> tuple[Path, Path]:
    log = tmp_path / "cxx.log"
    path = tmp_path / "fake-cxx"
    path.write_text(FAKE_CXX.format(python=sys.executable, log=str(log)))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path, log


def _csrc(folder: Path, runtime: str = "// runtime\n") -> Path:
    folder.mkdir(parents=True)
    (folder / "opgen_pch.h").write_text('#include "opgen_runtime.h"\n')
    (folder / "opgen_runtime.h").write_text(runtime)
    (folder / "library.cpp").write_text("// not a header: not part of the key\n")
    return folder


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.is_file() else 0


def test_projects_with_the_same_headers_share_one(tmp_path, cxx):
    compiler, log = cxx
    root = tmp_path / "cache"
    a = pch_cache.plan(root, "pch/DEFAULT", _csrc(tmp_path / "a"), [str(compiler), "-O3"], ["torch 1"])
    b = pch_cache.plan(root, "pch/DEFAULT", _csrc(tmp_path / "b"), [str(compiler), "-O3"], ["torch 1"])
    assert a.folder == b.folder
    assert pch_cache.ensure([a], jobs=2, log=lambda s: None) == [a]
    assert pch_cache.ensure([b], jobs=2, log=lambda s: None) == [] and _calls(log) == 1
    assert b.gch.read_text() == "// runtime\n"  # made from the cache's own copies of the headers
    assert (b.folder / "opgen_runtime.h").read_text() == "// runtime\n"
    assert b.header.read_text() == '#include "opgen_pch.h"\n'
    assert "-x c++-header" in (b.folder / "command").read_text() and pch_cache.seconds(b.folder) is not None
    assert not list(b.folder.glob("*.tmp"))


def test_headers_flags_and_torch_each_decide_the_key(tmp_path, cxx):
    compiler, _ = cxx
    root = tmp_path / "cache"
    base = pch_cache.plan(root, "x", _csrc(tmp_path / "a"), [str(compiler), "-O3"], ["torch 1"])
    others = [
        pch_cache.plan(root, "x", _csrc(tmp_path / "b", "// runtime v2\n"), [str(compiler), "-O3"], ["torch 1"]),
        pch_cache.plan(root, "x", tmp_path / "a", [str(compiler), "-O0"], ["torch 1"]),
        pch_cache.plan(root, "x", tmp_path / "a", [str(compiler), "-O3"], ["torch 2"]),
    ]
    assert len({base.folder, *(o.folder for o in others)}) == 4


def test_racing_builds_make_it_once(tmp_path, cxx, monkeypatch):
    compiler, log = cxx
    monkeypatch.setenv("FAKE_CXX_SLEEP", "0.5")
    root = tmp_path / "cache"
    plans = [pch_cache.plan(root, "x", _csrc(tmp_path / p), [str(compiler)], []) for p in ("a", "b", "c")]
    made: list[list] = []
    threads = [threading.Thread(target=lambda p=p: made.append(pch_cache.ensure([p], jobs=1, log=lambda s: None)))
               for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _calls(log) == 1 and sorted(len(m) for m in made) == [0, 0, 1]


def test_a_failed_compile_says_why_and_leaves_nothing(tmp_path, cxx):
    compiler, _ = cxx
    p = pch_cache.plan(tmp_path / "cache", "x", _csrc(tmp_path / "a"), [str(compiler), "-DFAIL"], [])
    with pytest.raises(OpgenError, match="precompiling the generated headers failed:(.|\n)*fake.h:1:1: error: no"):
        pch_cache.ensure([p], jobs=1, log=lambda s: None)
    assert not p.gch.exists() and not list(p.folder.glob("*.tmp"))


def test_only_the_most_recently_used_are_kept(tmp_path):
    root = tmp_path / "cache"
    folders = []
    for i in range(7):
        folder = root / f"key{i}"
        folder.mkdir(parents=True)
        (folder / "used").touch()
        os.utime(folder / "used", (time.time() - 100 + i, time.time() - 100 + i))
        folders.append(folder)
    protected, locked = folders[0], folders[1]
    with pch_cache._locked(locked):  # another build is evicting or taking it right now
        removed = pch_cache.evict(root, keep=3, protect={protected})
    assert sorted(removed) == [folders[2], folders[3]]
    assert sorted(f for f in root.iterdir() if f.is_dir()) == [folders[0], folders[1], *folders[4:]]


def test_a_build_holds_its_keys_from_making_them_to_its_last_unit(tmp_path, cxx):
    # Another project's build evicts old keys; one that a build is compiling against stays (its
    # units would otherwise fail to find the header), and making it inside the hold does not deadlock.
    compiler, _ = cxx
    root = tmp_path / "cache"
    p = pch_cache.plan(root, "x", _csrc(tmp_path / "a"), [str(compiler)], [])
    q = pch_cache.plan(root, "y", _csrc(tmp_path / "b", "// other\n"), [str(compiler)], [])
    with pch_cache.in_use([p]):
        assert pch_cache.ensure([p], jobs=1, log=lambda s: None) == [p]
        with pch_cache.in_use([p]):  # a second build of the same key shares the hold
            pch_cache.ensure([q], jobs=1, log=lambda s: None)
            assert pch_cache.evict(root, keep=0, protect=set()) == [q.folder]
        assert p.gch.is_file()
    assert pch_cache.evict(root, keep=0, protect=set()) == [p.folder]
    assert not any(root.iterdir())


def test_an_unwritable_cache_falls_back_to_the_build_folder(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(blocker))
    assert pch_cache.cache_root(tmp_path / "build" / "pch-cache") == tmp_path / "build" / "pch-cache"
    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "c"))
    assert pch_cache.cache_root(tmp_path / "fallback") == tmp_path / "c" / "pch"


def test_the_shipped_build_includes_the_shared_header_and_keeps_project_flags_out_of_it(monkeypatch, tmp_path):
    from opgen import build
    from opgen.config import load_config

    monkeypatch.setenv("OPGEN_CACHE_DIR", str(tmp_path / "cache"))
    config = dataclasses.replace(load_config(Path(__file__).resolve().parent.parent), build=str(tmp_path / "build"))
    ninja_file, pchs = build.write_ninja(config)
    text = ninja_file.read_text()
    assert tuple(build.CAPABILITY_FLAGS) == CPU_CAPABILITIES
    assert pchs and all(p.folder.parent == tmp_path / "cache" / "pch" for p in pchs)
    for p in pchs:
        assert f"pch_header = {p.header}" in text
        assert not any(flag.startswith(("-I", "-DOPGEN_HAVE_")) for flag in p.command)
    assert "rule pch" not in text and "-Winvalid-pch" in text
    # the op files' header, for DEFAULT only; the kernels' own, one per capability
    assert sorted(p.label for p in pchs) == sorted([*(f"pch/{cap}/opgen_kernel_pch.h.gch" for cap in build.capabilities()),
                                                    "pch/DEFAULT/opgen_pch.h.gch"])
    header_of = {p.entry: str(p.header) for p in pchs if "DEFAULT" in p.label}
    for unit, entry in (("csrc/ops/softplus.cpp", "opgen_pch.h"), ("csrc/kernels/softplus_cpu.cpp", "opgen_kernel_pch.h"),
                        ("csrc/library.cpp", "opgen_pch.h"), ("specs/linear.cpu.cpp", "opgen_pch.h")):
        block = text[text.index(f"{config.build_dir}/obj/DEFAULT/{unit}.o:"):].split("\nbuild ")[0]
        assert f"pch_header = {header_of[entry]}" in block, (unit, block)
        # kernels without FMA contraction (a fused backward's loops of one gradient and of all agree bit for bit)
        assert ("-ffp-contract=off" in block) == ("kernels/" in unit), (unit, block)


def test_the_header_it_precompiles_decides_the_key(tmp_path, cxx):
    compiler, log = cxx
    folder = _csrc(tmp_path / "a")
    (folder / "opgen_kernel_pch.h").write_text('#include "opgen_runtime.h"\n')
    ops, kernels = (pch_cache.plan(tmp_path / "cache", "x", folder, [str(compiler)], [], entry) for entry in ("opgen_pch.h", "opgen_kernel_pch.h"))
    assert ops.folder != kernels.folder
    assert len(pch_cache.ensure([ops, kernels], jobs=2, log=lambda s: None)) == 2
    assert kernels.header.read_text() == '#include "opgen_kernel_pch.h"\n'


@pytest.mark.parametrize("unit", ["obj/DEFAULT/csrc/ops/softplus.cpp.o", "obj/AVX2/csrc/kernels/softplus_cpu.cpp.o"])
def test_real_units_use_the_precompiled_header(built_ops, unit):
    # op files compile at another -O level than the header was made with: gcc must still take it
    # ("!" before the header in -H's include tree; "x" would mean it was rejected)
    import shlex
    import subprocess

    from opgen import build
    from opgen.config import load_config

    config = load_config(Path(__file__).resolve().parent.parent)
    commands = subprocess.run([build._ninja(), "-C", str(config.build_dir), "-t", "commands", str(config.build_dir / unit)],
                              check=True, capture_output=True, text=True).stdout.splitlines()
    args = shlex.split(commands[-1])
    args[args.index("-o"):args.index("-o") + 2] = ["-fsyntax-only", "-H"]
    args = [a for a in args if a not in ("-MMD", "-MF") and not a.endswith(".o.d")]
    included = subprocess.run(args, capture_output=True, text=True)
    assert included.returncode == 0, included.stderr[-2000:]
    first = included.stderr.splitlines()[0]
    assert first.startswith("! ") and first.endswith("pch.h.gch"), included.stderr[:2000]
