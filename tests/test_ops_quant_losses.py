"""Quantization operators (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul, QLinearConv) and the classification losses (NegativeLogLikelihoodLoss,
SoftmaxCrossEntropyLoss): the ONNX backend conformance node cases of these op types, onnxruntime
as an oracle, and what onnxruntime does not run (narrow types, per-row zero points, refusals).
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import case_params, node_cases, run_case
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto
from operator_harness import assert_matches_onnxruntime as matches_onnxruntime
from operator_harness import refused, run_node

from onemodel.errors import ErrorKind

OP_TYPES = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
    "ConvInteger", "QLinearMatMul", "QLinearConv", "NegativeLogLikelihoodLoss",
    "SoftmaxCrossEntropyLoss",
})  # fmt: skip
RNG = np.random.default_rng(20261130)

# -- the ONNX backend conformance node cases -------------------------------------------------

CASES = node_cases(OP_TYPES)


@pytest.mark.parametrize("name", case_params(CASES))
def test_conformance(name: str) -> None:
    run_case(CASES[name])


def test_every_op_type_has_conformance_cases() -> None:
    assert {case.op_type for case in CASES.values()} == OP_TYPES


# -- helpers ---------------------------------------------------------------------------------


def assert_matches_onnxruntime(
    op_type: str,
    inputs: list,
    attributes: dict | None = None,
    *,
    opset: int,
    outputs: int = 1,
    rtol: float = 0.0,
    atol: float = 0.0,
) -> list[np.ndarray]:
    """Bit-identical integer outputs (and floats within rtol/atol) to onnxruntime's, whose
    output types are its own."""
    return matches_onnxruntime(
        op_type, inputs, attributes, opset=opset, output_types=[None] * outputs, rtol=rtol,
        atol=atol,
    )  # fmt: skip


def integers(dtype: type, *shape: int) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def scales(*shape: int) -> np.ndarray:
    return RNG.uniform(0.05, 2.0, shape).astype(np.float32)


# -- QuantizeLinear --------------------------------------------------------------------------

TIES = np.array(
    [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 128.5, -128.5, -129.5, 254.5, 255.5, 1e9,
     -1e9, np.nan, np.inf, -np.inf, -0.0],
    dtype=np.float32,
)  # fmt: skip


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset", [10, 13, 19, 21])
def test_quantize_rounds_half_to_even_and_saturates(dtype: type, opset: int) -> None:
    assert_matches_onnxruntime("QuantizeLinear", [TIES, np.float32(1), dtype(3)], opset=opset)


@pytest.mark.parametrize("opset", [19, 21, 23])
def test_quantize_float16_divides_as_onnxruntime(opset: int) -> None:
    """Before opset 23 the float16 quotient is formed in float32 unrounded; from 23 it is
    rounded to float16 (`precision` defaults to the scale's type). The random values near the
    grid's ties tell the two apart (a float16 quotient moves about 4 % of them)."""
    scale = np.float16(0.0137)
    with np.errstate(over="ignore"):
        ties = TIES.astype(np.float16)
    grid = ((np.arange(-200, 200) + 0.5) * float(scale)).astype(np.float16)
    wide = (RNG.standard_normal(3000) * 60 * float(scale)).astype(np.float16)
    x = np.concatenate([ties, grid, wide])
    assert_matches_onnxruntime("QuantizeLinear", [x, scale, np.int8(2)], opset=opset)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "block"])
def test_quantize_granularities_match_onnxruntime(dtype: type, granularity: str) -> None:
    x = (RNG.standard_normal((4, 6, 5)) * 100).astype(np.float32)
    attributes: dict = {}
    if granularity == "tensor":
        scale, zero = np.float32(0.5), dtype(3)
        step = scale
    elif granularity == "axis":
        scale, zero = scales(6), RNG.integers(0, 10, 6).astype(dtype)
        step = scale.reshape(6, 1)
    else:
        scale, zero = scales(4, 3, 5), RNG.integers(0, 10, (4, 3, 5)).astype(dtype)
        step, attributes = np.repeat(scale, 2, axis=1), {"block_size": 2}
    assert_matches_onnxruntime("QuantizeLinear", [x, scale, zero], attributes, opset=21)
    (y,) = run_node("QuantizeLinear", [x, scale, zero], attributes, opset=21)
    (again,) = run_node("DequantizeLinear", [y, scale, zero], attributes, opset=21)
    assert again.dtype == np.float32  # and the round trip's error is within half a step:
    step = np.broadcast_to(step, x.shape)
    inside = (y != np.iinfo(dtype).min) & (y != np.iinfo(dtype).max)
    assert np.all(np.abs(again - x)[inside] <= step[inside] / 2 * (1 + 1e-6))


