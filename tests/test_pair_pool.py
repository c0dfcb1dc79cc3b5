"""3×3/2 float32 max and average pooling by column pairs (numpy_cpu/pair_pool.py): where they
are bound, equality with onnxruntime, max pooling's bits (first NaN, its payload) against a
window-by-window oracle and the sums' bits against the shared row-major kernel."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onemodel
from onemodel.backends import KernelPaths
from onemodel.backends.numpy_cpu.pair_pool import (
    PAIR_POOL_MIN,
    PairMaxPool,
    PairSumPool,
    pair_pool_fits,
)
from onemodel.graph.run_state import RunState

RNG = np.random.default_rng(15)
POOL = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
GEOMETRY = ((3, 3), (2, 2), (1, 1), (1, 1))


def _model(attrs: dict, op: str = "MaxPool", opset: int = 12) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, None)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "pool", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)])
    return model.SerializeToString()


def _first_nan_or_max(x: np.ndarray) -> np.ndarray:
    """The oracle: per window (padding −inf), the first NaN in row-major order, else the max."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    windows = windows[:, :, : x.shape[2] : 2, : x.shape[3] : 2].reshape(
        *x.shape[:2], x.shape[2] // 2, x.shape[3] // 2, 9
    )
    nan = np.isnan(windows)
    first = np.take_along_axis(windows, np.argmax(nan, axis=-1)[..., None], axis=-1)[..., 0]
    return np.where(nan.any(axis=-1), first, windows.max(axis=-1))


def _bound_kernels(session: onemodel.Session) -> list[object]:
    (plan,) = session.plans()
    cells = [cell for step in RunState(plan).steps for cell in step.call.__closure__ or ()]
    return [cell.cell_contents for cell in cells]


@pytest.mark.parametrize(
    ("attrs", "shape"),
    [
        (POOL, (1, 64, 64, 64)),  # above the padded kernel's bound: the shared kernel before
        (POOL, (2, 3, 40, 70)),
        (dict(POOL, pads=[1, 1, 0, 0]), (1, 8, 32, 34)),
        ({"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"}, (1, 8, 32, 32)),
        (POOL, (1, 20, 256, 256)),  # blocks of planes, the last one smaller
    ],
)
def test_pair_max_pool_is_bound_and_matches_onnxruntime(attrs: dict, shape) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(attrs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    expected = ort.InferenceSession(model, options).run(None, {"x": x})[0]
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    first = fast.run(None, {"x": x})[0]
    second = fast.run(None, {"x": -x})[0]  # the same held work arrays, another input
    assert any(isinstance(k, PairMaxPool) for k in _bound_kernels(fast))
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, ort.InferenceSession(model).run(None, {"x": -x})[0])
    assert not np.shares_memory(first, second)
    unbound = onemodel.Session.load(model, onemodel.SessionOptions(checked=True))
    assert unbound.run(None, {"x": x})[0].tobytes() == first.tobytes()


def test_small_or_other_pools_keep_their_kernels() -> None:
    """Below PAIR_POOL_MIN, odd extents, other strides or float64: not the pair kernel."""
    assert not pair_pool_fits((1, 4, 16, 16), (8, 8), *GEOMETRY, np.float32)
    assert pair_pool_fits((1, 32, 16, 16), (8, 8), *GEOMETRY, np.float32)
    assert not pair_pool_fits((1, 32, 16, 15), (8, 8), *GEOMETRY, np.float32)
    assert not pair_pool_fits((1, 32, 16, 16), (8, 8), *GEOMETRY, np.float64)
    assert not pair_pool_fits((1, 32, 16, 16), (9, 9), *GEOMETRY, np.float32)
    assert not pair_pool_fits((1, 32, 16, 16), (8, 8), (3, 3), (2, 2), (0, 0), (1, 1), "f")
    assert np.prod((1, 32, 16, 16)) >= PAIR_POOL_MIN > np.prod((1, 4, 16, 16))


@pytest.mark.parametrize("shape", [(2, 3, 40, 70), (1, 20, 256, 256), (1, 4, 2, 4096)])
def test_pair_kernel_keeps_the_first_nan_of_each_window(shape) -> None:
    x = RNG.choice(np.array([-1.0, -0.0, 0.0, 2.0], np.float32), shape)
    x[RNG.random(shape) < 0.05] = -np.inf
    nan = RNG.random(shape) < 0.1
    x[nan] = (0x7FC00000 + np.arange(1, int(nan.sum()) + 1, dtype=np.uint32)).view(np.float32)
    out = np.empty((shape[0], shape[1], shape[2] // 2, shape[3] // 2), np.float32)
    PairMaxPool(shape)(x, out)
    expected = _first_nan_or_max(x)
    finite = ~np.isnan(expected)
    np.testing.assert_array_equal(out.view(np.uint32)[~finite], expected.view(np.uint32)[~finite])
    np.testing.assert_array_equal(out[finite], expected[finite])


def test_pair_kernel_takes_strided_operands() -> None:
    shape = (2, 8, 24, 32)
    x = RNG.standard_normal((shape[0], shape[1], shape[2], 2 * shape[3])).astype(np.float32)
    x = x[..., ::2]
    out = np.zeros((2, 8, 12, 32), np.float32)[..., ::2]
    PairMaxPool(shape)(x, out)
    np.testing.assert_array_equal(out, _first_nan_or_max(x))


AVERAGE = [
    (dict(POOL, count_include_pad=0), (1, 64, 64, 64), 19),
    (dict(POOL, count_include_pad=1), (2, 3, 40, 70), 20),
    (dict(POOL, pads=[1, 1, 0, 0]), (1, 8, 32, 34), 19),
    (POOL, (1, 20, 256, 256), 19),  # blocks of planes, the last one smaller
]


@pytest.mark.parametrize(("attrs", "shape", "opset"), AVERAGE)
def test_pair_average_pool_is_bound_and_matches_onnxruntime(attrs: dict, shape, opset) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(attrs, "AveragePool", opset)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    reference = ort.InferenceSession(model, options)
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    first = fast.run(None, {"x": x})[0]
    second = fast.run(None, {"x": 3 * x})[0]  # the same held grids, another input
    assert any(isinstance(k, PairSumPool) for k in _bound_kernels(fast))
    np.testing.assert_allclose(first, reference.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(second, reference.run(None, {"x": 3 * x})[0], rtol=1e-6, atol=1e-6)
    assert not np.shares_memory(first, second)


def test_pair_sums_are_the_row_major_kernels_bits() -> None:
    shape = (2, 5, 18, 24)
    x = RNG.standard_normal(shape).astype(np.float32) * np.float32(1e3)
    x[RNG.random(shape) < 0.05] = -0.0
    divisor = RNG.integers(1, 10, (9, 12)).astype(np.float32)
    expected = np.empty((2, 5, 9, 12), np.float32)
    KernelPaths.get("numpy").sum_pool_arrays(
        x, expected, *GEOMETRY, row_major=True, divisor=divisor
    )
    out = np.empty_like(expected)
    PairSumPool(shape, divisor)(x, out)
    assert out.tobytes() == expected.tobytes()


def test_average_pool_in_the_separable_order_keeps_its_kernel() -> None:
    model = _model(POOL, "AveragePool", 11)  # opset 11 sums one axis at a time
    session = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    session.run(None, {"x": RNG.standard_normal((1, 64, 64, 64)).astype(np.float32)})
    assert not any(isinstance(k, PairSumPool) for k in _bound_kernels(session))
