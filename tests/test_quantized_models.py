"""Models as onnxruntime.quantization.quantize_dynamic writes them, against onnxruntime with its
graph optimisations off: a CNN, an LSTM (com.microsoft.DynamicQuantizeLSTM) and a BERT-style
encoder block, built with onnx.helper and quantized in the test. Every integer intermediate
(exposed as an extra graph output) equals onnxruntime's, those after an LSTM's float output
excepted, and the float outputs agree within 1e-2. Weights are quantized with reduce_range
(7 bits): onnxruntime's uint8 × int8 product on x86 without VNNI saturates int16 pair sums
otherwise (test_onnxruntime_saturates_uint8_int8_pairs_without_vnni)."""

from __future__ import annotations

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
        helper.make_node("Sigmoid", ["a"], ["s"]),
        helper.make_node("Mul", ["a", "s"], ["m"]),
        helper.make_node("LeakyRelu", ["m"], ["l"], alpha=0.1),
        helper.make_node("AveragePool", ["l"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxPool", ["l"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["p", "mp"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    weights = [_weight("w1", 8, 3, 3, 3), _weight("b1", 8), _weight("w2", 8, 8, 3, 3),
               _weight("b2", 8), _weight("wf", 10, 16), _weight("bf", 10)]  # fmt: skip
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


def _fused_attention() -> tuple[onnx.GraphProto, tuple[int, ...]]:
    """A transformer optimizer's com.microsoft.Attention, which quantize_dynamic turns into
    QAttention."""
    width = 16
    nodes = [
        helper.make_node("Attention", ["x", "qkv", "qkv_bias"], ["context"], num_heads=2,
                         domain="com.microsoft"),
        helper.make_node("MatMul", ["context", "wo"], ["y"]),
    ]  # fmt: skip
    weights = [_weight("qkv", width, 3 * width), _weight("qkv_bias", 3 * width),
               _weight("wo", width, width)]  # fmt: skip
    return helper.make_graph(nodes, "attention", [_float("x", [2, 5, width])],
                             [_float("y", None)], weights), (2, 5, width)  # fmt: skip


MODELS = {
    "attention": _fused_attention,
    "cnn": _cnn,
    "lstm": lambda: _lstm("forward"),
    "lstm_bidirectional": lambda: _lstm("bidirectional"),
    "bert": _bert,
}


class _Calibration(quantization.CalibrationDataReader):
    """Four random batches for quantize_static's range estimates."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.batches = iter(
            [{"x": RNG.standard_normal(shape).astype(np.float32)} for _ in range(4)]
        )

    def get_next(self) -> dict | None:
        return next(self.batches, None)


def _quantized(
    tmp_path: Path, name: str, fmt: str = "dynamic", weights: str = "QInt8", **options
) -> tuple[onnx.ModelProto, tuple[int, ...]]:
    """The float model `name` quantized by quantize_dynamic, or by quantize_static in the
    QOperator or QDQ format (uint8 activations, int8 weights, 7 bits for the reason above)."""
    graph, shape = MODELS[name]()
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    source, target = tmp_path / f"{name}.onnx", tmp_path / f"{name}_{fmt}.onnx"
    onnx.save(model, source)
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's pre-processing advice
    types = quantization.QuantType
    if fmt == "dynamic":
        quantization.quantize_dynamic(source, target, weight_type=types.QInt8,
                                      reduce_range=True, **options)  # fmt: skip
    else:
        quantization.quantize_static(
            source, target, _Calibration(shape), quant_format=quantization.QuantFormat[fmt],
            activation_type=types.QUInt8, weight_type=types[weights], reduce_range=True,
            **options,
        )  # fmt: skip
    return onnx.load(target), shape


def _compare_every_value(model: onnx.ModelProto, shape: tuple[int, ...], lstm: bool) -> None:
    """Integer intermediates equal to onnxruntime's (optimisations off), y within 1e-2."""
    model = _with_every_value_exposed(model)
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = ort.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])  # fmt: skip
    names = [output.name for output in reference.get_outputs()]
    expected = dict(zip(names, reference.run(None, feeds), strict=True))
    got = dict(zip(names, Session.load(model.SerializeToString()).run(None, feeds), strict=True))
    integers = [n for n in names if expected[n].dtype.kind in "iu"]
    assert integers or lstm
    if lstm:
        # What follows DynamicQuantizeLSTM re-quantizes its float output, which differs from
        # onnxruntime's by the activation rounding the module docstring of qlinear.py names.
        np.testing.assert_allclose(got["Yh"], expected["Yh"], rtol=1e-2, atol=1e-2)
        integers = []
    for value in integers:
        np.testing.assert_array_equal(got[value], expected[value], err_msg=value)
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-2, atol=1e-2)


