"""Small models the project builds itself, so a fresh install runs one without a download."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def mlp_model(
    features: int = 16, hidden: int = 32, classes: int = 4, seed: int = 0
) -> onnx.ModelProto:
    """A two-layer perceptron, y = relu(x·W1 + b1)·W2 + b2, with a symbolic batch dimension."""
    rng = np.random.default_rng(seed)
    weights = {
        "W1": rng.standard_normal((features, hidden)) / np.sqrt(features),
        "b1": rng.standard_normal(hidden) * 0.1,
        "W2": rng.standard_normal((hidden, classes)) / np.sqrt(hidden),
        "b2": rng.standard_normal(classes) * 0.1,
    }
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["xW1"], name="fc1"),
        helper.make_node("Add", ["xW1", "b1"], ["h_pre"], name="fc1_bias"),
        helper.make_node("Relu", ["h_pre"], ["h"], name="relu"),
        helper.make_node("MatMul", ["h", "W2"], ["hW2"], name="fc2"),
        helper.make_node("Add", ["hW2", "b2"], ["y"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", classes])],
        [numpy_helper.from_array(v.astype(np.float32), name) for name, v in weights.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onemodel.examples"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
