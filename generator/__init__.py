"""opgen: a declarative operator generator for PyTorch."""

from .errors import OpgenError, SpecError

__version__ = "0.1.0"
__all__ = ["OpgenError", "SpecError", "load", "__version__"]


def __getattr__(name: str):
    # `load` pulls in the build machinery; `opgen generate` and the generated tests' imports of
    # opgen.testing do not need it, so it is imported on first use.
    if name == "load":
        from .loader import load

        return load
    raise AttributeError(f"module 'opgen' has no attribute {name!r}")
