"""Max pooling whose windows tile the input (numpy_cpu/tiled_pool.py): where it is bound,
equality with onnxruntime (1-D and 2-D, float and 8-bit types, odd extents whose last rows
and columns no window reads), and its bits (the first NaN of each window, its payload)
against a window-by-window oracle."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onemodel
from onemodel.backends.numpy_cpu.tiled_pool import TILED_POOL_MIN, TiledMaxPool, tiled_pool_fits
from tests.test_pair_pool import _bound_kernels

RNG = np.random.default_rng(21)
_ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
               np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}  # fmt: skip


def _model(attrs: dict, dtype) -> bytes:
    x = helper.make_tensor_value_info("x", _ONNX_TYPES[dtype], None)
    y = helper.make_tensor_value_info("y", _ONNX_TYPES[dtype], None)
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], **attrs)], "pool", [x], [y]
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_operatorsetid("", 12)]
    ).SerializeToString()


def _sample(shape, dtype) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize(
    ("kernel", "shape", "dtype"),
    [
        ([2, 2], (1, 64, 32, 128), np.float32),  # CRNN
        ([2, 1], (1, 128, 8, 32), np.float32),  # CRNN's height-only pools
        ([2, 2], (2, 16, 33, 35), np.float32),  # the last row and column read by no window
        ([3, 3], (1, 8, 30, 31), np.float64),
        ([1, 2], (1, 8, 16, 64), np.float32),
        ([3], (1, 128, 2048), np.float32),  # the Keras text CNN
        ([2, 2], (1, 16, 32, 32), np.int8),
        ([2, 2], (1, 16, 32, 32), np.uint8),
    ],
)
def test_tiled_max_pool_is_bound_and_matches_onnxruntime(kernel, shape, dtype) -> None:
    x = _sample(shape, dtype)
    model = _model({"kernel_shape": kernel, "strides": kernel}, dtype)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model, options)
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    first = fast.run(None, {"x": x})[0]
    other = _sample(shape, dtype)
    second = fast.run(None, {"x": other})[0]  # the same held work array, another input
    assert any(isinstance(k, TiledMaxPool) for k in _bound_kernels(fast))
    np.testing.assert_array_equal(first, reference.run(None, {"x": x})[0])
    np.testing.assert_array_equal(second, reference.run(None, {"x": other})[0])
    unbound = onemodel.Session.load(model, onemodel.SessionOptions(checked=True))
    assert unbound.run(None, {"x": x})[0].tobytes() == first.tobytes()


def test_only_tiling_windows_fit() -> None:
    one = (1, 1)
    assert tiled_pool_fits((1, 64, 32, 32), (16, 16), (2, 2), (2, 2), one)
    assert tiled_pool_fits((1, 64, 33, 32), (16, 16), (2, 2), (2, 2), one)  # row 32 unread
    assert not tiled_pool_fits((1, 64, 33, 32), (17, 16), (2, 2), (2, 2), one)  # ceil_mode
    assert not tiled_pool_fits((1, 64, 32, 32), (15, 15), (3, 3), (2, 2), one)  # overlapping
    assert not tiled_pool_fits((1, 64, 32, 32), (15, 15), (2, 2), (2, 2), (2, 2))  # dilated
    assert not tiled_pool_fits((1, 4, 16, 16), (8, 8), (2, 2), (2, 2), one)  # small
    assert not tiled_pool_fits((1, 8, 8, 8, 64), (4, 4, 32), (2, 2, 2), (2, 2, 2), (1, 1, 1))
    assert np.prod((1, 64, 32, 32)) >= TILED_POOL_MIN > np.prod((1, 4, 16, 16))


def _first_nan_or_max(x: np.ndarray, kernel: tuple[int, int]) -> np.ndarray:
    """The oracle: per window, the first NaN in row-major order, else the max."""
    kh, kw = kernel
    out_h, out_w = x.shape[2] // kh, x.shape[3] // kw
    blocks = x[:, :, : out_h * kh, : out_w * kw].reshape(*x.shape[:2], out_h, kh, out_w, kw)
    windows = blocks.transpose(0, 1, 2, 4, 3, 5).reshape(*x.shape[:2], out_h, out_w, kh * kw)
    nan = np.isnan(windows)
    first = np.take_along_axis(windows, np.argmax(nan, axis=-1)[..., None], axis=-1)[..., 0]
    return np.where(nan.any(axis=-1), first, windows.max(axis=-1))


@pytest.mark.parametrize("kernel", [(2, 2), (3, 2), (2, 3), (2, 1), (1, 3)])
def test_tiled_kernel_keeps_the_first_nan_of_each_window(kernel) -> None:
    shape = (2, 3, 31, 37)
    x = RNG.choice(np.array([-1.0, -0.0, 0.0, 2.0], np.float32), shape)
    x[RNG.random(shape) < 0.05] = -np.inf
    nan = RNG.random(shape) < 0.1
    x[nan] = (0x7FC00000 + np.arange(1, int(nan.sum()) + 1, dtype=np.uint32)).view(np.float32)
    expected = _first_nan_or_max(x, kernel)
    out = np.empty(expected.shape, np.float32)
    TiledMaxPool(shape, kernel)(x, out)
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(out.view(np.uint32)[~finite], expected.view(np.uint32)[~finite])
    np.testing.assert_array_equal(out.view(np.uint32)[finite], expected.view(np.uint32)[finite])


def test_tiled_kernel_takes_strided_operands() -> None:
    shape = (2, 8, 24, 32)
    x = RNG.standard_normal((*shape[:3], 2 * shape[3])).astype(np.float32)[..., ::2]
    out = np.zeros((2, 8, 12, 32), np.float32)[..., ::2]
    TiledMaxPool(shape, (2, 2))(x, out)
    np.testing.assert_array_equal(out, _first_nan_or_max(x, (2, 2)))