@pytest.mark.parametrize("saturate", [0, 1])
def test_quantize_to_float8e4m3fn_matches_onnxruntime(saturate: int) -> None:
    x = np.concatenate([
        TIES, (RNG.standard_normal(200) * 300).astype(np.float32),
        np.array([448, 449, 463.9, 464, 465, 479, 1e-9, -1e-9, 2**-10], np.float32),
    ])  # fmt: skip
    # Without saturation onnxruntime gives 448 for [480, 496), where the spec says NaN.
    x = x[(np.abs(x) < 480) | (np.abs(x) >= 496) | np.isnan(x)]
    zero = np.array(0, ml_dtypes.float8_e4m3fn)
    assert_matches_onnxruntime(
        "QuantizeLinear", [x, np.float32(1), zero], {"saturate": saturate}, opset=19
    )


@pytest.mark.parametrize(
    ("dtype", "saturated", "unsaturated"),
    [
        (ml_dtypes.float8_e4m3fn, 448, np.nan),
        (ml_dtypes.float8_e4m3fnuz, 240, np.nan),
        (ml_dtypes.float8_e5m2, 57344, np.inf),
        (ml_dtypes.float8_e5m2fnuz, 57344, np.nan),
    ],
)
def test_quantize_to_float8_follows_the_saturation_table(
    dtype: type, saturated: float, unsaturated: float
) -> None:
    x = np.array([1e6, np.inf, -np.inf, np.nan, 2.5], np.float32)
    zero = np.zeros((1,), dtype)
    (y,) = run_node("QuantizeLinear", [x, np.float32(2), zero], opset=19)
    np.testing.assert_array_equal(
        y.astype(np.float32), [saturated, saturated, -saturated, np.nan, 1.25]
    )
    (y,) = run_node("QuantizeLinear", [x, np.float32(2), zero], {"saturate": 0}, opset=19)
    np.testing.assert_array_equal(y.astype(np.float32)[:2], [unsaturated, unsaturated])


@pytest.mark.parametrize(
    ("dtype", "expected", "opset"),
    [
        (ml_dtypes.int4, [-8, -8, 7, 0, 2, 2, 3, -7, 7], 21),
        (ml_dtypes.uint4, [0, 0, 15, 0, 2, 2, 3, 0, 15], 21),
        (ml_dtypes.int2, [-2, -2, 1, 0, 1, 1, 1, -2, 1], 25),
        (ml_dtypes.uint2, [0, 0, 3, 0, 2, 2, 3, 0, 3], 25),
    ],
)
def test_quantize_to_narrow_integers(dtype: type, expected: list, opset: int) -> None:
    x = np.array([np.nan, -np.inf, np.inf, 0.5, 1.5, 2.5, 3.4, -7.0, 99.0], np.float32)
    (y,) = run_node("QuantizeLinear", [x, np.float32(1), np.array(0, dtype)], opset=opset)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.astype(np.int32), expected)


