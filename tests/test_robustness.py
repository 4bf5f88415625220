"""The generator under hostile input and interruptions: injection through every string that
reaches generated code, failures mid-write, concurrent runs, determinism across file order."""

from __future__ import annotations

import ast
import itertools
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import jinja2
import pytest

from opgen import writer
from opgen.cli import main
from opgen.render import render

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_DOC = 'Ends */ here /* and " quotes \\\' \'\'\' """ {{ 7 * 7 }} {% if x %} <script>alert(1)</script> | pipe `code` ??/ trailing \\'


def make_project(tmp_path: Path, specs=("weighted_sum", "relu", "clamp")) -> Path:
    root = tmp_path / "proj"
    (root / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "robust"\n')
    for name in specs:
        shutil.copy(ROOT / "specs" / f"{name}.yaml", root / "specs")
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".opgen.lock"}


# ---- injection ---------------------------------------------------------------------------------


def generate_with_doc(tmp_path, text: str) -> Path:
    """A project whose relu spec has ``doc: text``, generated; returns its output folder."""
    import yaml

    root = make_project(tmp_path)
    spec = root / "specs" / "relu.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc["doc"] = text
    spec.write_text(yaml.safe_dump(doc))
    assert main(["--project", str(root), "generate"]) == 0
    return root / "generated"


def test_hostile_doc_is_escaped_for_every_target(tmp_path):
    out = generate_with_doc(tmp_path, HOSTILE_DOC)
    # Python: the module parses and its docstring holds the text exactly
    module = ast.parse((out / "python/robust/_ops.py").read_text())
    fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "relu")
    assert ast.get_docstring(fn).startswith(HOSTILE_DOC)
    # C++: the text appears only inside // comments that do not continue onto the next line
    for rel in ("csrc/ops/relu.cpp", "csrc/kernels/relu_cpu.cpp"):
        for line in (out / rel).read_text().splitlines():
            if "Ends */" in line:
                assert line.lstrip().startswith("//") and not line.endswith("\\"), line
            assert "#include <script>" not in line
    # Markdown: HTML is inert
    page = (out / "docs/relu.md").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_markdown_code_spans_are_kept_as_written():
    """Markdown shows a code span's characters literally: an escape inside one would show as `&lt;`."""
    from opgen.render import markdown_text

    assert markdown_text("`a <= b` and <b>x & y</b> ``c ` <d>``") == "`a <= b` and &lt;b&gt;x &amp; y&lt;/b&gt; ``c ` <d>``"
    assert markdown_text("an unclosed ` <i>") == "an unclosed ` &lt;i&gt;"


def test_invisible_characters_are_spelled_out_in_cpp_and_escaped_in_python(tmp_path):
    """Bidirectional overrides and zero-width marks (the fuzz found one: gcc rejects an unpaired
    override with -Werror=bidi-chars) never reach a C++ file, and Python sources escape them."""
    import unicodedata

    text = "left \u202e right \u2066 isolate \u200b zero-width \u00e9 accent"
    out = generate_with_doc(tmp_path, text)
    for path in out.rglob("*"):
        if path.suffix in (".cpp", ".cu", ".h", ".cuh", ".py", ".pyi"):
            source = path.read_text()
            hidden = [c for c in source if c not in "\n\t" and unicodedata.category(c) in ("Cf", "Cc", "Zl", "Zp")]
            assert not hidden, (path, hidden)
    assert "left <U+202E> right <U+2066> isolate <U+200B> zero-width \u00e9 accent" in (out / "csrc/ops/relu.cpp").read_text()
    module = ast.parse((out / "python/robust/_ops.py").read_text())
    fn = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "relu")
    assert ast.get_docstring(fn).startswith(text)


