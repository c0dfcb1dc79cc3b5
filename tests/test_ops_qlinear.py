"""The com.microsoft quantized operators of operators/qlinear.py, one node at a time against
onnxruntime (graph optimisations off): random scales and zero points, uint8 and int8, the
broadcasts and attributes the quantizer writes. Integer outputs must be equal, float outputs
(QGemm without y_scale, MatMulIntegerToFloat) within 1e-5 relative."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session
from onemodel.errors import ErrorKind, SessionError

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(1717)
CODES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _codes(dtype, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _scale() -> np.ndarray:
    return np.array(RNG.uniform(0.002, 0.2), np.float32)


def _zero(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.array(RNG.integers(info.min // 2, info.max // 2 + 1), dtype)


def _model(op: str, inputs: list, attributes: dict | None, output_type) -> tuple[bytes, dict]:
    """One com.microsoft node and its feeds: array inputs are graph inputs, parameters (0-d
    arrays) initializers, None an absent input."""
    names, graph_inputs, initializers, feeds = [], [], [], {}
    for index, value in enumerate(inputs):
        if value is None:
            names.append("")
            continue
        name = f"in{index}"
        names.append(name)
        if value.ndim == 0:
            initializers.append(numpy_helper.from_array(value, name))
        else:
            code = helper.np_dtype_to_tensor_dtype(value.dtype)
            graph_inputs.append(helper.make_tensor_value_info(name, code, value.shape))
            feeds[name] = value
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, ["y"], name="the_node", domain="com.microsoft",
                            **(attributes or {}))  # fmt: skip
    out = output_type
    if out is None:
        out = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    result = helper.make_tensor_value_info("y", out, None)
    graph = helper.make_graph([node], op, graph_inputs, [result], initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model.SerializeToString(), feeds


def _run_both(op: str, inputs: list, attributes: dict | None = None, output_type=None):
    """Our and onnxruntime's outputs of the node `_model` builds."""
    model, feeds = _model(op, inputs, attributes, output_type)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (expected,) = reference.run(None, feeds)
    (got,) = Session.load(model).run(None, feeds)
    return got, expected


DTYPES = [pytest.param(np.uint8, id="uint8"), pytest.param(np.int8, id="int8")]
TRIALS = range(4)


def _triple(dtype, *shape: int) -> list:
    return [_codes(dtype, *shape), _scale(), _zero(dtype)]


@pytest.mark.parametrize("trial", TRIALS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((2, 3, 20), (2, 3, 20)), ((2, 3, 20), (20,)), ((2, 3, 20), (2, 3, 1)), ((3, 1), (1, 20)),
     ((1,), (4, 9)), ((4, 9), (1,))],
)  # fmt: skip
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_operators_equal_onnxruntime(op, a_shape, b_shape, dtype, trial) -> None:
    inputs = [*_triple(dtype, *a_shape), *_triple(dtype, *b_shape), _scale(), _zero(dtype)]
    got, expected = _run_both(op, inputs)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("trial", TRIALS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("op", "attributes"),
    [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
     ("QLinearGlobalAveragePool", {}), ("QLinearGlobalAveragePool", {"channels_last": 1}),
     ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
     ("QLinearAveragePool", {"kernel_shape": [2, 2], "count_include_pad": 1, "pads": [1, 0, 1, 0]}),
     ("QLinearSoftmax", {"opset": 13, "axis": -1}), ("QLinearSoftmax", {"opset": 13, "axis": 1}),
     ("QLinearSoftmax", {"opset": 11, "axis": 1})],
)  # fmt: skip
def test_unary_operators_equal_onnxruntime(op, attributes, dtype, trial) -> None:
    inputs = [*_triple(dtype, 2, 5, 7, 6), _scale(), _zero(dtype)]
    if op == "QLinearSoftmax":
        inputs[3] = np.array(1 / 256, np.float32)  # what the quantizer gives a softmax
        inputs[4] = np.array(0 if dtype == np.uint8 else -128, dtype)
    got, expected = _run_both(op, inputs, attributes)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("trial", TRIALS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_concat_requantizes_as_onnxruntime(dtype, trial) -> None:
    y_scale, y_zero = _scale(), _zero(dtype)
    same = [_codes(dtype, 2, 3, 4), y_scale, y_zero]  # copied as they are
    inputs = [y_scale, y_zero, *_triple(dtype, 2, 5, 4), *same, *_triple(dtype, 2, 1, 4)]
    got, expected = _run_both("QLinearConcat", inputs, {"axis": 1}, output_type=CODES[dtype])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("trial", TRIALS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_where_requantizes_as_onnxruntime(dtype, trial) -> None:
    z_scale, z_zero = _scale(), _zero(dtype)
    condition = RNG.random((3, 1, 6)) > 0.4
    inputs = [condition, *_triple(dtype, 3, 4, 6), *_triple(dtype, 4, 1), z_scale, z_zero]
    if trial == 0:  # y already has z's parameters: copied
        inputs[5], inputs[6] = z_scale, z_zero
    got, expected = _run_both("QLinearWhere", inputs, output_type=CODES[dtype])
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("trial", TRIALS)
@pytest.mark.parametrize("quantized_output", [True, False], ids=["quantized", "float"])
@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_qgemm_equals_onnxruntime(dtype, per_column, quantized_output, trial) -> None:
    a = _codes(dtype, 5, 24)
    b = (_codes(np.int8, 7, 24) // 2).astype(np.int8)  # 7 bits: see test_quantized_models
    b_scale = RNG.uniform(0.002, 0.2, 7).astype(np.float32) if per_column else _scale()
    b_zero = np.zeros(7, np.int8) if per_column else np.array(0, np.int8)
    bias = RNG.integers(-5000, 5000, 7).astype(np.int32)
    tail = [_scale(), _zero(dtype)] if quantized_output else []
    inputs = [a, _scale(), _zero(dtype), b, b_scale, b_zero, bias, *tail]
    if per_column:  # parameters per column are graph inputs of rank 1
        inputs[4], inputs[5] = b_scale, b_zero
    output = CODES[dtype] if quantized_output else TensorProto.FLOAT
    got, expected = _run_both("QGemm", inputs, {"transB": 1, "alpha": 0.5}, output_type=output)
    if quantized_output:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=0)


@pytest.mark.parametrize("per_column", [False, True], ids=["per_tensor", "per_column"])
def test_matmul_integer_to_float_equals_onnxruntime(per_column) -> None:
    a, b = _codes(np.uint8, 2, 5, 24), (_codes(np.int8, 24, 7) // 2).astype(np.int8)
    b_scale = RNG.uniform(0.002, 0.2, 7).astype(np.float32) if per_column else _scale()
    inputs = [a, b, _scale(), b_scale, _zero(np.uint8), None,
              RNG.standard_normal(7).astype(np.float32)]  # fmt: skip
    got, expected = _run_both("MatMulIntegerToFloat", inputs, output_type=TensorProto.FLOAT)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_bad_input_is_a_session_error_naming_node_and_value() -> None:
    inputs = [*_triple(np.uint8, 2, 3), *_triple(np.uint8, 4, 5), _scale(), _zero(np.uint8)]
    model, feeds = _model("QLinearAdd", inputs, None, None)
    with pytest.raises(SessionError) as caught:
        Session.load(model).run(None, feeds)
    assert caught.value.kind == ErrorKind.INVALID_INPUT
    assert "the_node" in str(caught.value)
    assert "in0" in str(caught.value) or "in3" in str(caught.value)