def _op_types(model: onnx.ModelProto) -> set[str]:
    return {f"{n.domain}.{n.op_type}".lstrip(".") for n in model.graph.node}


def _with_every_value_exposed(model: onnx.ModelProto) -> onnx.ModelProto:
    inferred = onnx.shape_inference.infer_shapes(model)
    declared = {output.name for output in inferred.graph.output}
    produced = {name for node in inferred.graph.node for name in node.output}
    inferred.graph.output.extend(
        v for v in inferred.graph.value_info if v.name in produced - declared
    )
    return inferred


DYNAMIC_OPS = {
    "attention": {"DynamicQuantizeLinear", "com.microsoft.QAttention"},
    "bert": {"DynamicQuantizeLinear", "MatMulInteger"},
    "cnn": {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"},
    "lstm": {"com.microsoft.DynamicQuantizeLSTM", "MatMulInteger"},
    "lstm_bidirectional": {"com.microsoft.DynamicQuantizeLSTM", "MatMulInteger"},
}


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantize_dynamic_models_match_onnxruntime(tmp_path, name: str, per_channel: bool):
    quantized, shape = _quantized(tmp_path, name, per_channel=per_channel)
    assert DYNAMIC_OPS[name] <= _op_types(quantized), _op_types(quantized)
    _compare_every_value(quantized, shape, lstm="lstm" in name)


STATIC_OPS = {
    ("cnn", "QOperator"): {
        "QLinearConv", "com.microsoft.QLinearAdd", "com.microsoft.QLinearSigmoid",
        "com.microsoft.QLinearMul", "com.microsoft.QLinearLeakyRelu",
        "com.microsoft.QLinearAveragePool", "com.microsoft.QLinearConcat",
        "com.microsoft.QLinearGlobalAveragePool", "com.microsoft.QGemm",
        "com.microsoft.QLinearSoftmax",
    },
    ("bert", "QOperator"): {"QLinearMatMul", "com.microsoft.QLinearAdd",
                            "com.microsoft.QLinearSoftmax"},
    ("lstm", "QOperator"): {"QLinearMatMul", "LSTM"},
    ("cnn", "QDQ"): {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm"},
    ("bert", "QDQ"): {"QuantizeLinear", "DequantizeLinear", "MatMul"},
    ("lstm", "QDQ"): {"QuantizeLinear", "DequantizeLinear", "LSTM"},
}  # fmt: skip


@pytest.mark.parametrize(("name", "fmt"), sorted(STATIC_OPS))
def test_quantize_static_models_match_onnxruntime(tmp_path, name: str, fmt: str):
    """The static quantizer's QOperator graphs hold the com.microsoft QLinear family, its QDQ
    graphs ONNX's QuantizeLinear/DequantizeLinear pairs around float operators."""
    quantized, shape = _quantized(tmp_path, name, fmt)
    assert STATIC_OPS[name, fmt] <= _op_types(quantized), _op_types(quantized)
    _compare_every_value(quantized, shape, lstm=False)


CONTRIB_QDQ = {
    "contrib_ops": {"weights": "QInt8", "extra_options": {"UseQDQContribOps": True}},
    "int4_weights": {"weights": "QInt4"},  # before opset 21, ONNX's types lack int4
}


@pytest.mark.parametrize("variant", sorted(CONTRIB_QDQ))
def test_quantize_static_contrib_qdq_matches_onnxruntime(tmp_path, variant: str):
    """quantize_static writes com.microsoft.QuantizeLinear/DequantizeLinear (ONNX's of opset
    21) with UseQDQContribOps, or for int4 weights in an opset-20 model."""
    quantized, shape = _quantized(tmp_path, "cnn", "QDQ", **CONTRIB_QDQ[variant])
    contrib = {"com.microsoft.QuantizeLinear", "com.microsoft.DequantizeLinear"}
    assert contrib <= _op_types(quantized), _op_types(quantized)
    # ONNX's shape inference has no schema for them: their outputs are declared here (a
    # quantized value has its zero point's type) so that every integer is compared.
    zero_points = {t.name: t.data_type for t in quantized.graph.initializer}
    quantized.graph.value_info.extend(
        helper.make_tensor_value_info(node.output[0], zero_points[node.input[2]], None)
        for node in quantized.graph.node
        if node.op_type == "QuantizeLinear" and node.domain == "com.microsoft"
    )
    _compare_every_value(quantized, shape, lstm=False)


FUSED_OPS = {
    ("bert", "dynamic"): {"com.microsoft.MatMulIntegerToFloat",
                          "com.microsoft.DynamicQuantizeMatMul"},
    ("lstm", "dynamic"): {"com.microsoft.DynamicQuantizeLSTM",
                          "com.microsoft.DynamicQuantizeMatMul"},
    ("cnn", "QDQ"): {"QLinearConv", "com.microsoft.QLinearAdd", "com.microsoft.QGemm",
                     "com.microsoft.QLinearConcat", "com.microsoft.QLinearSoftmax"},
    ("bert", "QDQ"): {"QLinearMatMul", "com.microsoft.QLinearAdd",
                      "com.microsoft.QLinearSoftmax"},
}  # fmt: skip


@pytest.mark.parametrize(("name", "fmt"), sorted(FUSED_OPS))
def test_models_onnxruntime_optimized_after_quantizing_match_it(tmp_path, name: str, fmt: str):
    """onnxruntime's own graph optimizer (level EXTENDED, saved with optimized_model_filepath)
    turns quantize_dynamic's products into MatMulIntegerToFloat and DynamicQuantizeMatMul and
    QDQ pairs into the QLinear operators; the saved file runs as onnxruntime runs it."""
    quantized, shape = _quantized(tmp_path, name, fmt)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(quantized.SerializeToString(), options,
                         providers=["CPUExecutionProvider"])  # fmt: skip
    optimized = onnx.load(tmp_path / "optimized.onnx")
    assert FUSED_OPS[name, fmt] <= _op_types(optimized), _op_types(optimized)
    _compare_every_value(optimized, shape, lstm="lstm" in name)


def test_onnxruntime_saturates_uint8_int8_pairs_without_vnni() -> None:
    """Why the models above use 7-bit weights: onnxruntime's AVX2 kernel (x86 without VNNI)
    sums the raw products of k = 2i and 2i + 1 in int16 with saturation (vpmaddubsw), so
    with full-range operands its MatMulInteger is either exact (VNNI, ARM) or this saturated
    sum; onemodel's is the exact sum ONNX defines. 7-bit weights cannot saturate a pair."""
    a = RNG.integers(0, 256, (8, 33)).astype(np.uint8)
    b = RNG.integers(-128, 128, (33, 6)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b", "a_zero", "b_zero"], ["y"])
    graph = helper.make_graph(
        [node], "matmul_integer", [helper.make_tensor_value_info("a", TensorProto.UINT8, a.shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.uint8(12), "a_zero"),
         numpy_helper.from_array(np.int8(3), "b_zero")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = ort.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"])  # fmt: skip
    (theirs,) = reference.run(None, {"a": a})
    (ours,) = Session.load(model.SerializeToString()).run(None, {"a": a})
    exact = (a.astype(np.int64) - 12) @ (b.astype(np.int64) - 3)
    np.testing.assert_array_equal(ours, exact)
    wide_a, wide_b = np.pad(a, ((0, 0), (0, 1))).astype(np.int64), np.pad(b, ((0, 1), (0, 0)))
    pairs = wide_a[:, 0::2, None] * wide_b[None, 0::2] + wide_a[:, 1::2, None] * wide_b[None, 1::2]
    saturated = np.clip(pairs, -32768, 32767).sum(1) - 12 * b.astype(np.int64).sum(0)
    saturated += -3 * a.astype(np.int64).sum(1)[:, None] + 33 * 12 * 3
    assert np.array_equal(theirs, exact) or np.array_equal(theirs, saturated)


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


_TYPED_OUTPUTS = {
    "DynamicQuantizeLinear": (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8),
    "MatMulInteger": (TensorProto.INT32,),
    "QEmbedLayerNormalization": (TensorProto.FLOAT, TensorProto.INT32),
    "QAttention": (TensorProto.FLOAT,),
}


@pytest.mark.parametrize("weights", ["QUInt8", "QInt8"])
def test_quantized_optimized_bert_with_qembedlayernormalization(tmp_path, weights: str):
    """quantize_dynamic on the transformer optimizer's BERT (the committed golden) writes
    QEmbedLayerNormalization for its EmbedLayerNormalization, and QAttention: every integer
    its quantized operators make equals onnxruntime's (optimisations off), the embedding within
    1e-5 and the output within 1e-2. (The optimizer's contrib operators have no ONNX type
    inference, so the quantizer is told their tensors are float32.)"""
    golden = Path(__file__).parent / "models" / "real" / "ortopt-bert-o99"
    target = tmp_path / "quantized.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    quantization.quantize_dynamic(
        golden.with_suffix(".onnx"), target, weight_type=quantization.QuantType[weights],
        reduce_range=weights == "QInt8", extra_options={"DefaultTensorType": TensorProto.FLOAT},
    )  # fmt: skip
    model = onnx.load(target)
    assert {"com.microsoft.QEmbedLayerNormalization", "com.microsoft.QAttention"} <= _op_types(
        model
    )
    declared = {output.name for output in model.graph.output}
    model.graph.output.extend(
        helper.make_tensor_value_info(name, code, None)
        for node in model.graph.node
        for name, code in zip(node.output, _TYPED_OUTPUTS.get(node.op_type, ()), strict=False)
        if name and name not in declared
    )
    with np.load(golden.with_suffix(".inputs.npz")) as stored:
        feeds = {key: stored[key] for key in stored.files if ":" not in key}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString()
    reference = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    names = [output.name for output in reference.get_outputs()]
    expected = dict(zip(names, reference.run(None, feeds), strict=True))
    got = dict(zip(names, Session.load(data).run(None, feeds), strict=True))
    integers = [name for name in names if expected[name].dtype.kind in "iu"]
    assert len(integers) >= 20
    for name in integers:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
    embedding = next(n.output[0] for n in model.graph.node if n.op_type.startswith("QEmbed"))
    np.testing.assert_allclose(got[embedding], expected[embedding], rtol=1e-5, atol=1e-5)
    for name in declared:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-2, atol=1e-2)


def test_qembedlayernormalization_refuses_a_scale_per_row(tmp_path):
    golden = Path(__file__).parent / "models" / "real" / "ortopt-bert-o99.onnx"
    target = tmp_path / "quantized.onnx"
    logging.getLogger().setLevel(logging.ERROR)
    default_type = {"DefaultTensorType": TensorProto.FLOAT}
    quantization.quantize_dynamic(golden, target, weight_type=quantization.QuantType.QUInt8,
                                  extra_options=default_type)  # fmt: skip
    model = onnx.load(target)
    node = next(n for n in model.graph.node if n.op_type == "QEmbedLayerNormalization")
    scale = next(t for t in model.graph.initializer if t.name == node.input[8])
    scale.CopyFrom(numpy_helper.from_array(np.ones(100, np.float32), scale.name))
    session = Session.load(model.SerializeToString())
    with np.load(golden.with_suffix(".inputs.npz")) as stored:
        feeds = {key: stored[key] for key in stored.files if ":" not in key}
    with pytest.raises(SessionError, match="per-tensor") as caught:
        session.run(None, feeds)
    assert caught.value.kind is ErrorKind.INVALID_INPUT
    assert node.input[8] in str(caught.value)


@pytest.mark.parametrize(
    ("block_size", "symmetric"), [(32, True), (16, False)], ids=["b32_symmetric", "b16_zero_points"]
)
def test_matmul_nbits_quantizer_output_matches_onnxruntime(block_size: int, symmetric: bool):
    """onnxruntime.quantization's MatMulNBitsQuantizer (4-bit blockwise weights, with zero
    points when asymmetric) on the committed optimum BERT: com.microsoft.MatMulNBits with
    accuracy_level 0, where onnxruntime multiplies the dequantized weights in float32 too."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    golden = Path(__file__).parent / "models" / "real" / "optimum-bert"
    logging.getLogger().setLevel(logging.ERROR)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(golden.with_suffix(".onnx")), block_size=block_size, is_symmetric=symmetric
    )
    quantizer.process()
    model = quantizer.model.model
    assert sum(node.op_type == "MatMulNBits" for node in model.graph.node) >= 6
    with np.load(golden.with_suffix(".inputs.npz")) as stored:
        feeds = {key: stored[key] for key in stored.files if ":" not in key}
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString()
    expected = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(
        None, feeds
    )
    for got, want in zip(Session.load(data).run(None, feeds), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