@pytest.mark.parametrize("field, value", [
    ("kernel", {"pointwise": 'maximum(x, 0)); system("rm -rf /"); ('}),
    ("kernel", {"pointwise": "x\n#include <cstdlib>"}),
    ("kernel", {"pointwise": "{{ x }}"}),
    ("checks", ['min <= max") || true; //']),
    ("shape", "same(x); abort()"),
    ("gradient", {"x": "grad */ + 1"}),
    ("signature", "clamp(Tensor x, *, float min, float max) -> Tensor /*"),
    ("signature", 'clamp(Tensor x, *, str s="a\\"); b(") -> Tensor'),
    ("reference", "__import__('os').system('x')"),
])
def test_code_injection_is_rejected_with_a_location(tmp_path, capsys, field, value):
    import yaml

    root = make_project(tmp_path)
    assert main(["--project", str(root), "generate"]) == 0
    before = snapshot(root / "generated")
    spec = root / "specs" / "clamp.yaml"
    doc = yaml.safe_load(spec.read_text())
    doc[field] = value
    spec.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    assert main(["--project", str(root), "generate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specs/clamp.yaml:")
    assert snapshot(root / "generated") == before


@pytest.mark.parametrize("name", ["class", "def", "lambda", "int", "namespace", "__x", "x__y", "_private", "été", "1x", "None"])
def test_names_must_be_safe_identifiers(tmp_path, capsys, name):
    root = make_project(tmp_path, specs=())
    (root / "specs" / "op.yaml").write_text(
        f"signature: op(Tensor {name}) -> Tensor\ndtypes: [float32]\nshape: same({name})\nkernel: {{pointwise: {name}}}\n")
    assert main(["--project", str(root), "generate"]) == 2
    assert "specs/op.yaml:1:" in capsys.readouterr().err


def test_templates_render_with_strict_undefined():
    with pytest.raises(jinja2.UndefinedError):
        render("csrc/library.cpp.j2")  # no namespace given


def test_cpp_string_literals_escape_everything():
    from opgen.api.cpp import string_literal

    lit = string_literal('a"b\\c\n??/é\x00')
    assert lit == '"a\\"b\\\\c\\012\\?\\?/\\303\\251\\000"'


# ---- interrupted and concurrent runs -------------------------------------------------------------


def test_a_failure_while_swapping_files_in_restores_the_previous_tree(tmp_path, monkeypatch):
    root = make_project(tmp_path)
    assert main(["--project", str(root), "generate"]) == 0
    before = snapshot(root / "generated")
    spec = root / "specs" / "relu.yaml"
    spec.write_text(spec.read_text().replace("maximum(x, 0)", "maximum(0, x)").replace("Rectified", "The rectified"))
    real_replace = os.replace
    calls = {"n": 0}

    def flaky_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(writer.os, "replace", flaky_replace)
    with pytest.raises(OSError):
        writer.write_tree(root / "generated", __import__("opgen.cli", fromlist=["_load"])._load(
            __import__("opgen.config", fromlist=["load_config"]).load_config(root))[1])
    monkeypatch.setattr(writer.os, "replace", real_replace)
    assert snapshot(root / "generated") == before
    leftovers = [p.name for p in (root / "generated").rglob(".*") if p.name != ".opgen.lock"]
    assert leftovers == []


def test_new_files_created_by_threads_match_and_a_failure_among_them_restores_the_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "PARALLEL_CREATE_MIN", 1)
    monkeypatch.setattr(writer, "CREATE_CHUNK", 1)  # every file its own task: the threads interleave
    monkeypatch.setattr(writer.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    root = make_project(tmp_path)
    assert main(["--project", str(root), "generate"]) == 0
    sequential = make_project(tmp_path / "sequential")
    monkeypatch.setattr(writer, "PARALLEL_CREATE_MIN", 10**9)
    assert main(["--project", str(sequential), "generate"]) == 0
    assert snapshot(root / "generated") == snapshot(sequential / "generated")
    monkeypatch.setattr(writer, "PARALLEL_CREATE_MIN", 1)
    before = snapshot(root / "generated")
    shutil.copy(ROOT / "specs" / "sigmoid.yaml", root / "specs")  # five new files, two changed ones
    real_create, calls, lock = writer._create, itertools.count(1), threading.Lock()

    def flaky_create(path, content, placed):
        with lock:
            n = next(calls)
        if n == 3:
            raise OSError("disk full (simulated)")
        return real_create(path, content, placed)

    monkeypatch.setattr(writer, "_create", flaky_create)
    with pytest.raises(OSError, match="disk full"):
        writer.write_tree(root / "generated", __import__("opgen.cli", fromlist=["_load"])._load(
            __import__("opgen.config", fromlist=["load_config"]).load_config(root))[1])
    assert snapshot(root / "generated") == before
    assert [p.name for p in (root / "generated").rglob(".*") if p.name != ".opgen.lock"] == []


KILLED_GENERATE = r"""
import os, signal, sys
from opgen import writer
from opgen.cli import main

real_replace, calls = os.replace, [0]

def replace_then_die(src, dst):
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # no handler, no finally: the harshest interruption
    return real_replace(src, dst)

real_create = writer._create

def create_then_die(path, content, placed):  # added files are written in place
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
        real_create(path, content[: len(content) // 2], placed)
        os.kill(os.getpid(), signal.SIGKILL)
    return real_create(path, content, placed)

if sys.argv[3] == "replace":
    writer.os.replace = replace_then_die
else:
    writer._create = create_then_die
sys.exit(main(["--project", sys.argv[1], "generate"]))
"""


@pytest.mark.parametrize("kill_at, where", [(1, "replace"), (2, "replace"), (4, "replace"), (9, "replace"), (14, "replace"),
                                            (17, "replace"), (1, "open"), (3, "open")])
def test_a_generate_killed_mid_swap_is_rolled_back_by_the_next_run(tmp_path, kill_at, where):
    """SIGKILL at the n-th rename (the journal's own, moving old files aside, moving new ones
    in) or while writing the n-th added file: `opgen check` reports the interrupted run, the next
    generate restores the previous files first, and ends with exactly the tree a clean run
    writes, with no temporaries left."""
    root = make_project(tmp_path)
    assert main(["--project", str(root), "generate"]) == 0
    before = snapshot(root / "generated")
    spec = root / "specs" / "relu.yaml"
    spec.write_text(spec.read_text().replace("maximum(x, 0)", "maximum(0, x)").replace("Rectified", "The rectified"))
    (root / "specs" / "clamp.yaml").unlink()  # changed, added and removed files in one run
    shutil.copy(ROOT / "specs" / "sigmoid.yaml", root / "specs")
    killed = subprocess.run([sys.executable, "-c", KILLED_GENERATE, str(root), str(kill_at), where], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stdout + killed.stderr
    if writer.interrupted(root / "generated"):
        assert main(["--project", str(root), "check"]) == 1
        with writer.locked(root / "generated"):
            assert writer.recover(root / "generated")
        assert snapshot(root / "generated") == before  # rolled back to the previous run exactly
    assert main(["--project", str(root), "generate"]) == 0
    assert main(["--project", str(root), "check"]) == 0
    clean = make_project(tmp_path / "clean", specs=("weighted_sum", "relu", "sigmoid"))
    shutil.copy(spec, clean / "specs" / "relu.yaml")
    assert main(["--project", str(clean), "generate"]) == 0
    assert snapshot(root / "generated") == snapshot(clean / "generated")
    assert [p.name for p in (root / "generated").rglob(".*") if p.name != ".opgen.lock"] == []


def test_concurrent_generates_leave_a_consistent_tree(tmp_path):
    root = make_project(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-m", "opgen", "--project", str(root), "generate"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert main(["--project", str(root), "check"]) == 0
    assert [p.name for p in (root / "generated").rglob(".*") if p.name != ".opgen.lock"] == []


def test_output_does_not_depend_on_spec_file_order(tmp_path):
    outputs = []
    for order in (("weighted_sum", "relu", "clamp"), ("clamp", "relu", "weighted_sum")):
        root = make_project(tmp_path / "-".join(order), specs=order)
        assert main(["--project", str(root), "generate"]) == 0
        outputs.append(snapshot(root / "generated"))
    assert outputs[0] == outputs[1]


def test_template_cache_problems_never_fail_a_run(tmp_path, monkeypatch):
    """The compiled-template cache is an optimization: no folder, or one that vanished or can't be
    written, means rendering without it."""
    import jinja2

    from opgen import render

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    assert render.bytecode_cache() is None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cache = render.bytecode_cache()
    assert isinstance(cache, render.BestEffortCache)
    shutil.rmtree(tmp_path / "cache")  # gone before the first dump
    env = jinja2.Environment(loader=jinja2.DictLoader({"t": "{{ 6 * 7 }}"}), bytecode_cache=cache)
    assert env.get_template("t").render() == "42"


def test_templates_fail_on_a_missing_attribute():
    # templates read attributes directly (render._CodeGenerator): a missing one fails the render
    from opgen.render import environment

    with pytest.raises(AttributeError):
        environment().from_string("{{ x.missing }}").render(x=object())


def test_the_writer_reads_files_as_text_mode_open_does(tmp_path):
    """writer._read (plain os calls, for speed) returns what open(encoding="utf-8").read() does,
    universal newlines included, and None for what it can't read as UTF-8 text."""
    from opgen.writer import _read

    cases = {"plain": b"a\nb\n", "crlf": b"a\r\nb\rc\n", "empty": b"", "utf8": "\u00e9\u2211\n".encode(), "big": b"x\n" * 200_000}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert _read(tmp_path / name) == open(tmp_path / name, encoding="utf-8").read(), name
    (tmp_path / "latin1").write_bytes(b"\xff\xfe")
    (tmp_path / "folder").mkdir()
    assert _read(tmp_path / "latin1") is None and _read(tmp_path / "folder") is None
    assert _read(tmp_path / "missing") is None and _read(tmp_path / "plain" / "below") is None
