"""Max pooling: geometry, the edge-case rules, and every backend against a scalar-loop oracle.

Pooling only moves input values, so results are compared bit for bit including NaN payloads:
each injected NaN carries its own payload, which shows that the first NaN was the one reported.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from onemodel.backends import Kernels
from onemodel.backends.pooling import pool_geometry
from onemodel.tensors import DType, Tensor, TensorError, TensorShapeError


def scalar_max_pool(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad: tuple[int, int],
    flush_compares: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The rules, one element at a time: the independent oracle.

    With `flush_compares`, subnormals compare as zero (a flush-to-zero GPU's comparisons); the
    winner is still reported with its own bits.
    """
    tiny = float(np.finfo(np.float32).tiny)
    n_count, c_count, height, width = x.shape
    out_h = (height + 2 * pad[0] - kernel[0]) // stride[0] + 1
    out_w = (width + 2 * pad[1] - kernel[1]) // stride[1] + 1
    values = np.empty((n_count, c_count, out_h, out_w), np.float32)
    indices = np.empty((n_count, c_count, out_h, out_w), np.int32)
    for n, c, oy, ox in itertools.product(
        range(n_count), range(c_count), range(out_h), range(out_w)
    ):
        best = None
        for ky, kx in itertools.product(range(kernel[0]), range(kernel[1])):
            y, x_pos = oy * stride[0] - pad[0] + ky, ox * stride[1] - pad[1] + kx
            if not (0 <= y < height and 0 <= x_pos < width):
                continue
            value = float(x[n, c, y, x_pos])
            if flush_compares and abs(value) < tiny:
                value = 0.0
            if best is None or (math.isnan(value) and not math.isnan(best[0])) or value > best[0]:
                best = (value, y, x_pos)
        _, y, x_pos = best
        values[n, c, oy, ox] = x[n, c, y, x_pos]
        indices[n, c, oy, ox] = y * width + x_pos
    return values, indices


def run_max_pool(
    kernels: Kernels,
    x_values: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad: tuple[int, int],
    layout: str = "nchw",
) -> tuple[np.ndarray, np.ndarray]:
    """Run the backend with x, out and indices all NCHW or all NHWC-strided."""
    n, c, h, w = x_values.shape
    geometry = pool_geometry((h, w), kernel, stride, pad)
    out_shape = (n, c, *geometry.output_hw)
    if layout == "nhwc":
        x = kernels.from_host(np.ascontiguousarray(x_values.transpose(0, 2, 3, 1)))
        x = x.permute(0, 3, 1, 2)
        nhwc_shape = (n, *geometry.output_hw, c)
        out = Tensor.empty(nhwc_shape, DType.FLOAT, memory=kernels.memory).permute(0, 3, 1, 2)
        indices = Tensor.empty(nhwc_shape, DType.INT32, memory=kernels.memory).permute(0, 3, 1, 2)
    else:
        x = kernels.from_host(x_values)
        out = Tensor.empty(out_shape, DType.FLOAT, memory=kernels.memory)
        indices = Tensor.empty(out_shape, DType.INT32, memory=kernels.memory)
    kernels.max_pool2d(x, out, kernel, stride, pad, indices)
    return kernels.to_host(out), kernels.to_host(indices)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(actual.view(np.uint32), expected.view(np.uint32))


def first_inside_index(
    out_hw: tuple[int, int], width: int, stride: tuple[int, int], pad: tuple[int, int]
) -> np.ndarray:
    ys = [max(oy * stride[0] - pad[0], 0) for oy in range(out_hw[0])]
    xs = [max(ox * stride[1] - pad[1], 0) for ox in range(out_hw[1])]
    return np.array([[y * width + x for x in xs] for y in ys], np.int32)


# -- geometry --------------------------------------------------------------------------------


