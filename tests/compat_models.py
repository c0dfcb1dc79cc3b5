"""Small models the onnxruntime API tests share (built here, never taken from onnxruntime)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onemodel.compat

WEIGHT = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)


def modules() -> list:
    """The shim, and the real onnxruntime where it is installed: tests run on both."""
    found = [onemodel.compat.onnxruntime]
    try:
        import onnxruntime
    except ImportError:
        return found
    if onnxruntime is not onemodel.compat.onnxruntime:
        found.append(onnxruntime)
    return found


def module_ids() -> list[str]:
    return ["shim", "onnxruntime"][: len(modules())]


def _model(graph: onnx.GraphProto, opset: int = 17) -> onnx.ModelProto:
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def scale(dims: Sequence = (3, 2), dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """Y = X * W with W a 3x2 initializer; X declared with `dims`."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "W"], ["Y"], name="mul_0")],
        "scale",
        [helper.make_tensor_value_info("X", dtype, list(dims))],
        [helper.make_tensor_value_info("Y", dtype, [3, 2])],
        [numpy_helper.from_array(WEIGHT.astype(helper.tensor_dtype_to_np_dtype(dtype)), "W")],
    )
    return _model(graph)


def add_mul_add() -> onnx.ModelProto:
    """Three named nodes, ((A + B) * C) + A, for per-node profiles and assignment info."""
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 4]) for n in "ABC"]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["A", "B"], ["s"], name="add_0"),
            helper.make_node("Mul", ["s", "C"], ["p"], name="mul_0"),
            helper.make_node("Add", ["p", "A"], ["Y"], name="add_1"),
        ],
        "add_mul_add",
        value,
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 4])],
    )
    return _model(graph)


def identity(dims: Sequence | None, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"], name="id")],
        "identity",
        [helper.make_tensor_value_info("X", dtype, None if dims is None else list(dims))],
        [helper.make_tensor_value_info("Y", dtype, None)],
    )
    return _model(graph)


def scalar_scale() -> onnx.ModelProto:
    """Y = X * sr with `sr` declared rank 0 int64, as a VAD model's sample rate."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT, name="cast"),
            helper.make_node("Mul", ["X", "srf"], ["Y"], name="mul"),
        ],
        "scalar_scale",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    return _model(graph)
