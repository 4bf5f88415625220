"""The opgen command line on throwaway projects: generate, check, list, new, init, exit codes,
and the guarantees of the writer (only changed files, stale ones removed, bad specs touch nothing)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opgen.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "testops"\n')
    for name in ("weighted_sum", "relu", "clamp"):
        shutil.copy(ROOT / "specs" / f"{name}.yaml", root / "specs")
    return root


def run(project: Path, *args: str) -> int:
    return main(["--project", str(project), *args])


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".opgen.lock"}


def test_generate_then_check(project, capsys):
    assert run(project, "generate") == 0
    assert (project / "generated/csrc/ops/relu.cpp").is_file()
    assert run(project, "check") == 0
    assert "up to date" in capsys.readouterr().out


def test_check_reports_a_stale_tree_with_a_diff(project, capsys):
    run(project, "generate")
    (project / "specs/relu.yaml").write_text((project / "specs/relu.yaml").read_text().replace("maximum(x, 0)", "maximum(x, 0.0) + 0"))
    capsys.readouterr()
    assert run(project, "check") == 1
    out, err = capsys.readouterr()
    assert "--- a/generated/csrc/kernels/relu_cpu.cpp" in out and "+++ b/generated/csrc/kernels/relu_cpu.cpp" in out
    assert "stale: generated/csrc/kernels/relu_cpu.cpp" in err


def test_check_names_missing_and_leftover_files(project, capsys):
    run(project, "generate")
    (project / "generated/docs/relu.md").unlink()
    (project / "specs/clamp.yaml").unlink()
    assert run(project, "check") == 1
    err = capsys.readouterr().err
    assert "missing: generated/docs/relu.md" in err
    assert "leftover: generated/csrc/ops/clamp.cpp" in err


def test_editing_one_spec_rewrites_only_that_ops_files(project):
    run(project, "generate")
    before = snapshot(project / "generated")
    spec = project / "specs/relu.yaml"
    spec.write_text(spec.read_text().replace("doc: Rectified", "doc: The rectified").replace("maximum(x, 0)", "maximum(0, x)"))
    assert run(project, "generate") == 0
    after = snapshot(project / "generated")
    changed = sorted(p for p in after if after[p] != before.get(p))
    assert changed == ["csrc/kernels/relu_cpu.cpp", "csrc/kernels/relu_cuda.cu", "csrc/ops/relu.cpp", "docs/index.md", "docs/relu.md",
                       "python/testops/__init__.pyi", "python/testops/_ops.py"]
    # unchanged files keep their timestamps, so the build recompiles only relu
    assert after["csrc/ops/clamp.cpp"][1] == before["csrc/ops/clamp.cpp"][1]


def test_removed_spec_removes_its_files_and_nothing_else(project):
    run(project, "generate")
    mine = project / "generated/NOTES.txt"
    mine.write_text("not generated")
    (project / "specs/clamp.yaml").unlink()
    assert run(project, "generate") == 0
    assert not (project / "generated/csrc/ops/clamp.cpp").exists()
    assert "def clamp(" not in (project / "generated/python/testops/_ops.py").read_text()
    assert mine.read_text() == "not generated"


@pytest.mark.parametrize("bad", [
    "signature: relu(Tensor x) -> Tensor\ndtypes: [floating]\nshape: same(x)\nkernel: {pointwise: relu(x)}\n",
    "signature: relu(Tensor x -> Tensor\n",
    "\xff\xfe",
    "signature: relu(Tensor x) -> Tensor\ndtypes: [floating]\nshape: same(x)\nkernel: {pointwise: x}\nkernel: {pointwise: x}\n",
])
def test_bad_spec_exits_2_located_and_leaves_generated_untouched(project, capsys, bad):
    run(project, "generate")
    before = snapshot(project / "generated")
    (project / "specs/relu.yaml").write_bytes(bad.encode("latin-1"))
    capsys.readouterr()
    assert run(project, "generate") == 2
    err = capsys.readouterr().err
    assert err.startswith("specs/relu.yaml:") and ": error: " in err
    assert "Traceback" not in err
    assert snapshot(project / "generated") == before


def test_errors_from_several_specs_are_all_reported(project, capsys):
    for name in ("relu", "clamp"):
        (project / f"specs/{name}.yaml").write_text(f"signature: {name}(Tensor x) -> Tensor\n")
    assert run(project, "generate") == 2
    err = capsys.readouterr().err
    assert "specs/clamp.yaml:1:1: error: missing required key 'dtypes'" in err
    assert "specs/relu.yaml:1:1: error: missing required key 'dtypes'" in err


def test_an_op_may_not_take_the_name_of_another_ops_variant_or_backward(project, capsys):
    """relu registers relu_ (in-place) and relu_backward: a spec of either name would register
    it twice, which aborts the process loading the library."""
    spec = (project / "specs/clamp.yaml").read_text()
    for name in ("relu_", "relu_backward", "weighted_sum_backward"):
        (project / f"specs/{name}.yaml").write_text(spec.replace("clamp(", f"{name}("))
    before = snapshot(project)
    assert run(project, "generate") == 2
    err = capsys.readouterr().err
    assert err.index("specs/relu_.yaml") < err.index("specs/relu_backward.yaml") < err.index("specs/weighted_sum_backward")
    assert "specs/relu_.yaml:1:1: error: op 'relu_' has the name of the in-place variant of 'relu' (specs/relu.yaml); rename it" in err
    assert "specs/relu_backward.yaml:1:1: error: op 'relu_backward' has the name of the backward op of 'relu'" in err
    assert "op 'weighted_sum_backward' has the name of the backward op of 'weighted_sum'" in err
    assert snapshot(project) == before


def test_each_error_is_one_line_whatever_the_spec_quotes(project, capsys):
    """A message quoting spec text (an unknown dtype "\r", a bidi override) stays on one line."""
    spec = (project / "specs/relu.yaml").read_text()
    (project / "specs/relu.yaml").write_text(spec.replace("dtypes: [floating]", 'dtypes: ["a\\rb\\u202e\\nc"]'))
    assert run(project, "generate") == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("specs/relu.yaml:3:11: error: "), lines
    assert "unknown dtype 'a\\rb\\u202e\\nc'" in lines[0], lines[0]


def test_generation_is_deterministic_across_hash_seeds_and_folders(project, tmp_path):
    outputs = []
    for seed, where in (("1", project), ("2", tmp_path / "copy")):
        if where != project:
            shutil.copytree(project, where)
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-m", "opgen", "--project", str(where), "generate"], check=True, env=env,
                       capture_output=True, cwd=tmp_path)
        outputs.append({k: v[0] for k, v in snapshot(where / "generated").items()})
    assert outputs[0] == outputs[1]
    blob = b"".join(outputs[0].values())
    assert str(tmp_path).encode() not in blob


def test_worker_processes_generate_the_same_tree_and_errors(project, tmp_path, monkeypatch, capsys):
    """Large libraries are parsed and emitted by forked workers (OPGEN_JOBS forces it here):
    byte for byte the sequential tree, and the same errors in the same order."""
    for name in ("sigmoid", "gelu", "add", "max", "layer_norm"):
        shutil.copy(ROOT / "specs" / f"{name}.yaml", project / "specs")
    shutil.copy(ROOT / "specs" / "layer_norm.cpu.cpp", project / "specs")
    trees = []
    for jobs in ("1", "3"):
        monkeypatch.setenv("OPGEN_JOBS", jobs)
        shutil.rmtree(project / "generated", ignore_errors=True)
        assert run(project, "generate") == 0
        trees.append({k: v[0] for k, v in snapshot(project / "generated").items()})
    assert trees[0] == trees[1] and len(trees[0]) > 40
    for name in ("relu", "clamp", "gelu"):
        (project / f"specs/{name}.yaml").write_text(f"signature: {name}(Tensor x) -> Tensor\n")
    shutil.copy(project / "specs" / "add.yaml", project / "specs" / "add_again.yaml")
    errors = []
    for jobs in ("1", "3"):
        monkeypatch.setenv("OPGEN_JOBS", jobs)
        assert run(project, "check") == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and errors[0].count("error:") == 4, errors


@pytest.mark.parametrize("n_specs, workers", [(1000, 2), (200, 2), (7, 3), (1, 2), (0, 2), (5000, 16)])
def test_chunks_cover_every_spec_once_and_shrink_towards_the_end(n_specs, workers):
    from opgen.pipeline import MIN_CHUNK, chunks

    parts = chunks(list(range(n_specs)), workers)
    assert [p for part in parts for p in part] == list(range(n_specs))
    sizes = [len(part) for part in parts]
    assert sizes == sorted(sizes, reverse=True) and all(sizes)
    assert len(parts) >= min(workers, n_specs)  # every worker gets work when there is enough
    if n_specs >= 10 * MIN_CHUNK * workers:
        # guided: the first chunk is half a worker's share, the last ones small
        assert sizes[0] == -(-n_specs // (2 * workers)) and sizes[-1] <= MIN_CHUNK


def test_workers_that_cannot_hand_over_results_fall_back_to_one_process(project, monkeypatch):
    """Workers pickle their results into files in /dev/shm; where those can't be made or written
    (here: the folder is gone), the sequential path makes the same tree."""
    from opgen import pipeline

    for name in ("sigmoid", "gelu", "add"):
        shutil.copy(ROOT / "specs" / f"{name}.yaml", project / "specs")
    monkeypatch.setenv("OPGEN_JOBS", "1")
    assert run(project, "generate") == 0
    expected = {k: v[0] for k, v in snapshot(project / "generated").items()}
    monkeypatch.setattr(pipeline, "_SPOOL_DIR", str(project / "no-such-folder"))
    monkeypatch.setenv("OPGEN_JOBS", "2")
    shutil.rmtree(project / "generated")
    assert run(project, "generate") == 0
    assert {k: v[0] for k, v in snapshot(project / "generated").items()} == expected


def test_generated_files_carry_the_header(project):
    run(project, "generate")
    for path in (project / "generated").rglob("*"):
        if path.suffix in (".cpp", ".h", ".py", ".md"):
            head = path.read_text().splitlines()[0]
            assert "@generated by opgen from" in head and "DO NOT EDIT" in head, path


def test_list_and_new(project, capsys):
    assert run(project, "new", "swish") == 0
    assert run(project, "list") == 0
    out = capsys.readouterr().out
    assert "testops.swish(Tensor x, *, float alpha=1.0) -> Tensor" in out
    assert "testops.relu(Tensor x) -> Tensor\n" in out
    # with every operator it registers: out= and in-place overloads, backward op; as the op file defines them
    assert "\n    testops.relu.out(Tensor x, *, Tensor(a!) out) -> ()\n" in out
    assert "\n    testops.relu_(Tensor(a!) x) -> ()\n" in out
    assert "\n    testops.relu_backward(Tensor grad, Tensor result, SymInt[] x__shape) -> Tensor\n" in out
    assert run(project, "generate") == 0
    listed = {line.strip().removeprefix("testops.") for line in out.splitlines()[1:]}
    defined = set()
    for cpp in (project / "generated" / "csrc" / "ops").glob("*.cpp"):
        defined |= {s.encode().decode("unicode_escape") for s in re.findall(r'm\.def\("((?:[^"\\]|\\.)*)"', cpp.read_text())}
    assert listed == defined, listed ^ defined
    assert run(project, "new", "swish") == 2
    assert run(project, "new", "class") == 2
    assert run(project, "new", "load_library") == 2  # the generated package's own names
    assert "'load_library' is a name the generated Python package defines" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["--project", str(tmp_path), "generate"]) == 2
    assert "pyproject.toml: not found" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "Bad-Name"\n')
    assert main(["--project", str(tmp_path), "generate"]) == 2
    # torch's own namespaces and words C++ or Python reserve would build a library that can't load
    for namespace, why in (("aten", "torch.ops.aten is PyTorch's own (a library registering it aborts when it loads)"),
                           ("torch", "'torch' is reserved in the generated C++"), ("class", "'class' is a Python keyword")):
        capsys.readouterr()
        (tmp_path / "pyproject.toml").write_text(f'[tool.opgen]\nnamespace = "{namespace}"\n')
        assert main(["--project", str(tmp_path), "generate"]) == 2
        assert f"[tool.opgen]: invalid namespace '{namespace}': {why}; choose another" in capsys.readouterr().err
        assert main(["init", str(tmp_path / namespace), "--namespace", namespace]) == 2
        assert f"invalid namespace '{namespace}': {why}; choose another (pass --namespace)" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "ok"\nspecz = "x"\n')
    assert main(["--project", str(tmp_path), "generate"]) == 2
    assert "did you mean 'specs'?" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_console_script_runs_without_traceback(project):
    (project / "specs/relu.yaml").write_text("signature: relu(Tensor x) -> Tensor\ndtypes: [flaoting]\nshape: same(x)\nkernel: {pointwise: x}\n")
    proc = subprocess.run([sys.executable, "-m", "opgen", "--project", str(project), "generate"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("specs/relu.yaml:2:10: error: unknown dtype 'flaoting'")
    assert "did you mean 'floating'?" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_console_script_output_to_a_closed_pipe_exits_1_without_traceback(project):
    run(project, "generate")
    spec = project / "specs/relu.yaml"
    spec.write_text(spec.read_text().replace("maximum(x, 0)", "maximum(0, x)"))  # check now prints a diff
    proc = subprocess.Popen([sys.executable, "-m", "opgen", "--project", str(project), "check"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the diff is written, as with `| head -0`
    _, err = proc.communicate()
    assert proc.returncode == 1
    assert b"Traceback" not in err


def test_generation_leaves_the_garbage_collector_as_it_found_it(project, monkeypatch):
    import gc

    from opgen import pipeline
    from opgen.config import load_config

    calls: list[str] = []
    monkeypatch.setattr(gc, "freeze", lambda real=gc.freeze: (calls.append("freeze"), real())[1])
    monkeypatch.setattr(gc, "unfreeze", lambda real=gc.unfreeze: (calls.append("unfreeze"), real())[1])
    gc.unfreeze()
    monkeypatch.setattr(pipeline, "_froze", False)
    calls.clear()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            pipeline.load_and_generate(load_config(project))
            assert gc.isenabled() is enabled
        # frozen after each run, the previous run's objects unfrozen first so they stay collectable
        assert calls == ["freeze", "unfreeze", "freeze"]
        gc.unfreeze()
        monkeypatch.setattr(pipeline, "_froze", False)
        gc.freeze()  # a process that froze objects itself: generation leaves them frozen, freezes nothing
        calls.clear()
        pipeline.load_and_generate(load_config(project))
        pipeline.load_and_generate(load_config(project))
        assert calls == []
    finally:
        gc.unfreeze()
        gc.enable()


def test_github_error_format_annotates_the_spec_line(project, capsys):
    (project / "specs/relu.yaml").write_text("signature: relu(Tensor x) -> Tensor\ndtypes: [flaoting]\nshape: same(x)\nkernel: {pointwise: x}\n")
    assert main(["--project", str(project), "--error-format", "github", "generate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("::error file=specs/relu.yaml,line=2,col=10::unknown dtype 'flaoting'")


def test_a_library_older_than_generated_sources_is_stale(project):
    import os
    import time

    from opgen.config import load_config
    from opgen.loader import is_stale

    run(project, "generate")
    lib = project / "build" / "libtestops.so"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    config = load_config(project)
    old = time.time() - 100
    os.utime(lib, (old, old))
    assert is_stale(config, lib)
    os.utime(lib, None)
    assert not is_stale(config, lib)


def test_torch_version_is_read_without_importing_torch():
    import torch

    from opgen.build import torch_version

    assert torch_version() == (torch.__version__, torch.version.cuda)


def test_torch_flags_are_kept_until_another_torch_is_installed(tmp_path, monkeypatch):
    import json

    from opgen import build

    cache = tmp_path / "torch-flags.json"
    flags = build._torch_flags(False, cache)
    assert any(f.startswith("-isystem") and f.endswith("/include") for f in flags[0]) and "-ltorch" in flags[1]
    asked: list[bool] = []
    monkeypatch.setattr(build, "_ask_torch_for_flags", lambda cuda: (asked.append(cuda), (["-DOTHER"], ["-lother"]))[1])
    assert build._torch_flags(False, cache) == flags and asked == []  # same torch: torch is not asked
    data = json.loads(cache.read_text())
    data["key"][2] += 1  # torch/version.py changed: another torch
    cache.write_text(json.dumps(data))
    assert build._torch_flags(False, cache) == (["-DOTHER"], ["-lother"]) and asked == [False]
    cache.write_text("{not json")
    assert build._torch_flags(False, cache) == (["-DOTHER"], ["-lother"]) and asked == [False, False]


def test_nvcc_is_named_the_same_however_it_is_found(tmp_path, monkeypatch):
    """Asking torch for its flags sets CUDA_HOME; the build line must still name nvcc as before,
    or the next build recompiles every .cu file."""
    from opgen import build

    real = tmp_path / "cuda-13.0"
    (real / "bin").mkdir(parents=True)
    nvcc = real / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    (tmp_path / "cuda").symlink_to(real)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    via_link = build._nvcc()
    monkeypatch.setenv("CUDA_HOME", str(real))
    assert via_link == build._nvcc() == str(nvcc)


def test_torch_namespaces_list_every_namespace_torch_registers():
    """config.TORCH_NAMESPACES is written out (generate does not import torch): it must hold every
    namespace this torch's dispatcher has that a project could name (a letter first)."""
    from opgen.config import TORCH_NAMESPACES

    # a fresh process: this one may have loaded op libraries of its own
    code = "import torch; print(' '.join({n.split('::')[0] for n in torch._C._dispatch_get_all_op_names()}))"
    registered = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    assert "aten" in registered
    assert not (missing := {n for n in registered if n[0].isalpha()} - TORCH_NAMESPACES), sorted(missing)


def test_build_timings_read_ninja_lines_wrapped_with_a_dollar(tmp_path):
    """ninja_syntax wraps a long `build` line with `$` and a newline; every output still counts."""
    from opgen.build import timings
    from opgen.config import load_config

    (tmp_path / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "wrapped"\n')
    build = tmp_path / "build"
    build.mkdir()
    long = f"{build}/obj/DEFAULT/csrc/ops/" + "a_rather_long_op_name_" * 4 + ".cpp.o"
    (build / "build.ninja").write_text(f"build $\n    {long}: cxx src.cpp\nbuild {build}/libwrapped.so: link {long}\n")
    (build / ".ninja_log").write_text(f"# ninja log v6\n0\t2500\t1\t{long}\tab\n2500\t2800\t1\t{build}/libwrapped.so\tcd\n")
    steps = timings(load_config(tmp_path))
    assert steps == [(2.5, long.removeprefix(f"{build}/")), (0.3, "libwrapped.so")]
