"""Neural-network operators: matmul, convolution, pooling, normalization, softmax, reductions
and dropout — unit tests through the operator harness, onnxruntime as an oracle, and the ONNX
backend conformance node cases of these op types.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from conformance_cases import case_params, node_cases, run_case
from exact_oracle import batched_oracle
from operator_harness import assert_matches_onnxruntime, refused, run_node

from onemodel.errors import ErrorKind
from onemodel.graph.operators.base import NeedsRunTimeValues

OP_TYPES = frozenset({
    "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "LpPool", "BatchNormalization", "LayerNormalization",
    "InstanceNormalization", "GroupNormalization", "LpNormalization", "Softmax", "LogSoftmax",
    "Hardmax", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
    "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    "Dropout",
})  # fmt: skip

# -- the ONNX backend conformance node cases ------------------------------------------------

CASES = node_cases(OP_TYPES)

EXPECTED_FAILURES = {
    # Training: random masks are not supported (refused by design).
    "test_training_dropout",
    "test_training_dropout_default",
    "test_training_dropout_default_mask",
    "test_training_dropout_mask",
}


@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance(name: str) -> None:
    run_case(CASES[name])


# -- helpers ---------------------------------------------------------------------------------

RNG = np.random.default_rng(20261129)


def normal(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- MatMul and Gemm -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3,), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((5, 2, 3), (3,)),
        ((3,), (5, 3, 4)),
        ((2, 1, 2, 3), (5, 3, 4)),
        ((4, 0), (0, 2)),
    ],
)
def test_matmul_follows_numpy_shapes(a_shape: tuple, b_shape: tuple) -> None:
    a, b = normal(*a_shape), normal(*b_shape)
    (result,) = run_node("MatMul", [a, b], opset=13)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert result.shape == expected.shape and result.dtype == np.float32
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
def test_matmul_on_integers_keeps_the_type(dtype: type) -> None:
    a = RNG.integers(0, 100, (2, 3, 4)).astype(dtype)
    b = RNG.integers(0, 100, (4, 5)).astype(dtype)
    (result,) = run_node("MatMul", [a, b], opset=13)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result, a @ b)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_matmul_on_narrow_floats_accumulates_in_float32(dtype: object) -> None:
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    a, b = normal(3, 64).astype(dtype), normal(64, 2).astype(dtype)
    (result,) = run_node("MatMul", [a, b], opset=13)
    assert result.dtype == dtype
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(result, expected)


def test_matmul_refuses_mismatched_shapes() -> None:
    error = refused(ErrorKind.INVALID_INPUT, "MatMul", [normal(2, 3), normal(4, 5)])
    assert "(2, 3)" in str(error) and "(4, 5)" in str(error)
    refused(ErrorKind.INVALID_INPUT, "MatMul", [normal(2, 2, 3), normal(3, 3, 4)])
    refused(ErrorKind.INVALID_MODEL, "MatMul", [normal(2, 3), normal(3, 4, dtype=np.float64)])
    refused(ErrorKind.INVALID_MODEL, "MatMul", [np.ones((2, 2), np.int32)] * 2, opset=1)


def test_exact_matmul_is_the_correctly_rounded_exact_product() -> None:
    a = (normal(2, 3, 50) * np.float32(1e4)).astype(np.float32)
    b = normal(50, 4)
    (result,) = run_node("MatMul", [a, b], opset=13, exact=True)
    np.testing.assert_array_equal(result, batched_oracle(a, b))


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (1,), (5,), (4, 1), (4, 5)])
def test_gemm_matches_onnxruntime(trans_a: int, trans_b: int, c_shape: tuple | None) -> None:
    a = normal(*((3, 4) if trans_a else (4, 3)))
    b = normal(*((5, 3) if trans_b else (3, 5)))
    c = None if c_shape is None else normal(*c_shape)
    attributes = {"transA": trans_a, "transB": trans_b, "alpha": 0.7, "beta": -1.3}
    assert_matches_onnxruntime("Gemm", [a, b, c], attributes, opset=13)


@pytest.mark.parametrize("seed", range(12))
def test_gemm_epilogue_is_separate_roundings_in_exact_mode(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(shape).astype(np.float32) for shape in [(3, 40), (40, 2), (2,)])
    (result,) = run_node("Gemm", [a, b, c], {"alpha": 0.1, "beta": 3.0}, exact=True)
    scaled = (batched_oracle(a, b).astype(np.float64) * np.float32(0.1)).astype(np.float32)
    expected = scaled + (c.astype(np.float64) * 3.0).astype(np.float32)
    np.testing.assert_array_equal(result, expected)


def test_gemm_versions_of_c() -> None:
    a, b = normal(2, 3), normal(3, 4)
    refused(ErrorKind.INVALID_MODEL, "Gemm", [a, b], opset=9)
    (result,) = run_node("Gemm", [a, b], opset=11)
    np.testing.assert_allclose(result, a @ b, rtol=1e-6)
    # Before opset 7, C broadcasts only when the broadcast attribute says so.
    refused(ErrorKind.INVALID_INPUT, "Gemm", [a, b, normal(4)], opset=6)
    (result,) = run_node("Gemm", [a, b, normal(4)], {"broadcast": 1}, opset=6)
    assert result.shape == (2, 4)
    refused(ErrorKind.INVALID_INPUT, "Gemm", [a, b, normal(3)], opset=13)
    refused(ErrorKind.INVALID_INPUT, "Gemm", [a, normal(4, 3)], opset=13)


def test_gemm_on_integers() -> None:
    a = RNG.integers(-9, 9, (2, 3)).astype(np.int64)
    b = RNG.integers(-9, 9, (3, 4)).astype(np.int64)
    c = RNG.integers(-9, 9, (4,)).astype(np.int64)
    (result,) = run_node("Gemm", [a, b, c], {"alpha": 2.0, "beta": 3.0}, opset=13)
    np.testing.assert_array_equal(result, 2 * (a @ b) + 3 * c)


# -- Conv and ConvTranspose ------------------------------------------------------------------

CONV_CASES = {
    "1d": ((2, 3, 11), (4, 3, 3), {}),
    "1d strided dilated": (
        (1, 2, 17),
        (3, 2, 3),
        {"strides": [2], "dilations": [2], "pads": [1, 2]},
    ),
    "2d": ((2, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "2d asymmetric": ((1, 2, 10, 7), (5, 2, 3, 2), {"pads": [0, 1, 2, 0], "strides": [2, 3]}),
    "2d dilated": ((1, 3, 12, 12), (2, 3, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    "2d 1x1": ((2, 8, 5, 6), (4, 8, 1, 1), {}),
    "2d 1x1 strided": ((1, 8, 7, 7), (4, 8, 1, 1), {"strides": [2, 2]}),
    "2d grouped": ((1, 6, 7, 7), (9, 2, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "2d depthwise": (
        (2, 5, 8, 8),
        (5, 1, 3, 3),
        {"group": 5, "strides": [2, 2], "pads": [1, 1, 1, 1]},
    ),
    "2d same upper": ((1, 2, 7, 8), (3, 2, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "2d same lower": ((1, 2, 7, 8), (3, 2, 4, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    "2d valid": ((1, 2, 7, 8), (3, 2, 4, 3), {"auto_pad": "VALID", "strides": [2, 1]}),
    "3d": ((1, 2, 5, 6, 7), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 0, 1], "strides": [1, 2, 2]}),
}


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv_matches_onnxruntime(case: str, bias: bool) -> None:
    x_shape, w_shape, attributes = CONV_CASES[case]
    inputs = [normal(*x_shape), normal(*w_shape), normal(w_shape[0]) if bias else None]
    assert_matches_onnxruntime("Conv", inputs, attributes, opset=11, rtol=1e-4)


def test_conv_in_double_and_float16() -> None:
    x, w = normal(1, 2, 6, 6), normal(3, 2, 3, 3)
    (double,) = run_node("Conv", [x.astype(np.float64), w.astype(np.float64)], opset=11)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (3, 3), axis=(2, 3))
    assert double.dtype == np.float64
    np.testing.assert_allclose(double, np.einsum("nchwij,mcij->nmhw", windows, w), rtol=1e-12)
    (half,) = run_node("Conv", [x.astype(np.float16), w.astype(np.float16)], opset=11)
    (full,) = run_node("Conv", [x.astype(np.float16).astype(np.float32),
                                w.astype(np.float16).astype(np.float32)], opset=11)  # fmt: skip
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, full.astype(np.float16))


def test_conv_refuses_inconsistent_shapes() -> None:
    x = normal(1, 4, 5, 5)
    refused(ErrorKind.INVALID_INPUT, "Conv", [x, normal(2, 3, 3, 3)])
    refused(ErrorKind.INVALID_INPUT, "Conv", [x, normal(3, 2, 3, 3)], {"group": 2})
    refused(ErrorKind.INVALID_INPUT, "Conv", [x, normal(2, 4, 3, 3), normal(3)])
    refused(ErrorKind.INVALID_INPUT, "Conv", [x, normal(2, 4, 7, 7)])
    refused(ErrorKind.INVALID_INPUT, "Conv", [x, normal(2, 4, 3, 3)], {"kernel_shape": [2, 2]})
    refused(ErrorKind.INVALID_MODEL, "Conv", [x, normal(2, 4, 3, 3)], {"strides": [1, 1, 1]})
    refused(ErrorKind.INVALID_MODEL, "Conv", [x, normal(2, 4, 3, 3)], {"auto_pad": "SAME"})
    refused(ErrorKind.INVALID_MODEL, "Conv", [x, normal(2, 4, 3, 3)], {"dilations": [0, 1]})


CONV_TRANSPOSE_CASES = {
    "1d": ((1, 2, 5), (2, 3, 3), {}),
    "2d strided": ((2, 3, 4, 5), (3, 2, 3, 3), {"strides": [2, 3]}),
    "2d pads": ((1, 2, 5, 5), (2, 4, 3, 3), {"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    "2d output padding": (
        (1, 2, 4, 4),
        (2, 3, 3, 3),
        {"strides": [3, 2], "output_padding": [1, 1]},
    ),
    "2d dilated": ((1, 2, 4, 5), (2, 2, 3, 2), {"dilations": [2, 3], "strides": [1, 2]}),
    "2d grouped": ((1, 4, 3, 3), (4, 3, 2, 2), {"group": 2, "strides": [2, 2]}),
    "2d output shape": ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    "2d same upper": ((1, 1, 3, 4), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "3d": ((1, 2, 3, 4, 2), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
}


@pytest.mark.parametrize("case", list(CONV_TRANSPOSE_CASES))
def test_conv_transpose_matches_onnxruntime(case: str) -> None:
    x_shape, w_shape, attributes = CONV_TRANSPOSE_CASES[case]
    w = normal(*w_shape)
    inputs = [normal(*x_shape), w, normal(w_shape[1] * attributes.get("group", 1))]
    assert_matches_onnxruntime("ConvTranspose", inputs, attributes, opset=11, rtol=1e-4)


def canonical_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Σ_k in order k = 0..K−1 in float64, one rounding to float32 (the reference backend's
    order)."""
    total = np.zeros((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]))
    for k in range(a.shape[-1]):
        total += a[..., :, k, None].astype(np.float64) * b[..., None, k, :].astype(np.float64)
    return total.astype(np.float32)


