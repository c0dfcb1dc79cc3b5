"""A module imported on the first read of one of its attributes.

Exact mode's kernel modules (exact_arrays, exact_gemm, exact_elementary) cost about 20 ms of a
cold start, and a fast-mode session never calls them; the shared array kernels name them
through this, so that only an exact session (or an operator that needs them) loads them.
Python's own import lock makes a first read from two threads safe.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module `name` until an attribute is read, then reads it from there."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)