def test_quantize_to_float4_rounds_half_to_even_and_saturates() -> None:
    x = np.array([0.25, 0.75, 2.5, 5.0, 7.0, -7.0, 1e9, -np.inf], np.float32)
    zero = np.array(0, ml_dtypes.float4_e2m1fn)
    (y,) = run_node("QuantizeLinear", [x, np.float32(1), zero], opset=23)
    assert y.dtype == ml_dtypes.float4_e2m1fn
    np.testing.assert_array_equal(y.astype(np.float32), [0, 1, 2, 4, 6, -6, 6, -6])


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (ml_dtypes.float6_e2m3fn, [0.25, 7.5, -7.5, 2.5]),
        (ml_dtypes.float6_e3m2fn, [0.3125, 8, -28, 2.5]),
    ],
)
def test_float6_round_trip_at_opset_28(dtype: type, expected: list) -> None:
    x = np.array([0.3, 7.9, -100, 2.6], np.float32)
    (y,) = run_node("QuantizeLinear", [x, np.float32(1), np.array(0, dtype)], opset=28)
    assert y.dtype == dtype and y.astype(np.float32).tolist() == expected
    (back,) = run_node("DequantizeLinear", [y, np.float32(2)], opset=28)
    assert back.tolist() == [2 * v for v in expected]
    refused(ErrorKind.INVALID_MODEL, "QuantizeLinear", [x, np.float32(1), np.array(0, dtype)],
            opset=25)  # fmt: skip


def test_quantize_output_dtype_and_default_type() -> None:
    x = np.array([1.0, -3.0, 700.0], np.float32)
    (y,) = run_node("QuantizeLinear", [x, np.float32(2)], {"output_dtype": TensorProto.INT16},
                    opset=21)  # fmt: skip
    assert y.dtype == np.int16 and y.tolist() == [0, -2, 350]
    (y,) = run_node("QuantizeLinear", [x, np.float32(2)], opset=21)
    assert y.dtype == np.uint8 and y.tolist() == [0, 0, 255]


def test_quantize_precision_attribute_chooses_the_division_type() -> None:
    # 2.5004 / 1 is 2.5 once rounded to float16, which rounds to 2; float32 keeps 2.5004 → 3.
    x, scale = np.array([2.5004], np.float32), np.float32(1)
    (wide,) = run_node("QuantizeLinear", [x, scale, np.uint8(0)], opset=23)
    (narrow,) = run_node("QuantizeLinear", [x, scale, np.uint8(0)],
                         {"precision": TensorProto.FLOAT16}, opset=23)  # fmt: skip
    assert wide.tolist() == [3] and narrow.tolist() == [2]


def test_quantize_bfloat16_rounds_the_quotient_to_bfloat16() -> None:
    x = np.array([2.5, 3.5, 257.0, -1.5], ml_dtypes.bfloat16)
    (y,) = run_node("QuantizeLinear", [x, np.array(1, ml_dtypes.bfloat16), np.int16(0)], opset=21)
    assert y.tolist() == [2, 4, 256, -2]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=1, max_size=20),
    st.floats(min_value=2**-10, max_value=2**10, width=32),
    st.integers(0, 255),
)
def test_quantize_uint8_is_the_spec_formula(values: list, scale: float, zero: int) -> None:
    x = np.array(values, np.float32)
    (y,) = run_node("QuantizeLinear", [x, np.float32(scale), np.uint8(zero)], opset=13)
    with np.errstate(all="ignore"):
        real = np.rint((x / np.float32(scale)).astype(np.float64)) + zero
    expected = np.where(np.isnan(real), 0, np.clip(real, 0, 255)).astype(np.uint8)
    np.testing.assert_array_equal(y, expected)


def test_quantize_refusals() -> None:
    x = np.ones((2, 3), np.float32)
    zero = np.zeros(2, np.uint8)
    error = refused(ErrorKind.INVALID_INPUT, "QuantizeLinear", [x, scales(2), zero], opset=13)
    assert "(2,)" in str(error) and "(2, 3)" in str(error)
    refused(ErrorKind.INVALID_INPUT, "QuantizeLinear", [x, scales(3), np.zeros(2, np.uint8)],
            opset=13)  # fmt: skip
    refused(ErrorKind.INVALID_INPUT, "QuantizeLinear", [x, scales(2, 3)], {"block_size": 2},
            opset=21)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "QuantizeLinear", [x, np.float32(1), np.int8(0)],
            {"output_dtype": TensorProto.UINT8}, opset=21)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "QuantizeLinear", [x, np.float32(1), np.int16(0)], opset=19)
    refused(ErrorKind.INVALID_MODEL, "QuantizeLinear", [x, np.float16(1)], opset=19)
    refused(ErrorKind.INVALID_INPUT, "QuantizeLinear", [x, scales(3)], opset=10)  # per tensor
    nonzero = np.array(1, ml_dtypes.float8_e4m3fn)
    refused(ErrorKind.UNSUPPORTED, "QuantizeLinear", [x, np.float32(1), nonzero], opset=19)


