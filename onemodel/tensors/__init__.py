"""The tensor layer (seed 002): element types, shapes, buffers, views, layouts, versions."""

from onemodel.tensors.buffers import HOST, Arena, Buffer, BufferPool, Memory, size_class
from onemodel.tensors.dtypes import DType, numpy_dtype_for_onnx, onnx_code_for_numpy, onnx_name
from onemodel.tensors.errors import (
    BufferOverrunError,
    StaleTensorError,
    TensorError,
    TensorShapeError,
    TensorVersionError,
    UnsupportedDTypeError,
)
from onemodel.tensors.tensor import Layout, SavedTensor, Tensor

__all__ = [
    "HOST",
    "Arena",
    "Buffer",
    "BufferOverrunError",
    "BufferPool",
    "DType",
    "Layout",
    "Memory",
    "SavedTensor",
    "StaleTensorError",
    "Tensor",
    "TensorError",
    "TensorShapeError",
    "TensorVersionError",
    "UnsupportedDTypeError",
    "numpy_dtype_for_onnx",
    "onnx_code_for_numpy",
    "onnx_name",
    "size_class",
]