def test_output_extent_counts_the_windows_that_fit() -> None:
    for size, kernel, stride in itertools.product(range(1, 11), range(1, 5), range(1, 4)):
        for pad in range(kernel):
            fitting = [
                o for o in range(size + 2 * pad + 1) if o * stride + kernel <= size + 2 * pad
            ]
            if fitting:
                geometry = pool_geometry((size, 1), (kernel, 1), (stride, 1), (pad, 0))
                assert geometry.output_hw == (len(fitting), 1)
            else:
                with pytest.raises(TensorShapeError, match="does not fit"):
                    pool_geometry((size, 1), (kernel, 1), (stride, 1), (pad, 0))


@pytest.mark.parametrize(
    ("kernel", "stride", "pad", "message"),
    [
        ((3, 3), (1, 1), (3, 0), "pad 3 must be in 0..kernel−1"),
        ((2, 2), (1, 1), (0, 4), "pad 4 must be in 0..kernel−1"),
        ((2, 2), (1, 1), (-1, 0), "pad -1"),
        ((0, 2), (1, 1), (0, 0), "kernel 0"),
        ((2, 2), (1, 0), (0, 0), "stride 0"),
        ((2, 2, 2), (1, 1), (0, 0), "two integers"),
        ((2.0, 2), (1, 1), (0, 0), "two integers"),
    ],
)
def test_bad_attributes_are_refused_before_writing(
    kernels: Kernels, kernel, stride, pad, message: str
) -> None:
    x = kernels.from_host(np.zeros((1, 1, 6, 6), np.float32))
    out = Tensor.empty((1, 1, 6, 6), DType.FLOAT, memory=kernels.memory)
    with pytest.raises(TensorShapeError, match=message):
        kernels.max_pool2d(x, out, kernel, stride, pad)
    assert out.version == 0


def test_operands_are_checked(kernels: Kernels) -> None:
    x = kernels.from_host(np.zeros((1, 2, 4, 4), np.float32))
    out = Tensor.empty((1, 2, 2, 2), DType.FLOAT, memory=kernels.memory)
    geometry = ((2, 2), (2, 2), (0, 0))
    with pytest.raises(TensorError, match="DOUBLE"):
        kernels.max_pool2d(kernels.from_host(np.zeros((1, 2, 4, 4))), out, *geometry)
    with pytest.raises(TensorShapeError, match=r"\(N, C, H, W\)"):
        kernels.max_pool2d(kernels.from_host(np.zeros((2, 4, 4), np.float32)), out, *geometry)
    with pytest.raises(TensorShapeError, match=r"gives shape \(1, 2, 2, 2\)"):
        wrong = Tensor.empty((1, 2, 3, 3), DType.FLOAT, memory=kernels.memory)
        kernels.max_pool2d(x, wrong, *geometry)
    with pytest.raises(TensorError, match="INT32, not INT64"):
        indices = Tensor.empty((1, 2, 2, 2), DType.INT64, memory=kernels.memory)
        kernels.max_pool2d(x, out, *geometry, indices)
    with pytest.raises(TensorShapeError, match="indices must have out's shape"):
        indices = Tensor.empty((1, 2, 2, 1), DType.INT32, memory=kernels.memory)
        kernels.max_pool2d(x, out, *geometry, indices)
    assert out.version == 0


# -- the rules -------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_padding_never_wins(kernels: Kernels, layout: str) -> None:
    """All −inf with padding: −inf, at the first real element (−inf padding + argmax would
    report a padding position or the wrong element)."""
    x = np.full((2, 3, 5, 6), -np.inf, np.float32)
    values, indices = run_max_pool(kernels, x, (3, 3), (2, 2), (1, 2), layout)
    assert (values == -np.inf).all()
    expected = first_inside_index(values.shape[2:], 6, (2, 2), (1, 2))
    np.testing.assert_array_equal(indices, np.broadcast_to(expected, indices.shape))


def test_negative_values_beat_padding(kernels: Kernels) -> None:
    x = -np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    values, indices = run_max_pool(kernels, x, (2, 2), (2, 2), (1, 1))
    np.testing.assert_array_equal(values[0, 0], [[-1, -2, -4], [-5, -6, -8], [-13, -14, -16]])
    np.testing.assert_array_equal(indices[0, 0], [[0, 1, 3], [4, 5, 7], [12, 13, 15]])