# -- DequantizeLinear ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
@pytest.mark.parametrize("granularity", ["tensor", "axis", "block"])
def test_dequantize_matches_onnxruntime(dtype: type, granularity: str) -> None:
    x = integers(dtype, 4, 6, 5)
    attributes: dict = {}
    if granularity == "tensor":
        scale, zero = np.float32(0.37), dtype(7)
    elif granularity == "axis":
        scale, zero = scales(5), RNG.integers(0, 10, 5).astype(dtype)
        attributes = {"axis": -1}
    else:
        scale, zero = scales(4, 3, 5), RNG.integers(0, 10, (4, 3, 5)).astype(dtype)
        attributes = {"block_size": 2}
    assert_matches_onnxruntime("DequantizeLinear", [x, scale, zero], attributes, opset=21)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16])
def test_dequantize_to_float16_rounds_once(dtype: type) -> None:
    x = integers(dtype, 50)
    assert_matches_onnxruntime("DequantizeLinear", [x, np.float16(0.37), dtype(7)], opset=21)


@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
     ml_dtypes.float8_e5m2fnuz],
)  # fmt: skip
def test_dequantize_float8_matches_onnxruntime(dtype: type) -> None:
    x = (RNG.standard_normal(64) * 50).astype(dtype)
    assert_matches_onnxruntime("DequantizeLinear", [x, np.float32(3)], opset=19)


def test_dequantize_narrow_types_and_output_dtype() -> None:
    x = np.array([-8, -1, 0, 7], ml_dtypes.int4)
    (y,) = run_node("DequantizeLinear", [x, np.float32(0.5), np.array(1, ml_dtypes.int4)],
                    opset=21)  # fmt: skip
    assert y.dtype == np.float32 and y.tolist() == [-4.5, -1.0, -0.5, 3.0]
    (y,) = run_node("DequantizeLinear", [x, np.float32(0.1)],
                    {"output_dtype": TensorProto.FLOAT16}, opset=23)  # fmt: skip
    assert y.dtype == np.float16
    np.testing.assert_array_equal(
        y, (x.astype(np.float64) * np.float64(np.float32(0.1))).astype(np.float16)
    )
    e8m0 = np.array(0.25, ml_dtypes.float8_e8m0fnu)
    (y,) = run_node("DequantizeLinear", [np.array([4, 9], np.uint8), e8m0],
                    {"output_dtype": TensorProto.BFLOAT16}, opset=24)  # fmt: skip
    assert y.dtype == ml_dtypes.bfloat16 and y.astype(np.float32).tolist() == [1.0, 2.25]


def test_dequantize_refusals() -> None:
    x = np.ones((2, 3), np.uint8)
    refused(ErrorKind.INVALID_MODEL, "DequantizeLinear", [x, np.float32(1), np.int8(0)], opset=13)
    refused(ErrorKind.INVALID_INPUT, "DequantizeLinear", [x, scales(2)], opset=13)
    refused(ErrorKind.INVALID_MODEL, "DequantizeLinear", [x.astype(np.int16), np.float32(1)],
            opset=19)  # fmt: skip
    e8m0 = np.array(1, ml_dtypes.float8_e8m0fnu)
    refused(ErrorKind.INVALID_MODEL, "DequantizeLinear", [x, e8m0], opset=24)
    f8 = np.ones(3, ml_dtypes.float8_e4m3fn)
    refused(ErrorKind.UNSUPPORTED, "DequantizeLinear", [f8, np.float32(1), f8[:1]], opset=19)


# -- DynamicQuantizeLinear -------------------------------------------------------------------


@pytest.mark.parametrize("shift", ["mixed", "positive", "negative", "zero"])
def test_dynamic_quantize_matches_onnxruntime(shift: str) -> None:
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x = {"mixed": x, "positive": np.abs(x) + 1, "negative": -np.abs(x) - 1, "zero": x * 0}[shift]
    assert_matches_onnxruntime("DynamicQuantizeLinear", [x], opset=11, outputs=3)


