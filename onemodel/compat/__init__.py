"""Run code written for onnxruntime on onemodel without changing it.

`install()` puts `onemodel.compat.onnxruntime` in `sys.modules` as `onnxruntime` (with its
`capi` submodules), so a later `import onnxruntime` anywhere in the process gets onemodel;
`uninstall()` puts back what was there. `python -m onemodel.compat script.py args...` runs a
program that way.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

# onnxruntime's module names → the modules here that answer for them. The native module is
# imported under two names (`_pybind_state` re-exports `onnxruntime_pybind11_state`).
_MODULES = {
    "onnxruntime": "onemodel.compat.onnxruntime",
    "onnxruntime.capi": "onemodel.compat.onnxruntime.capi",
    "onnxruntime.capi._pybind_state": "onemodel.compat.onnxruntime.capi._pybind_state",
    "onnxruntime.capi.onnxruntime_pybind11_state": (
        "onemodel.compat.onnxruntime.capi._pybind_state"
    ),
    "onnxruntime.capi.onnxruntime_inference_collection": (
        "onemodel.compat.onnxruntime.capi.onnxruntime_inference_collection"
    ),
    "onnxruntime.transformers": "onemodel.compat.onnxruntime.transformers",
    "onnxruntime.transformers.io_binding_helper": (
        "onemodel.compat.onnxruntime.transformers.io_binding_helper"
    ),
}

# What install() replaced, so that uninstall() can restore it (None: nothing was there).
_replaced: dict[str, ModuleType | None] = {}


def install() -> None:
    """Make `import onnxruntime` (and its `capi` modules) give onemodel's; idempotent."""
    for name, ours in _MODULES.items():
        module = importlib.import_module(ours)
        if sys.modules.get(name) is not module:
            _replaced.setdefault(name, sys.modules.get(name))
            sys.modules[name] = module


def uninstall() -> None:
    """Put back the modules install() replaced (the real onnxruntime, if it was imported)."""
    for name, previous in _replaced.items():
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
    _replaced.clear()


def installed() -> bool:
    return sys.modules.get("onnxruntime") is importlib.import_module(_MODULES["onnxruntime"])
