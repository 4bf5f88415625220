"""Builds the wheel: generates and compiles the ops with opgen, then packages
generated/python/exampleops with lib exampleops .so beside it (where its loader looks first)."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
NS = "exampleops"


def opgen(*command: str) -> None:
    from opgen.cli import main

    if main(["--project", str(HERE), *command]) != 0:
        raise SystemExit(f"opgen {command[0]} failed")


class BuildOps(build_py):
    def run(self) -> None:
        opgen("build")
        super().run()
        library = HERE / "build" / f"lib{NS}.so"
        cuda = HERE / "build" / "cuda" / f"lib{NS}.so"
        newest = max((p for p in (library, cuda) if p.is_file()), key=lambda p: p.stat().st_mtime)
        shutil.copy2(newest, Path(self.build_lib) / NS / library.name)


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:  # a platform wheel: it carries a compiled library
        return True


opgen("generate")  # cheap, and the package folder must exist before setuptools looks at it
setup(
    cmdclass={"build_py": BuildOps},
    distclass=BinaryDistribution,
    packages=[NS],
    package_dir={NS: f"generated/python/{NS}"},
    package_data={NS: ["__init__.pyi", "py.typed"]},
)