@pytest.mark.parametrize("trial", range(12))
def test_dynamic_quantize_of_values_on_the_grid_ties_matches_onnxruntime(trial: int) -> None:
    """Scale, zero point and every quantized value equal to onnxruntime's where x / scale is
    a tie of the grid (as near as float32 gets), over ranges of many sizes and offsets."""
    size = int(RNG.integers(1, 4000))
    x = (RNG.standard_normal(size) * RNG.uniform(0.01, 100) + RNG.uniform(-3, 3)).astype(np.float32)
    low, high = min(x.min(), np.float32(0)), max(x.max(), np.float32(0))
    scale = (high - low) / np.float32(255)
    ties = np.clip((np.arange(-300, 300) + np.float32(0.5)) * scale, low, high)
    x = np.concatenate([x, ties.astype(np.float32)])
    assert_matches_onnxruntime("DynamicQuantizeLinear", [x], opset=11, outputs=3)


def test_dynamic_quantize_leaves_nan_out_of_the_range() -> None:
    x = np.array([np.nan, -1.0, 0.0, 2.0], np.float32)
    y, scale, zero = run_node("DynamicQuantizeLinear", [x], opset=11, outputs=3)
    assert scale == np.float32(3) / np.float32(255) and zero == 85
    assert y.tolist() == [0, 0, 85, 255]


# -- MatMulInteger and QLinearMatMul ---------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 5, 17), (17, 6)), ((17,), (17, 6)), ((2, 17), (17,)), ((2, 1, 4, 17), (3, 17, 5))],
)
@pytest.mark.parametrize(("a_type", "b_type"), [(np.uint8, np.uint8), (np.int8, np.int8),
                                                (np.uint8, np.int8)])  # fmt: skip
def test_matmul_integer_matches_onnxruntime(
    a_shape: tuple, b_shape: tuple, a_type: type, b_type: type
) -> None:
    a, b = integers(a_type, *a_shape), integers(b_type, *b_shape)
    if (a_type, b_type) == (np.uint8, np.int8):
        # onnxruntime's AVX2 u8s8 kernel (vpmaddubsw) saturates each pair of products to int16;
        # 7-bit weights, as its quantizer's reduce_range writes them, keep every pair in range.
        b = (b // 2).astype(np.int8)
    assert_matches_onnxruntime("MatMulInteger", [a, b, a_type(12), b_type(3)], opset=10)
    b_zero = integers(b_type, b_shape[-1]) if len(b_shape) == 2 else None  # onnxruntime's limit
    assert_matches_onnxruntime("MatMulInteger", [a, b, None, b_zero], opset=10)


def test_matmul_integer_is_exact_over_the_full_uint8_int8_range() -> None:
    """ONNX defines the integer sum exactly; onnxruntime saturates it on AVX2 machines."""
    a, b = integers(np.uint8, 4, 64), integers(np.int8, 64, 5)
    a[0], b[:, 0] = 255, -128  # every pair of products is -65,280: far outside int16
    (y,) = run_node("MatMulInteger", [a, b, np.uint8(7), np.int8(-2)], opset=10)
    want = (a.astype(np.int64) - 7) @ (b.astype(np.int64) + 2)
    np.testing.assert_array_equal(y, want.astype(np.int32))


def test_matmul_integer_per_row_zero_point_of_a() -> None:
    a, b, a_zero = integers(np.uint8, 4, 9), integers(np.uint8, 9, 3), integers(np.uint8, 4)
    (y,) = run_node("MatMulInteger", [a, b, a_zero], opset=10)
    expected = (a.astype(np.int64) - a_zero[:, None]) @ b.astype(np.int64)
    np.testing.assert_array_equal(y, expected)


def test_matmul_integer_wraps_to_32_bits() -> None:
    k = 40_000  # 255 · 255 · 40000 > 2^31
    a, b = np.full((1, k), 255, np.uint8), np.full((k, 1), 255, np.uint8)
    (y,) = run_node("MatMulInteger", [a, b], opset=10)
    assert y.dtype == np.int32 and int(y[0, 0]) == np.int64(255 * 255 * k).astype(np.int32)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("granularity", ["tensor", "column"])
def test_qlinear_matmul_matches_onnxruntime(dtype: type, granularity: str) -> None:
    a, b = integers(dtype, 2, 7, 33), integers(dtype, 33, 9)
    b_scale, b_zero = np.float32(0.00705), dtype(7)
    if granularity == "column":
        b_scale, b_zero = RNG.uniform(0.001, 0.01, 9).astype(np.float32), np.zeros(9, dtype)
    inputs = [a, np.float32(0.0066), dtype(3), b, b_scale, b_zero, np.float32(0.0107), dtype(5)]
    assert_matches_onnxruntime("QLinearMatMul", inputs, opset=10)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((33,), (33, 9)), ((2, 33), (33,)), ((2, 1, 4, 33), (3, 33, 5))]
)
def test_qlinear_matmul_follows_numpy_shapes(a_shape: tuple, b_shape: tuple) -> None:
    a, b = integers(np.uint8, *a_shape), integers(np.uint8, *b_shape)
    inputs = [a, np.float32(0.0066), np.uint8(3), b, np.float32(0.00705), np.uint8(7),
              np.float32(0.0107), np.uint8(5)]  # fmt: skip
    assert_matches_onnxruntime("QLinearMatMul", inputs, opset=10)


