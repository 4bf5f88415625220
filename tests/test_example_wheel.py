"""examples/wheel_project: a user's op library shipped as its own wheel. `pip wheel` runs opgen
(generate, build); the wheel holds the typed API, its stubs and the compiled library, and works
once installed, outside the project folder."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHECK = r"""
import torch, exampleops
assert exampleops._library.library_path().parent.name == "exampleops", exampleops._library.library_path()
x = torch.randn(6, dtype=torch.float64, requires_grad=True)
torch.testing.assert_close(exampleops.swish(x, beta=2.0), x * torch.sigmoid(2 * x))
assert torch.autograd.gradcheck(lambda t: exampleops.swish(t, beta=2.0), (x,))
print("wheel ok")
"""


def test_example_project_builds_a_wheel_that_works_installed(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "wheel_project", project, ignore=shutil.ignore_patterns("generated", "build", "dist"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "dist"), str(project)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("exampleops-0.1.0-*.whl")
    assert "linux" in wheel.name, wheel.name  # a platform wheel: it carries a compiled library
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"exampleops/__init__.py", "exampleops/__init__.pyi", "exampleops/py.typed", "exampleops/libexampleops.so",
            "exampleops/_ops.py", "exampleops/_references.py"} <= names, sorted(names)
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True)
    shutil.rmtree(project)  # the installed wheel must not need the project folder
    run = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and "wheel ok" in run.stdout, run.stdout + run.stderr


def test_opgen_wheel_carries_its_templates_and_generates_when_installed(tmp_path):
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("opgen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {f"opgen/templates/{p.relative_to(ROOT / 'templates')}" for p in (ROOT / "templates").rglob("*.j2")}
    assert templates and templates <= names, sorted(templates - names)
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, capture_output=True)
    project = tmp_path / "proj"
    (project / "specs").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.opgen]\nnamespace = "fromwheel"\n')
    shutil.copy(ROOT / "specs" / "gelu.yaml", project / "specs")
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", "import opgen.render as r; print(r.templates_dir())"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 0 and str(site) in run.stdout, run.stdout + run.stderr
    gen = subprocess.run([sys.executable, "-m", "opgen", "--project", str(project), "generate"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    assert (project / "generated" / "csrc" / "kernels" / "gelu_cuda.cu").is_file()
