"""onemodel: run ONNX models from Python on NumPy or CuPy, with a bit-exact mode."""

from onemodel import eager
from onemodel.cancellation import CancellationToken
from onemodel.compat.onnxruntime import InferenceSession
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.weights import WeightStorage
from onemodel.model import Model, load
from onemodel.session import ExecutionMode, OptimizationLevel, Session, SessionOptions
from onemodel.tensors import DType, Layout, Tensor

__version__ = "0.1.0"

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