def test_qlinear_matmul_per_row_scale_of_a() -> None:
    a, b = integers(np.uint8, 4, 6), integers(np.uint8, 6, 3)
    a_scale, a_zero = scales(4) / 50, integers(np.uint8, 4)
    inputs = [a, a_scale, a_zero, b, np.float32(0.02), np.uint8(128), np.float32(0.5), np.uint8(10)]
    (y,) = run_node("QLinearMatMul", inputs, opset=10)
    real = ((a.astype(np.float64) - a_zero[:, None]) * a_scale[:, None]) @ (
        (b.astype(np.float64) - 128) * np.float64(np.float32(0.02))
    )
    expected = np.clip(np.rint(real / np.float64(np.float32(0.5))) + 10, 0, 255)
    np.testing.assert_array_equal(y, expected.astype(np.uint8))


def test_qlinear_matmul_float8_operands() -> None:
    f8 = ml_dtypes.float8_e4m3fn
    a, b = RNG.standard_normal((3, 4)).astype(f8), RNG.standard_normal((4, 2)).astype(f8)
    zero = np.zeros((), f8)
    inputs = [a, np.float32(2), zero, b, np.float32(0.5), zero, np.float32(0.25), zero]
    (y,) = run_node("QLinearMatMul", inputs, opset=21)
    expected = (a.astype(np.float64) @ b.astype(np.float64)) * 2 * 0.5 / 0.25
    assert y.dtype == f8
    np.testing.assert_array_equal(y, expected.astype(np.float32).astype(f8))


# -- ConvInteger and QLinearConv -------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1]},
        {"group": 2, "dilations": [2, 1]},
        {"auto_pad": "SAME_UPPER"},
    ],
)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_conv_integer_matches_onnxruntime(attributes: dict, dtype: type) -> None:
    channels = 2 * attributes.get("group", 1)
    x, w = integers(dtype, 2, channels, 9, 8), integers(dtype, 6, 2, 3, 3)
    inputs = [x, w, dtype(100), dtype(2)]
    assert_matches_onnxruntime("ConvInteger", inputs, attributes, opset=10)