def test_reference_backend_convolves_in_the_canonical_order() -> None:
    x, w = normal(1, 3, 6, 6), normal(2, 3, 3, 3)
    (fast,) = run_node("Conv", [x, w], {"pads": [1, 1, 1, 1]}, opset=11)
    (reference,) = run_node(
        "Conv", [x, w], {"pads": [1, 1, 1, 1]}, opset=11, backend="numpy-reference"
    )
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    columns = windows.transpose(0, 1, 4, 5, 2, 3).reshape(1, 27, 36)
    expected = canonical_product(w.reshape(1, 2, 27), columns).reshape(1, 2, 6, 6)
    np.testing.assert_array_equal(reference, expected)
    np.testing.assert_allclose(fast, reference, rtol=1e-5, atol=1e-5)


# -- pooling ---------------------------------------------------------------------------------


def scalar_pool(
    x: np.ndarray,
    out_spatial: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling one window at a time (the rules, not the kernel): the values and the
    row-major plane positions of the winners; NaN wins and the first of equals stays."""
    n_count, c_count, *spatial = x.shape
    values = np.empty((n_count, c_count, *out_spatial), x.dtype)
    where = np.empty((n_count, c_count, *out_spatial), np.int64)
    for n, c, *o in itertools.product(range(n_count), range(c_count), *map(range, out_spatial)):
        best = None
        for taps in itertools.product(*map(range, kernel)):
            position = [
                oi * s - p + t * d
                for oi, s, p, t, d in zip(o, strides, pads_begin, taps, dilations, strict=True)
            ]
            if not all(0 <= q < size for q, size in zip(position, spatial, strict=True)):
                continue
            value = x[(n, c, *position)]
            if best is None or value > best[0] or (np.isnan(value) and not np.isnan(best[0])):
                best = (value, np.ravel_multi_index(position, spatial))
        values[(n, c, *o)], where[(n, c, *o)] = best
    return values, where


def test_max_pool_padding_never_wins_even_past_the_kernel() -> None:
    """ONNX allows pads ≥ kernel (onnxruntime does not); windows that still reach the input
    take their maximum from it, however negative."""
    x = -np.abs(normal(1, 2, 5, 6)) - 1
    attributes = {"kernel_shape": [3, 2], "pads": [3, 1, 2, 1], "dilations": [2, 1]}
    values, indices = run_node("MaxPool", [x], attributes, opset=12, outputs=2)
    expected, where = scalar_pool(x, values.shape[2:], (3, 2), (1, 1), (3, 1), (2, 1))
    np.testing.assert_array_equal(values, expected)
    plane = np.arange(2).reshape(1, 2, 1, 1) * 30
    np.testing.assert_array_equal(indices, where + plane)


def test_max_pool_refuses_windows_of_padding_only() -> None:
    error = refused(
        ErrorKind.INVALID_INPUT, "MaxPool", [normal(1, 1, 4, 4)],
        {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}, opset=12,
    )  # fmt: skip
    assert "padding only" in str(error)


def test_max_pool_nan_wins_and_ties_keep_the_first() -> None:
    x = np.array([[[[1, 3, 3, np.nan], [3, np.nan, 0, 2]]]], np.float32)
    values, indices = run_node("MaxPool", [x], {"kernel_shape": [2, 2]}, opset=12, outputs=2)
    np.testing.assert_array_equal(values, [[[[np.nan, np.nan, np.nan]]]])
    np.testing.assert_array_equal(indices, [[[[5, 5, 3]]]])
    (alone,) = run_node("MaxPool", [x], {"kernel_shape": [2, 2]}, opset=12)
    np.testing.assert_array_equal(alone, values)
    values, indices = run_node("MaxPool", [x[..., :1, :3]], {"kernel_shape": [1, 2]},
                               opset=12, outputs=2)  # fmt: skip
    np.testing.assert_array_equal(indices, [[[[1, 1]]]])


MAX_POOL_CASES = {
    "1d": ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    "2d": ((2, 2, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    "2d ceil": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "2d ceil pads": (
        (1, 2, 6, 6),
        {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    ),
    "2d dilated": (
        (1, 2, 9, 9),
        {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 1, 1, 1]},
    ),
    "2d same upper": (
        (1, 1, 7, 6),
        {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ),
    "2d same lower": (
        (1, 1, 7, 6),
        {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    ),
    "2d column-major": (
        (2, 3, 5, 6),
        {"kernel_shape": [2, 2], "strides": [1, 2], "storage_order": 1},
    ),
    "3d": (
        (1, 2, 5, 6, 4),
        {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]},
    ),
}


@pytest.mark.parametrize("case", list(MAX_POOL_CASES))
def test_max_pool_matches_onnxruntime(case: str) -> None:
    shape, attributes = MAX_POOL_CASES[case]
    assert_matches_onnxruntime(
        "MaxPool", [normal(*shape)], attributes, opset=12,
        output_types=[onnx.TensorProto.FLOAT, onnx.TensorProto.INT64],
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_max_pool_on_other_types(dtype: type) -> None:
    x = RNG.integers(0, 100, (1, 2, 6, 5)).astype(dtype)
    attributes = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    (values,) = run_node("MaxPool", [x], attributes, opset=12)
    expected, _ = scalar_pool(x, values.shape[2:], (3, 3), (2, 2), (1, 1), (1, 1))
    assert values.dtype == dtype
    np.testing.assert_array_equal(values, expected)
    refused(ErrorKind.INVALID_MODEL, "MaxPool", [x.astype(np.int8)], attributes, opset=11)


AVERAGE_POOL_CASES = {
    "1d": ((2, 3, 9), {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
    "2d": ((1, 2, 8, 7), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    "2d include pad": (
        (1, 2, 8, 7),
        {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "count_include_pad": 1},
    ),
    "2d ceil": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "2d ceil include pad": (
        (1, 2, 6, 6),
        {
            "kernel_shape": [3, 3],
            "strides": [2, 2],
            "pads": [1, 1, 1, 1],
            "ceil_mode": 1,
            "count_include_pad": 1,
        },
    ),
    "2d dilated": (
        (1, 2, 9, 9),
        {"kernel_shape": [2, 3], "dilations": [3, 2], "pads": [1, 1, 1, 1]},
    ),
    "2d same upper": (
        (1, 1, 7, 6),
        {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ),
    "2d same lower include pad": (
        (1, 1, 7, 6),
        {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "count_include_pad": 1},
    ),
    "3d": (
        (1, 2, 5, 6, 4),
        {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]},
    ),
}


@pytest.mark.parametrize("case", list(AVERAGE_POOL_CASES))
def test_average_pool_matches_onnxruntime(case: str) -> None:
    shape, attributes = AVERAGE_POOL_CASES[case]
    assert_matches_onnxruntime("AveragePool", [normal(*shape)], attributes, opset=19)


@pytest.mark.parametrize(
    ("case", "opset"),
    [(case, opset) for case in AVERAGE_POOL_CASES for opset in (11, 19)
     if opset >= 19 or len(AVERAGE_POOL_CASES[case][0]) == 4],
)  # fmt: skip
def test_average_pool_sums_in_onnxruntimes_order(case: str, opset: int) -> None:
    """Bit for bit: before opset 19 onnxruntime sums each 2-D window one spatial axis at a
    time (first axis first), from 19 (and for ceil_mode windows counting padding) in row-major
    order; quantized models round these sums. Its 3-D order before opset 19 is neither, so
    3-D is left to the tolerance test above there. Dilations exist from opset 19."""
    shape, attributes = AVERAGE_POOL_CASES[case]
    if opset < 19:
        attributes = {k: v for k, v in attributes.items() if k != "dilations"}
    assert_matches_onnxruntime("AveragePool", [normal(*shape)], attributes, opset=opset,
                               rtol=0, atol=0)  # fmt: skip


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnxruntime(p: int) -> None:
    attributes = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "p": p}
    assert_matches_onnxruntime("LpPool", [normal(1, 2, 7, 6)], attributes, opset=18, rtol=1e-4)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_pools_match_onnxruntime(op_type: str, shape: tuple) -> None:
    assert_matches_onnxruntime(op_type, [normal(*shape)], opset=1)


@pytest.mark.parametrize("opset", [11, 19])  # the separable and the row-major sums
def test_average_pool_of_float16_rounds_once(opset: int) -> None:
    x = normal(1, 1, 6, 6).astype(np.float16)
    attributes = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    (half,) = run_node("AveragePool", [x], attributes, opset=opset)
    (full,) = run_node("AveragePool", [x.astype(np.float32)], attributes, opset=opset)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, full.astype(np.float16))


# -- normalization ---------------------------------------------------------------------------


def batch_norm_inputs(x_shape: tuple, dtype: type = np.float32) -> list[np.ndarray]:
    channels = x_shape[1]
    var = np.abs(normal(channels)) + 0.5
    return [normal(*x_shape), normal(channels), normal(channels), normal(channels), var]


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("x_shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_normalization_matches_onnxruntime(opset: int, x_shape: tuple) -> None:
    inputs = batch_norm_inputs(x_shape)
    assert_matches_onnxruntime("BatchNormalization", inputs, {"epsilon": 1e-3}, opset=opset)


@pytest.mark.parametrize("x_type", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("exact", [False, True])
def test_batch_normalization_constant_parameters_prepared_alike(x_type: type, exact: bool) -> None:
    """Constant scale, B, mean and var (prepared once per plan in fast mode) give the bits
    the same parameters fed as inputs give."""
    from onemodel.session import ExecutionMode, Session, SessionOptions

    x, *parameters = batch_norm_inputs((2, 3, 4, 5))
    x = x.astype(x_type)
    names = ["scale", "B", "mean", "var"]
    node = onnx.helper.make_node("BatchNormalization", ["x", *names], ["y"], epsilon=1e-3)
    x_type_proto = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(x_type))
    x_info = onnx.helper.make_tensor_value_info("x", x_type_proto, x.shape)
    y_info = onnx.helper.make_tensor_value_info("y", x_type_proto, x.shape)
    param_infos = [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, (3,))
                   for n in names]  # fmt: skip
    initializers = [
        onnx.numpy_helper.from_array(p, n) for p, n in zip(parameters, names, strict=True)
    ]
    opset = [onnx.helper.make_opsetid("", 15)]
    constant = onnx.helper.make_model(
        onnx.helper.make_graph([node], "c", [x_info], [y_info], initializers), opset_imports=opset
    )
    fed = onnx.helper.make_model(
        onnx.helper.make_graph([node], "f", [x_info, *param_infos], [y_info]), opset_imports=opset
    )
    options = SessionOptions(mode=ExecutionMode.EXACT if exact else ExecutionMode.FAST)
    (from_constants,) = Session.load(constant.SerializeToString(), options).run(None, {"x": x})
    feeds = {"x": x, **dict(zip(names, parameters, strict=True))}
    (from_inputs,) = Session.load(fed.SerializeToString(), options).run(None, feeds)
    assert from_constants.dtype == x_type
    np.testing.assert_array_equal(from_constants, from_inputs)


def test_batch_normalization_per_element_before_opset_9() -> None:
    x = normal(2, 3, 4)
    scale, bias, mean = normal(3, 4), normal(3, 4), normal(3, 4)
    var = np.abs(normal(3, 4)) + 0.5
    (result,) = run_node("BatchNormalization", [x, scale, bias, mean, var], {"spatial": 0},
                         opset=7)  # fmt: skip
    np.testing.assert_allclose(result, (x - mean) / np.sqrt(var + 1e-5) * scale + bias,
                               rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("opset", [14, 15])
@pytest.mark.parametrize("x_shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_normalization_training_mode_matches_onnxruntime(opset: int, x_shape: tuple) -> None:
    inputs = batch_norm_inputs(x_shape)
    attributes = {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-3}
    float_type = onnx.TensorProto.FLOAT
    results = assert_matches_onnxruntime("BatchNormalization", inputs, attributes, opset=opset,
                                         output_types=[float_type] * 3)  # fmt: skip
    (alone,) = run_node("BatchNormalization", inputs, attributes, opset=opset)
    np.testing.assert_array_equal(alone, results[0])


def test_batch_normalization_training_mode_keeps_statistics_types() -> None:
    """Opset 15 lets the running statistics have their own type; half X is reduced in float."""
    x, scale, bias, mean, var = batch_norm_inputs((4, 2, 8))
    inputs = [x.astype(np.float16), scale, bias, mean.astype(np.float64), var.astype(np.float64)]
    y, running_mean, running_var = run_node(
        "BatchNormalization", inputs, {"training_mode": 1}, opset=15, outputs=3
    )
    assert (y.dtype, running_mean.dtype, running_var.dtype) == (np.float16, np.float64, np.float64)
    batch_mean, batch_var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(running_mean, 0.9 * mean + 0.1 * batch_mean, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(running_var, 0.9 * var + 0.1 * batch_var, rtol=1e-3, atol=1e-3)


def test_batch_normalization_refuses_training() -> None:
    """Training before opset 14 is refused (the spec leaves saved_mean and saved_var
    undefined); running statistics outputs outside training mode make the model invalid."""
    inputs = batch_norm_inputs((2, 3, 4))
    refused(ErrorKind.INVALID_MODEL, "BatchNormalization", inputs, opset=15, outputs=3)
    refused(ErrorKind.UNSUPPORTED, "BatchNormalization", inputs, opset=6)
    refused(ErrorKind.UNSUPPORTED, "BatchNormalization", inputs, opset=9, outputs=3)
    (result,) = run_node("BatchNormalization", inputs, {"is_test": 1}, opset=6)
    assert result.shape == (2, 3, 4)
    refused(ErrorKind.INVALID_INPUT, "BatchNormalization", [inputs[0], *[normal(4)] * 4])


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_normalization_matches_onnxruntime(axis: int, with_bias: bool) -> None:
    x = normal(2, 3, 4) * 3 + 1
    normalized = x.shape[axis:]
    inputs = [x, normal(*normalized), normal(*normalized) if with_bias else None]
    types = [onnx.TensorProto.FLOAT] * 3
    assert_matches_onnxruntime(
        "LayerNormalization", inputs, {"axis": axis}, output_types=types, rtol=1e-4, atol=1e-5
    )


def test_layer_normalization_in_float16_keeps_float_statistics() -> None:
    x = normal(3, 8).astype(np.float16)
    y, mean, inv_std = run_node("LayerNormalization", [x, np.ones(8, np.float16), None], outputs=3)
    assert (y.dtype, mean.dtype, inv_std.dtype) == (np.float16, np.float32, np.float32)
    wide = x.astype(np.float32)
    np.testing.assert_allclose(mean[:, 0], wide.mean(axis=1), rtol=1e-6)
    expected = (wide - wide.mean(1, keepdims=True)) / np.sqrt(wide.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=2e-3, atol=2e-3)


def test_instance_normalization_matches_onnxruntime() -> None:
    inputs = [normal(2, 3, 4, 5) * 2, normal(3), normal(3)]
    assert_matches_onnxruntime("InstanceNormalization", inputs, {"epsilon": 1e-4}, opset=6,
                               rtol=1e-4)  # fmt: skip


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(opset: int) -> None:
    x = normal(2, 6, 3, 2) * 2 + 1
    per = 3 if opset == 18 else 6
    scale, bias = normal(per), normal(per)
    (result,) = run_node("GroupNormalization", [x, scale, bias], {"num_groups": 3}, opset=opset)
    grouped = x.reshape(2, 3, -1).astype(np.float64)
    standard = (grouped - grouped.mean(2, keepdims=True)) / np.sqrt(
        grouped.var(2, keepdims=True) + 1e-5
    )
    if opset == 18:
        expected = (standard * scale[:, None] + bias[:, None]).reshape(x.shape)
    else:
        expected = standard.reshape(x.shape) * scale[:, None, None] + bias[:, None, None]
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_matches_onnxruntime(p: int) -> None:
    assert_matches_onnxruntime("LpNormalization", [normal(3, 4, 5)], {"p": p, "axis": 1}, opset=1)
    (zeros,) = run_node("LpNormalization", [np.zeros((2, 3), np.float32)], {"p": p}, opset=1)
    np.testing.assert_array_equal(zeros, 0)


# -- Softmax, LogSoftmax, Hardmax ------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
def test_softmax_family_matches_onnxruntime(op_type: str, opset: int, axis: int | None) -> None:
    x = normal(2, 3, 4) * 5
    x[0, 1, 2] = x[0, 1, 3]  # a tie for Hardmax
    attributes = {} if axis is None else {"axis": axis}
    assert_matches_onnxruntime(op_type, [x], attributes, opset=opset)


def test_softmax_before_opset_13_normalizes_all_axes_from_axis() -> None:
    """The squeezenet case: an (N, C, 1, 1) input at opset 9 is one row per sample."""
    x = normal(2, 3, 2)
    (old,) = run_node("Softmax", [x], opset=9)
    (new,) = run_node("Softmax", [x], {"axis": 1}, opset=13)
    np.testing.assert_allclose(old.reshape(2, -1).sum(axis=1), 1, rtol=1e-6)
    np.testing.assert_allclose(new.sum(axis=1), 1, rtol=1e-6)
    assert not np.allclose(old, new)


def test_softmax_stays_finite_for_large_inputs() -> None:
    x = np.array([[1000.0, 1001.0, -1000.0]], np.float32)
    (result,) = run_node("Softmax", [x], opset=13)
    np.testing.assert_allclose(result, [[0.26894143, 0.7310586, 0.0]], rtol=1e-6)
    (logs,) = run_node("LogSoftmax", [x], opset=13)
    assert np.isfinite(logs).all()


@pytest.mark.parametrize(
    "shift",
    [0.0, -80.0, 80.0, 88.0, -88.0],
    ids=["centred", "low", "high", "overflowing", "below-normal"],
)
def test_float32_softmax_within_five_ulps_on_both_sides_of_the_exp_shortcut(shift: float) -> None:
    """exp(x) without the row max where no exp can overflow or leave the normal range
    (-87 ≤ x ≤ 88 - ln n), exp(x - max) elsewhere: both within 5 ulps of float64 (up to 4.3
    over 30 seeds: the exp, the sum of 1024, the reciprocal and the product round; rows near
    88 need the shortcut's bound, their exps' sum overflows)."""
    x = (np.random.default_rng(3).standard_normal((8, 1024)) + shift).astype(np.float32)
    (result,) = run_node("Softmax", [x], opset=13)
    wide = x.astype(np.float64)
    truth = np.exp(wide - wide.max(axis=1, keepdims=True))
    truth /= truth.sum(axis=1, keepdims=True)
    spacing = np.spacing(truth.astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(result - truth) <= 5 * spacing)


def test_float32_softmax_of_masked_and_nan_rows() -> None:
    x = normal(3, 6)
    x[0, :3] = -np.inf  # an attention mask
    x[1, 2] = np.nan
    (result,) = run_node("Softmax", [x], opset=13)
    exps = np.exp(x[0].astype(np.float64) - x[0].max())
    np.testing.assert_allclose(result[0], exps / exps.sum(), rtol=1e-6)
    assert np.isnan(result[1]).all()
    np.testing.assert_allclose(result[2].sum(), 1, rtol=1e-6)


def test_softmax_refuses_a_bad_axis() -> None:
    refused(ErrorKind.INVALID_INPUT, "Softmax", [normal(2, 3)], {"axis": 2}, opset=13)
    refused(ErrorKind.INVALID_INPUT, "Softmax", [normal(2, 3)], {"axis": -3}, opset=11)


# -- reductions ------------------------------------------------------------------------------

REDUCTIONS = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
]  # fmt: skip


def axes_since(op_type: str) -> int:
    return 13 if op_type == "ReduceSum" else 18


@pytest.mark.parametrize("op_type", REDUCTIONS)
@pytest.mark.parametrize("axes", [None, (1,), (0, 2), (-1,)])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reductions_match_onnxruntime(op_type: str, axes: tuple | None, keepdims: int) -> None:
    x = np.abs(normal(3, 4, 5)) + 0.5 if "Log" in op_type else normal(3, 4, 5)
    attributes: dict = {"keepdims": keepdims}
    # The attribute form (opset 11) and the input form (the opset axes became an input).
    assert_matches_onnxruntime(
        op_type, [x], {**attributes, **({} if axes is None else {"axes": list(axes)})},
        opset=11, rtol=1e-5,
    )  # fmt: skip
    axes_input = None if axes is None else np.array(axes, np.int64)
    assert_matches_onnxruntime(
        op_type, [x, axes_input], attributes, opset=axes_since(op_type), rtol=1e-5
    )


@pytest.mark.parametrize("op_type", REDUCTIONS)
def test_reductions_of_nothing_give_the_identity(op_type: str) -> None:
    x = np.zeros((2, 0, 4), np.float32)
    (result,) = run_node(op_type, [x, np.array([1], np.int64)], opset=18)
    identity = {
        "ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1, "ReduceLogSum": -np.inf,
        "ReduceLogSumExp": -np.inf, "ReduceMean": np.nan,  # 0 / 0
    }.get(op_type, 0)  # fmt: skip
    assert result.shape == (2, 1, 4)
    np.testing.assert_array_equal(result, np.full((2, 1, 4), identity, np.float32))


def test_empty_axes_reduce_everything_unless_noop() -> None:
    x = normal(2, 3)
    empty = np.array([], np.int64)
    (everything,) = run_node("ReduceSum", [x, empty], {"keepdims": 0}, opset=13)
    np.testing.assert_allclose(everything, x.sum(), rtol=1e-6)
    (same,) = run_node("ReduceSum", [x, empty], {"noop_with_empty_axes": 1}, opset=13)
    np.testing.assert_array_equal(same, x)
    (same,) = run_node("ReduceL2", [x, None], {"noop_with_empty_axes": 1}, opset=18)
    np.testing.assert_array_equal(same, x)


def test_axes_input_unknown_at_plan_time_waits_for_run_time() -> None:
    with pytest.raises(NeedsRunTimeValues):
        run_node("ReduceMean", [normal(2, 3), np.array([1], np.int64)], opset=18,
                 known=[True, False])  # fmt: skip


def test_reductions_refuse_bad_axes() -> None:
    x = normal(2, 3)
    refused(ErrorKind.INVALID_INPUT, "ReduceSum", [x, np.array([2], np.int64)], opset=13)
    refused(ErrorKind.INVALID_INPUT, "ReduceMax", [x], {"axes": [0, -2]}, opset=13)
    refused(ErrorKind.INVALID_MODEL, "ReduceMax", [x.astype(np.int8)], opset=11)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_reductions_keep_the_type(dtype: type) -> None:
    x = RNG.integers(1, 9, (3, 4)).astype(dtype)
    for op_type, expected in [
        ("ReduceSum", x.sum(axis=1, dtype=dtype)),
        ("ReduceProd", x.prod(axis=1, dtype=dtype)),
        ("ReduceMax", x.max(axis=1)),
        ("ReduceMean", (x.sum(axis=1) // 4).astype(dtype)),
        ("ReduceSumSquare", (x * x).sum(axis=1, dtype=dtype)),
    ]:
        (result,) = run_node(op_type, [x], {"axes": [1], "keepdims": 0}, opset=11)
        assert result.dtype == dtype, op_type
        np.testing.assert_array_equal(result, expected, err_msg=op_type)


def test_reduce_max_and_min_on_bool_from_opset_20() -> None:
    x = np.array([[True, False], [False, False]])
    axes = np.array([1], np.int64)
    (any_,) = run_node("ReduceMax", [x, axes], {"keepdims": 0}, opset=20)
    (all_,) = run_node("ReduceMin", [x, axes], {"keepdims": 0}, opset=20)
    np.testing.assert_array_equal(any_, [True, False])
    np.testing.assert_array_equal(all_, [False, False])
    refused(ErrorKind.INVALID_MODEL, "ReduceMax", [x, axes], opset=18)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extrema_match_onnxruntime(op_type: str, axis: int, keepdims: int, last: int) -> None:
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    attributes = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    assert_matches_onnxruntime(op_type, [x], attributes, opset=13,
                               output_types=[onnx.TensorProto.INT64])  # fmt: skip


def test_arg_max_refuses_an_empty_axis() -> None:
    refused(ErrorKind.INVALID_INPUT, "ArgMax", [np.zeros((2, 0), np.float32)], {"axis": 1})


# -- Dropout ---------------------------------------------------------------------------------


def test_dropout_is_the_identity_with_a_mask_of_ones() -> None:
    x = normal(3, 4)
    (y,) = run_node("Dropout", [x], opset=13)
    np.testing.assert_array_equal(y, x)
    y, mask = run_node("Dropout", [x, np.float32(0.3)], opset=13, outputs=2)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    y, mask = run_node("Dropout", [x], {"ratio": 0.3}, opset=7, outputs=2)
    assert mask.dtype == np.float32 and (mask == 1).all()


def test_dropout_refuses_training_that_drops() -> None:
    x, yes = normal(3, 4), np.bool_(True)
    refused(ErrorKind.UNSUPPORTED, "Dropout", [x, np.float32(0.5), yes], opset=13)
    refused(ErrorKind.UNSUPPORTED, "Dropout", [x, None, yes], opset=13)
    refused(ErrorKind.UNSUPPORTED, "Dropout", [x], opset=6)
    (y,) = run_node("Dropout", [x, np.float32(0.0), yes], opset=13)
    np.testing.assert_array_equal(y, x)
    (y,) = run_node("Dropout", [x], {"is_test": 1}, opset=6)
    np.testing.assert_array_equal(y, x)
