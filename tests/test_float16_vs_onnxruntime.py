"""float16 models against onnxruntime: each operator alone, then a float16 ResNet-50.

onnxruntime's CPU provider has no float16 kernel for most operators on x86: it casts their
inputs to float32, runs the float32 kernel and casts the result back, so a lone float16 node
is its float32 computation rounded once. Where ONNX leaves the intermediate precision open
(Gemm's epilogue, pooling and reduction sums) onemodel's fast mode matches that bit for bit;
Conv and MatMul sum in float32 in another order (a few ulps on cancelling sums). Softmax keeps
ONNX's own step-by-step float16 definition, which a conformance case tells apart.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(0)


def _half(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float16)


def _single_node(node, feeds: dict, initializers: dict) -> bytes:
    graph = helper.make_graph(
        [node], node.op_type,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT16, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _onnxruntime(model: bytes, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


CASES = {
    "Gemm": (
        helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5, beta=2.0),
        {"x": _half(2, 512)}, {"w": _half(300, 512, scale=0.05), "b": _half(300)},
    ),
    "GlobalAveragePool": (
        helper.make_node("GlobalAveragePool", ["x"], ["y"]), {"x": _half(1, 256, 7, 7, scale=3)}, {}
    ),
    "AveragePool": (
        helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3]),
        {"x": _half(1, 16, 12, 12, scale=3)}, {},
    ),
    "ReduceMean": (
        helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1]), {"x": _half(8, 768, scale=3)}, {}
    ),
    "BatchNormalization": (
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
        {"x": _half(1, 32, 8, 8)},
        {"s": _half(32), "b": _half(32), "m": _half(32), "v": np.abs(_half(32)) + np.float16(0.5)},
    ),
    "Add": (helper.make_node("Add", ["x", "z"], ["y"]), {"x": _half(1000)}, {"z": _half(1000)}),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_lone_float16_operator_rounds_once_as_onnxruntime(op: str) -> None:
    node, feeds, initializers = CASES[op]
    model = _single_node(node, feeds, initializers)
    (expected,) = _onnxruntime(model, feeds)
    (got,) = Session.load(model).run(None, feeds)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("node", "feeds", "initializers"),
    [
        (
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            {"x": _half(1, 64, 10, 10)},
            {"w": _half(64, 64, 3, 3, scale=0.05)},
        ),
        (
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            {"x": _half(4, 512)},
            {"w": _half(512, 256, scale=0.05)},
        ),
    ],
    ids=["Conv", "MatMul"],
)
def test_float16_products_sum_in_float32_as_onnxruntime(node, feeds, initializers) -> None:
    """Both sum in float32 and round once; only the order of the float32 sums differs, which
    moves a rounding by one float16 step now and then (the outputs are of order 1)."""
    model = _single_node(node, feeds, initializers)
    (expected,) = _onnxruntime(model, feeds)
    (got,) = Session.load(model).run(None, feeds)
    assert np.mean(got != expected) < 0.01
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3)