def test_conv_integer_per_channel_zero_point_and_padding_reads_the_zero_point() -> None:
    x, w = integers(np.uint8, 1, 2, 5, 5), integers(np.uint8, 3, 2, 3, 3)
    w_zero = integers(np.uint8, 3)
    (y,) = run_node("ConvInteger", [x, w, np.uint8(9), w_zero], {"pads": [1, 1, 1, 1]}, opset=10)
    for channel in range(3):
        inputs = [x, w[channel : channel + 1], np.uint8(9), w_zero[channel]]
        (part,) = run_node("ConvInteger", inputs, {"pads": [1, 1, 1, 1]}, opset=10)
        np.testing.assert_array_equal(y[:, channel : channel + 1], part)
    # An x equal to its zero point everywhere, padding included, gives zeros.
    (y,) = run_node("ConvInteger", [np.full((1, 2, 3, 3), 9, np.uint8), w, np.uint8(9)],
                    {"pads": [1, 1, 1, 1]}, opset=10)  # fmt: skip
    assert not y.any()


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_matches_onnxruntime(dtype: type, per_channel: bool) -> None:
    # Scales whose products stay clear of ties: onnxruntime rounds its multiplier to float32
    # (see test_qlinear_conv_rounds_the_exact_value).
    x, w = integers(dtype, 2, 4, 9, 8), integers(dtype, 6, 2, 3, 3)
    w_scale = scales(6) / 700 if per_channel else np.float32(0.00271)
    w_zero = np.zeros(6, dtype) if per_channel else dtype(0)
    bias = RNG.integers(-1000, 1000, 6).astype(np.int32)
    inputs = [x, np.float32(0.0123), dtype(3), w, w_scale, w_zero, np.float32(0.0517), dtype(5),
              bias]  # fmt: skip
    assert_matches_onnxruntime("QLinearConv", inputs, {"group": 2, "pads": [1, 1, 1, 1]}, opset=10)
    assert_matches_onnxruntime("QLinearConv", inputs[:8], {"group": 2, "strides": [2, 2]},
                               opset=10)  # fmt: skip


def test_qlinear_conv_rounds_the_exact_value() -> None:
    # 0.01 · 0.002 / 0.05 makes many results near k + 0.5; the float32 scales' exact product
    # decides each, where onnxruntime's float32 multiplier sometimes rounds the other way.
    x, w = integers(np.int8, 2, 4, 9, 8), integers(np.int8, 6, 2, 3, 3)
    bias = RNG.integers(-1000, 1000, 6).astype(np.int32)
    x_scale, w_scale, y_scale = np.float32(0.01), np.float32(0.002), np.float32(0.05)
    inputs = [x, x_scale, np.int8(3), w, w_scale, np.int8(0), y_scale, np.int8(5), bias]
    attributes = {"group": 2, "pads": [1, 1, 1, 1]}
    (y,) = run_node("QLinearConv", inputs, attributes, opset=10)
    (total,) = run_node("ConvInteger", [x, w, np.int8(3)], attributes, opset=10)
    total = total.astype(np.int64) + bias.reshape(-1, 1, 1)
    factor = Fraction(float(x_scale)) * Fraction(float(w_scale)) / Fraction(float(y_scale))
    expected = [min(127, max(-128, round(int(t) * factor) + 5)) for t in total.reshape(-1)]
    np.testing.assert_array_equal(y.reshape(-1), expected)  # Python's round: half to even


def test_quantized_product_refusals() -> None:
    a, b = integers(np.uint8, 2, 3), integers(np.uint8, 3, 4)
    refused(ErrorKind.INVALID_INPUT, "MatMulInteger", [a, b.T], opset=10)
    refused(ErrorKind.INVALID_INPUT, "MatMulInteger", [a, b, integers(np.uint8, 3)], opset=10)
    refused(ErrorKind.INVALID_MODEL, "MatMulInteger", [a, b, np.int8(0)], opset=10)
    refused(ErrorKind.INVALID_MODEL, "MatMulInteger", [a.astype(np.int32), b], opset=10)
    x, w = integers(np.uint8, 1, 2, 4, 4), integers(np.uint8, 3, 2, 2, 2)
    refused(ErrorKind.INVALID_INPUT, "ConvInteger", [x, w[:, :1]], opset=10)
    refused(ErrorKind.INVALID_INPUT, "ConvInteger", [x, w, None, integers(np.uint8, 2)], opset=10)
    inputs = [x, np.float32(1), np.uint8(0), w, np.float32(1), np.uint8(0), np.float32(1),
              np.uint8(0), np.zeros(2, np.int32)]  # fmt: skip
    refused(ErrorKind.INVALID_INPUT, "QLinearConv", inputs, opset=10)


# -- NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss -----------------------------------

