"""`onnxruntime.transformers.io_binding_helper.TypeHelper`: onnxruntime's type strings
("tensor(float16)") as NumPy and PyTorch dtypes, which packages use to allocate bound outputs.
PyTorch is imported only by the calls that return its dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onemodel.tensors import numpy_dtype_for_onnx


def _code(ort_type: str) -> int:
    name = ort_type.removeprefix("tensor(").removesuffix(")").upper()
    try:
        return onnx.TensorProto.DataType.Value(name)
    except ValueError:
        raise ValueError(f"{ort_type} is not an onnxruntime tensor type") from None


class TypeHelper:
    @staticmethod
    def ort_type_to_numpy_type(ort_type: str) -> Any:
        return numpy_dtype_for_onnx(_code(ort_type)).type

    @staticmethod
    def ort_type_to_torch_type(ort_type: str) -> Any:
        import torch

        if _code(ort_type) == onnx.TensorProto.BFLOAT16:
            return torch.bfloat16
        return TypeHelper.numpy_type_to_torch_type(TypeHelper.ort_type_to_numpy_type(ort_type))

    @staticmethod
    def numpy_type_to_torch_type(numpy_type: Any) -> Any:
        import torch

        return torch.from_numpy(np.empty(0, numpy_type)).dtype

    @staticmethod
    def torch_type_to_numpy_type(torch_type: Any) -> Any:
        import torch

        return torch.empty(0, dtype=torch_type).numpy().dtype.type

    @staticmethod
    def get_input_type(session: Any, name: str) -> str:
        return next(arg.type for arg in session.get_inputs() if arg.name == name)

    @staticmethod
    def get_output_type(session: Any, name: str) -> str:
        return next(arg.type for arg in session.get_outputs() if arg.name == name)

    @staticmethod
    def get_io_numpy_type_map(session: Any) -> dict[str, Any]:
        """Every input's and output's NumPy type by name."""
        return {
            arg.name: TypeHelper.ort_type_to_numpy_type(arg.type)
            for arg in [*session.get_inputs(), *session.get_outputs()]
        }
