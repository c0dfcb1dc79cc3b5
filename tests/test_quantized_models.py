"""Models as onnxruntime.quantization.quantize_dynamic writes them, against onnxruntime with its
graph optimisations off: a CNN, an LSTM (com.microsoft.DynamicQuantizeLSTM) and a BERT-style
encoder block, built with onnx.helper and quantized in the test. Every integer intermediate
(exposed as an extra graph output) equals onnxruntime's, those after an LSTM's float output
excepted, and the float outputs agree within 1e-2. Weights are quantized with reduce_range
(7 bits): onnxruntime's uint8 × int8 product on x86 without VNNI saturates int16 pair sums
otherwise (see test_ops_quant_losses.py)."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session
from onemodel.errors import ErrorKind, SessionError

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

RNG = np.random.default_rng(17)


def _weight(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def _float(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _cnn() -> tuple[onnx.GraphProto, tuple[int, ...]]:
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "wf"], ["y"]),
    ]
    weights = [_weight("w1", 8, 3, 3, 3), _weight("b1", 8), _weight("w2", 8, 8, 3, 3),
               _weight("b2", 8), _weight("wf", 8, 10)]  # fmt: skip
    return helper.make_graph(nodes, "cnn", [_float("x", [1, 3, 8, 8])], [_float("y", None)],
                             weights), (1, 3, 8, 8)  # fmt: skip


def _lstm(direction: str) -> tuple[onnx.GraphProto, tuple[int, ...]]:
    hidden, size, dirs = 8, 6, 2 if direction == "bidirectional" else 1
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "Yh"], hidden_size=hidden,
                         direction=direction),
        helper.make_node("MatMul", ["Yh", "wo"], ["y"]),
    ]  # fmt: skip
    weights = [_weight("W", dirs, 4 * hidden, size), _weight("R", dirs, 4 * hidden, hidden),
               _weight("B", dirs, 8 * hidden), _weight("wo", hidden, 4)]  # fmt: skip
    return helper.make_graph(nodes, "lstm", [_float("x", [5, 2, size])], [_float("y", None)],
                             weights), (5, 2, size)  # fmt: skip


def _bert() -> tuple[onnx.GraphProto, tuple[int, ...]]:
    width = 16
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q0"]),
        helper.make_node("Add", ["q0", "bq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k0"]),
        helper.make_node("Transpose", ["k0"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"]),
        helper.make_node("MatMul", ["p", "x"], ["context"]),
        helper.make_node("Add", ["context", "x"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "ln_s", "ln_b"], ["ln"]),
        helper.make_node("MatMul", ["ln", "w1"], ["h0"]),
        helper.make_node("Gelu", ["h0"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["y"]),
    ]
    weights = [_weight("wq", width, width), _weight("bq", width), _weight("wk", width, width),
               _weight("ln_s", width), _weight("ln_b", width), _weight("w1", width, 32),
               _weight("w2", 32, width)]  # fmt: skip
    return helper.make_graph(nodes, "bert", [_float("x", [2, 5, width])], [_float("y", None)],
                             weights), (2, 5, width)  # fmt: skip


MODELS = {
    "cnn": _cnn,
    "lstm": lambda: _lstm("forward"),
    "lstm_bidirectional": lambda: _lstm("bidirectional"),
    "bert": _bert,
}


def _quantized(tmp_path: Path, name: str, **options) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    graph, shape = MODELS[name]()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    source, target = tmp_path / f"{name}.onnx", tmp_path / f"{name}_q.onnx"
    onnx.save(model, source)
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's pre-processing advice
    quantization.quantize_dynamic(source, target, weight_type=quantization.QuantType.QInt8,
                                  reduce_range=True, **options)  # fmt: skip
    return onnx.load(target), shape


def _with_every_value_exposed(model: onnx.ModelProto) -> onnx.ModelProto:
    inferred = onnx.shape_inference.infer_shapes(model)
    declared = {output.name for output in inferred.graph.output}
    inferred.graph.output.extend(v for v in inferred.graph.value_info if v.name not in declared)
    return inferred


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantize_dynamic_models_match_onnxruntime(tmp_path, name: str, per_channel: bool):
    quantized, shape = _quantized(tmp_path, name, per_channel=per_channel)
    ops = collections.Counter(f"{n.domain}.{n.op_type}".lstrip(".") for n in quantized.graph.node)
    expected_op = "com.microsoft.DynamicQuantizeLSTM" if "lstm" in name else "MatMulInteger"
    assert expected_op in ops, ops
    model = _with_every_value_exposed(quantized)
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = ort.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])  # fmt: skip
    names = [output.name for output in reference.get_outputs()]
    expected = dict(zip(names, reference.run(None, feeds), strict=True))
    got = dict(zip(names, Session.load(model.SerializeToString()).run(None, feeds), strict=True))
    integers = [n for n in names if expected[n].dtype.kind in "iu"]
    if "lstm" in name:
        # What follows DynamicQuantizeLSTM re-quantizes its float output, which differs from
        # onnxruntime's by the activation rounding the module docstring of qlinear.py names.
        np.testing.assert_allclose(got["Yh"], expected["Yh"], rtol=1e-2, atol=1e-2)
        integers = []
    for value in integers:
        np.testing.assert_array_equal(got[value], expected[value], err_msg=value)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-2, atol=1e-2)


def test_dynamic_quantize_lstm_refuses_a_scale_of_the_wrong_shape(tmp_path):
    quantized, _ = _quantized(tmp_path, "lstm")
    lstm = next(n for n in quantized.graph.node if n.op_type == "DynamicQuantizeLSTM")
    scale = next(i for i in quantized.graph.initializer if i.name == lstm.input[8])
    scale.CopyFrom(numpy_helper.from_array(np.ones((3,), np.float32), scale.name))
    session = Session.load(quantized.SerializeToString())
    with pytest.raises(SessionError) as caught:
        session.run(None, {"x": np.zeros((5, 2, 6), np.float32)})
    assert caught.value.kind == ErrorKind.INVALID_INPUT
    assert lstm.name in str(caught.value) and scale.name in str(caught.value)
