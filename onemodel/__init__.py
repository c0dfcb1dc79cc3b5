"""onemodel: run ONNX models from Python on NumPy or CuPy, with a bit-exact mode.

The names below are imported when first used (PEP 562), so `import onemodel` costs almost
nothing and a program pays only for what it calls: `onemodel.load` brings in the runtime, not
the onnxruntime drop-in (`InferenceSession`), the eager API or the batch integrations.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_HOMES = {
    "CancellationToken": "onemodel.cancellation",
    "DType": "onemodel.tensors",
    "ErrorKind": "onemodel.errors",
    "ExecutionMode": "onemodel.session",
    "InferenceSession": "onemodel.compat.onnxruntime",
    "Layout": "onemodel.tensors",
    "Model": "onemodel.model",
    "OptimizationLevel": "onemodel.session",
    "Session": "onemodel.session",
    "SessionError": "onemodel.errors",
    "SessionOptions": "onemodel.session",
    "Tensor": "onemodel.tensors",
    "WeightStorage": "onemodel.graph.weights",
    "load": "onemodel.model",
}

__all__ = [
    "CancellationToken",
    "DType",
    "ErrorKind",
    "ExecutionMode",
    "InferenceSession",
    "Layout",
    "Model",
    "OptimizationLevel",
    "Session",
    "SessionError",
    "SessionOptions",
    "Tensor",
    "WeightStorage",
    "__version__",
    "eager",
    "load",
]

if TYPE_CHECKING:
    from onemodel import eager
    from onemodel.cancellation import CancellationToken
    from onemodel.compat.onnxruntime import InferenceSession
    from onemodel.errors import ErrorKind, SessionError
    from onemodel.graph.weights import WeightStorage
    from onemodel.model import Model, load
    from onemodel.session import ExecutionMode, OptimizationLevel, Session, SessionOptions
    from onemodel.tensors import DType, Layout, Tensor


def __getattr__(name: str) -> Any:
    if name == "eager":
        return importlib.import_module("onemodel.eager")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'onemodel' has no attribute '{name}'")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