LOSS_CASES = [
    (op, opset, reduction, shape, variant)
    for op, opsets in (
        ("NegativeLogLikelihoodLoss", (12, 13, 22)), ("SoftmaxCrossEntropyLoss", (12, 13))
    )
    for opset in opsets
    for reduction in ("none", "sum", "mean")
    for shape in ((4, 5), (3, 5, 2), (2, 5, 3, 4))
    for variant in ("plain", "weight_ignore", "double", "half")
]  # fmt: skip


@pytest.mark.parametrize(("op_type", "opset", "reduction", "shape", "variant"), LOSS_CASES)
def test_losses_match_onnxruntime(
    op_type: str, opset: int, reduction: str, shape: tuple, variant: str
) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    target = RNG.integers(0, 5, (shape[0], *shape[2:])).astype(np.int64)
    target.flat[0] = 2
    weight = RNG.uniform(0.1, 2, 5).astype(np.float32)
    inputs: list = [x, target]
    attributes: dict = {"reduction": reduction}
    rtol = 1e-5
    if variant == "weight_ignore":
        inputs, attributes["ignore_index"] = [x, target.astype(np.int32), weight], 2
    elif variant == "double":
        inputs, attributes["ignore_index"] = (
            [x.astype(np.float64), target, weight.astype(np.float64)],
            -1,
        )
    elif variant == "half":
        inputs, attributes["ignore_index"] = (
            [x.astype(np.float16), target, weight.astype(np.float16)],
            3,
        )
        rtol = 3e-3
    outputs = 2 if op_type == "SoftmaxCrossEntropyLoss" else 1
    assert_matches_onnxruntime(op_type, inputs, attributes, opset=opset, outputs=outputs,
                               rtol=rtol, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("op_type", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_losses_on_bfloat16_and_all_ignored(op_type: str) -> None:
    opset = 22 if op_type == "NegativeLogLikelihoodLoss" else 13
    x = RNG.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    target = np.array([1, 1, 1], np.int64)
    (loss,) = run_node(op_type, [x, target], {"reduction": "sum"}, opset=opset)
    (wide,) = run_node(op_type, [x.astype(np.float32), target], {"reduction": "sum"}, opset=opset)
    assert loss.dtype == ml_dtypes.bfloat16 and loss == wide.astype(ml_dtypes.bfloat16)
    (mean,) = run_node(op_type, [x, target], {"ignore_index": 1}, opset=opset)
    assert np.isnan(mean.astype(np.float32))  # 0 / 0, as onnxruntime
    refused(ErrorKind.INVALID_MODEL, op_type, [x, target], opset=opset - 1)


def test_losses_ignore_targets_outside_the_classes_only_when_ignored() -> None:
    x = np.log(np.full((2, 3), 1 / 3, np.float32))
    inputs = [x, np.array([-100, 2])]
    (loss,) = run_node("NegativeLogLikelihoodLoss", inputs, {"ignore_index": -100}, opset=13)
    np.testing.assert_allclose(loss, np.log(3), rtol=1e-6)
    for bad in (3, -1):
        error = refused(ErrorKind.INVALID_INPUT, "NegativeLogLikelihoodLoss",
                        [x, np.array([0, bad])], opset=13)  # fmt: skip
        assert str(bad) in str(error)


def test_loss_refusals() -> None:
    x, target = np.zeros((2, 3, 4), np.float32), np.zeros((2, 4), np.int64)
    refused(ErrorKind.INVALID_INPUT, "SoftmaxCrossEntropyLoss", [x, target[:, :3]], opset=13)
    refused(ErrorKind.INVALID_INPUT, "SoftmaxCrossEntropyLoss", [x, target, np.ones(4, np.float32)],
            opset=13)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "SoftmaxCrossEntropyLoss", [x, target, np.ones(3)], opset=13)
    refused(ErrorKind.INVALID_MODEL, "NegativeLogLikelihoodLoss", [x, target.astype(np.float32)],
            opset=13)  # fmt: skip
    refused(ErrorKind.INVALID_MODEL, "NegativeLogLikelihoodLoss", [x, target],
            {"reduction": "max"}, opset=13)  # fmt: skip
    refused(ErrorKind.INVALID_INPUT, "NegativeLogLikelihoodLoss", [x[0, 0], target[0]], opset=13)
