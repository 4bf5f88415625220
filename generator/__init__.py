"""opgen: a declarative operator generator for PyTorch."""

from .errors import OpgenError, SpecError
from .loader import load

__version__ = "0.1.0"
__all__ = ["OpgenError", "SpecError", "load", "__version__"]
