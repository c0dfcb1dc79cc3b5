"""`onnxruntime.capi`: where code written for onnxruntime reaches for its native module, by
either of its two names, and for `onnxruntime_inference_collection` (imported on first use: it
holds the Python InferenceSession, which imports this package)."""

import importlib
from types import ModuleType

from onemodel.compat.onnxruntime.capi import _pybind_state

onnxruntime_pybind11_state = _pybind_state


def __getattr__(name: str) -> ModuleType:
    if name == "onnxruntime_inference_collection":
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