def test_ties_report_the_first_element(kernels: Kernels) -> None:
    x = np.full((1, 2, 7, 5), 2.5, np.float32)
    x[0, 1, ::2, ::2] = -0.0  # ±0 compare equal: the first one's sign must survive
    x[0, 1, 1::2] = 0.0
    x[0, 1, ::2, 1::2] = 0.0
    values, indices = run_max_pool(kernels, x, (3, 2), (2, 1), (1, 1))
    expected_values, expected_indices = scalar_max_pool(x, (3, 2), (2, 1), (1, 1))
    assert_same_bits(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_array_equal(
        indices[0, 0], first_inside_index(values.shape[2:], 5, (2, 1), (1, 1))
    )


def test_nan_wins_and_the_first_nan_is_reported(kernels: Kernels) -> None:
    x = np.array([[1.0, np.inf, 5.0], [-np.inf, 0.0, 7.0], [2.0, 3.0, 4.0]], np.float32)
    first_nan, second_nan = np.uint32(0x7FC00001), np.uint32(0xFFC00002)
    x[1, 1], x[2, 0] = first_nan.view(np.float32), second_nan.view(np.float32)
    values, indices = run_max_pool(kernels, x[None, None], (3, 3), (1, 1), (0, 0))
    assert values.view(np.uint32).item() == first_nan
    assert indices.item() == 1 * 3 + 1


# -- every backend against the scalar loop ---------------------------------------------------

CASES = [
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1)),
    ((1, 2, 5, 5), (2, 3), (1, 2), (1, 0)),
    ((1, 1, 8, 6), (4, 2), (3, 1), (3, 1)),
    ((2, 2, 6, 7), (1, 1), (1, 1), (0, 0)),
    ((1, 3, 9, 4), (3, 3), (1, 1), (2, 2)),
    ((1, 2, 10, 10), (2, 2), (3, 3), (1, 0)),
    ((3, 1, 1, 1), (1, 1), (1, 1), (0, 0)),
    ((0, 2, 4, 4), (2, 2), (2, 2), (0, 0)),
]


def nasty_input(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Few distinct values (ties), ±0, subnormals, ±inf and NaNs that each carry their own
    payload."""
    x = rng.choice(np.array([-2.0, -1.0, -0.0, 0.0, 1e-45, -1e-40, 1.0, 3.0], np.float32), shape)
    x[rng.random(shape) < 0.1] = -np.inf
    x[rng.random(shape) < 0.03] = np.inf
    nan_mask = rng.random(shape) < 0.08
    payloads = 0x7FC00000 + np.arange(1, int(nan_mask.sum()) + 1, dtype=np.uint32)
    x[nan_mask] = payloads.view(np.float32)
    return x


@pytest.mark.parametrize(("shape", "kernel", "stride", "pad"), CASES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_matches_the_scalar_loop_bit_for_bit(
    kernels: Kernels, shape, kernel, stride, pad, layout: str
) -> None:
    rng = np.random.default_rng(CASES.index((shape, kernel, stride, pad)))
    x = nasty_input(rng, shape)
    values, indices = run_max_pool(kernels, x, kernel, stride, pad, layout)
    expected_values, expected_indices = scalar_max_pool(
        x, kernel, stride, pad, kernels.flushes_subnormals
    )
    assert_same_bits(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)


def test_indices_are_optional(kernels: Kernels) -> None:
    x_values = nasty_input(np.random.default_rng(9), (2, 2, 6, 6))
    out = Tensor.empty((2, 2, 3, 3), DType.FLOAT, memory=kernels.memory)
    kernels.max_pool2d(kernels.from_host(x_values), out, (3, 3), (2, 2), (1, 1))
    expected = scalar_max_pool(x_values, (3, 3), (2, 2), (1, 1), kernels.flushes_subnormals)[0]
    assert_same_bits(kernels.to_host(out), expected)
