"""The kernel entry points the eager layer added to the seam, on every backend, against oracles
written here as plain loops (or NumPy calls) independent of the kernels."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from onemodel.backends import Kernels
from onemodel.tensors import DType, Tensor, TensorError, TensorShapeError

RNG = np.random.default_rng(3)


def _host(kernels: Kernels, tensor: Tensor) -> np.ndarray:
    return kernels.to_host(tensor)


def _empty(kernels: Kernels, shape, dtype=DType.FLOAT) -> Tensor:
    return Tensor.empty(shape, dtype, memory=kernels.memory)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_reduce_sum_is_an_ordered_float64_sum_rounded_once(kernels: Kernels, dtype) -> None:
    values = (RNG.standard_normal((3, 4, 5)) * 10.0 ** RNG.integers(-6, 6, (3, 4, 5))).astype(dtype)
    x = kernels.from_host(values)
    out = _empty(kernels, (3, 1, 1), DType.from_numpy(np.dtype(dtype)))
    kernels.exact_reduce_sum(x, out)
    expected = np.zeros((3, 1, 1))
    for i, j, k in itertools.product(range(3), range(4), range(5)):
        expected[i, 0, 0] += float(values[i, j, k])
    assert _host(kernels, out).tobytes() == expected.astype(dtype).tobytes()


def test_reduce_sum_and_max_over_some_axes(kernels: Kernels) -> None:
    values = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x = kernels.from_host(values)
    total, largest = _empty(kernels, (2, 1, 4)), _empty(kernels, (2, 1, 4))
    kernels.reduce_sum(x, total)
    kernels.reduce_max(x, largest)
    np.testing.assert_allclose(_host(kernels, total), values.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(_host(kernels, largest), values.max(1, keepdims=True))
    with pytest.raises(TensorShapeError, match="x's rank"):
        kernels.reduce_sum(x, _empty(kernels, (2, 4)))
    with pytest.raises(TensorShapeError, match="empty max"):
        kernels.reduce_max(kernels.from_host(np.ones((2, 0), np.float32)), _empty(kernels, (2, 1)))


def test_select_greater(kernels: Kernels) -> None:
    a = np.array([1.0, 2.0, np.nan, 3.0], np.float32)
    b = np.array([0.0, 2.0, 1.0, 4.0], np.float32)
    yes, no = np.full(4, 10.0, np.float32), np.full(4, -10.0, np.float32)
    out = _empty(kernels, (4,))
    kernels.select_greater(*(kernels.from_host(v) for v in (a, b, yes, no)), out)
    assert _host(kernels, out).tolist() == [10.0, -10.0, -10.0, -10.0]


def _naive_columns(x: np.ndarray, kernel, stride, pad) -> np.ndarray:
    n, c, h, w = x.shape
    oh = (h + 2 * pad[0] - kernel[0]) // stride[0] + 1
    ow = (w + 2 * pad[1] - kernel[1]) // stride[1] + 1
    columns = np.zeros((n, c, kernel[0], kernel[1], oh, ow), x.dtype)
    for ci, ky, kx, oy, ox in itertools.product(
        range(c), range(kernel[0]), range(kernel[1]), range(oh), range(ow)
    ):
        y, xx = oy * stride[0] - pad[0] + ky, ox * stride[1] - pad[1] + kx
        if 0 <= y < h and 0 <= xx < w:
            columns[:, ci, ky, kx, oy, ox] = x[:, ci, y, xx]
    return columns.reshape(n, c * kernel[0] * kernel[1], oh * ow)


@pytest.mark.parametrize(
    ("kernel", "stride", "pad"), [((3, 3), (1, 1), (1, 1)), ((2, 3), (2, 1), (0, 2))]
)
def test_im2col_and_its_adjoint_col2im(kernels: Kernels, kernel, stride, pad) -> None:
    values = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    expected = _naive_columns(values, kernel, stride, pad)
    columns = _empty(kernels, expected.shape)
    kernels.im2col(kernels.from_host(values), columns, kernel, stride, pad)
    np.testing.assert_array_equal(_host(kernels, columns), expected)
    # col2im is the transpose: <im2col(x), c> = <x, col2im(c)> for every x, so each input
    # position gets exactly the column entries that read it.
    weights = RNG.standard_normal(expected.shape).astype(np.float64)
    folded = _empty(kernels, values.shape, DType.DOUBLE)
    kernels.col2im(kernels.from_host(weights), folded, kernel, stride, pad)
    basis = np.eye(values.size).reshape(values.size, *values.shape)
    adjoint = [np.sum(_naive_columns(e, kernel, stride, pad) * weights) for e in basis]
    np.testing.assert_allclose(_host(kernels, folded).ravel(), adjoint, rtol=1e-12, atol=1e-12)
    with pytest.raises(TensorShapeError, match="have shape"):
        kernels.im2col(kernels.from_host(values), _empty(kernels, (1, 2, 3)), kernel, stride, pad)


def test_relu_max_pool_and_its_backward(kernels: Kernels) -> None:
    # Its own seed: the windows must include all-negative ones whichever backends ran first.
    values = np.random.default_rng(1).permutation(96).reshape(2, 3, 4, 4).astype(np.float32) - 40
    out, indices = _empty(kernels, (2, 3, 2, 2)), _empty(kernels, (2, 3, 2, 2), DType.INT32)
    kernels.relu_max_pool2d(kernels.from_host(values), out, (2, 2), (2, 2), (0, 0), indices)
    windows = values.reshape(2, 3, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 2, 2, 4)
    best = windows.argmax(-1)
    winner = (np.arange(2)[:, None] * 2 + best // 2) * 4 + np.arange(2)[None, :] * 2 + best % 2
    positive = windows.max(-1) > 0
    np.testing.assert_array_equal(_host(kernels, out), np.maximum(windows.max(-1), 0))
    np.testing.assert_array_equal(_host(kernels, indices), np.where(positive, winner, -1))
    assert (~positive).any() and positive.any()
    grads = RNG.standard_normal((2, 3, 2, 2)).astype(np.float32)
    grad_in = _empty(kernels, values.shape)
    kernels.max_pool2d_backward(kernels.from_host(grads), indices, grad_in, (2, 2), (2, 2), (0, 0))
    expected = np.zeros((2, 3, 16), np.float32)
    for n, c, oy, ox in np.ndindex(2, 3, 2, 2):
        if positive[n, c, oy, ox]:
            expected[n, c, winner[n, c, oy, ox]] += grads[n, c, oy, ox]
    np.testing.assert_array_equal(_host(kernels, grad_in), expected.reshape(values.shape))


def test_overlapping_windows_add_their_gradients(kernels: Kernels) -> None:
    values = np.array([[[[0.0, 1.0, 0.0], [0.0, 9.0, 0.0], [0.0, 0.0, 0.0]]]], np.float32)
    out, indices = _empty(kernels, (1, 1, 2, 2)), _empty(kernels, (1, 1, 2, 2), DType.INT32)
    kernels.max_pool2d(kernels.from_host(values), out, (2, 2), (1, 1), (0, 0), indices)
    grads = np.array([[[[1.0, 2.0], [4.0, 8.0]]]], np.float32)
    grad_in = _empty(kernels, values.shape)
    kernels.max_pool2d_backward(kernels.from_host(grads), indices, grad_in, (2, 2), (1, 1), (0, 0))
    expected = np.zeros((3, 3), np.float32)
    expected[1, 1] = grads.sum()  # every window's winner is the 9
    np.testing.assert_array_equal(_host(kernels, grad_in)[0, 0], expected)


def test_embedding_and_its_backward(kernels: Kernels) -> None:
    table = RNG.standard_normal((5, 3)).astype(np.float32)
    ids = np.array([[4, 0, 4], [2, 1, 4]], np.int32)
    out = _empty(kernels, (2, 3, 3))
    kernels.embedding(kernels.from_host(table), kernels.from_host(ids), out)
    np.testing.assert_array_equal(_host(kernels, out), table[ids])
    grads = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    grad_table = _empty(kernels, (5, 3))
    kernels.embedding_backward(kernels.from_host(ids), kernels.from_host(grads), grad_table, 1)
    expected = np.zeros((5, 3), np.float32)
    for position in np.ndindex(ids.shape):
        if ids[position] != 1:
            expected[ids[position]] += grads[position]
    np.testing.assert_array_equal(_host(kernels, grad_table), expected)
    with pytest.raises(TensorError, match="outside the table"):
        kernels.embedding(
            kernels.from_host(table),
            kernels.from_host(np.array([5], np.int32)),
            _empty(kernels, (1, 3)),
        )
    with pytest.raises(TensorError, match="INT32 or INT64"):
        kernels.embedding(
            kernels.from_host(table), kernels.from_host(np.array([1.0])), _empty(kernels, (1, 3))
        )


def test_double_operands_must_not_mix_with_float(kernels: Kernels) -> None:
    x = kernels.from_host(np.ones((2, 2)))
    with pytest.raises(TensorError, match="FLOAT or DOUBLE tensors of one type"):
        kernels.reduce_sum(x, _empty(kernels, (2, 1)))
