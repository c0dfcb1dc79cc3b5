"""Softmax and LogSoftmax along the last axis with numba's exponentials
(numpy_cpu/compiled_exponentials.py): accuracy against float64, the rows a NaN or an infinity
decides, LogSoftmax written over its own input, and the arrays it declines."""

from __future__ import annotations

import numpy as np
import pytest

from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.compiled_exponentials import (
    BLOCK,
    EXP_LOW,
    EXP_SHIFTED,
    SOFTMAX_FROM,
    compiled_softmax,
    exponentials,
)
from tests.operator_harness import run_node

ULP = 2.0**-24


def _rows(width: int, seed: int, scale: float) -> np.ndarray:
    """Rows of `width` normal values times `scale`, enough of them to be compiled."""
    rows = max(9, -(-SOFTMAX_FROM // width))
    return (np.random.default_rng(seed).standard_normal((rows, width)) * scale).astype(np.float32)


def _truth(x: np.ndarray, log: bool) -> np.ndarray:
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=-1, keepdims=True)
    total = np.exp(shifted).sum(axis=-1, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@pytest.mark.parametrize("width", [1, 7, 16, 511, 512, 513, 1500])
def test_the_shifted_exponentials_are_within_an_ulp_of_float64(width):
    """x - max keeps what its rounding lost (two-sum), so e^(x - max) rounds once more than
    Cephes' polynomial does, however far x is below its row's max (1.05 ulps at most measured
    over these rows); below EXP_LOW it is 0, under 2^-124 of the row's largest term."""
    x = _rows(width, width, 12)
    peaks = np.maximum.reduce(x, axis=1)
    exps = np.full_like(x, np.nan)
    buffers = np.empty(BLOCK, np.float32), np.empty(BLOCK, np.int32), np.empty(1, np.float32)
    jitted(exponentials)(x, exps, peaks, (np.float32(0),), EXP_SHIFTED, *buffers)
    shifted = x.astype(np.float64) - peaks[:, None]
    want = np.exp(shifted)
    kept = shifted >= EXP_LOW + 1e-3  # clear of the cut, which float32's x - max may cross
    ulps = np.abs(exps - want)[kept] / np.spacing(want.astype(np.float32))[kept]
    assert ulps.max() <= 1.25
    assert np.all(exps[~kept] <= np.exp(EXP_LOW + 1e-3))


@pytest.mark.parametrize("width", [1, 7, 16, 511, 512, 513, 1500])
def test_softmax_of_unit_scale_rows_is_within_five_ulps_of_float64(width):
    """As the NumPy form (tests/test_ops_nn.py): the exponentials' ulp, the row sum's
    rounding (a BLAS product with ones) and the product's."""
    x = _rows(width, width, 1)
    out = np.full_like(x, np.nan)
    assert compiled_softmax(x, out, log=False)
    want = _truth(x, log=False)
    assert np.all(np.abs(out - want) <= 5 * np.spacing(want.astype(np.float32)))


@pytest.mark.parametrize("width", [1, 16, 513, 1500])
def test_log_softmax_is_within_its_terms_rounding_of_float64(width):
    x = _rows(width, width, 6)
    out = np.full_like(x, np.nan)
    assert compiled_softmax(x, out, log=True)
    want = _truth(x, log=True)
    scale = np.abs(x).max(axis=-1, keepdims=True).astype(np.float64) + np.abs(want)
    assert np.all(np.abs(out - want) <= (scale + 1) * 4 * ULP)


@pytest.mark.parametrize("log", [False, True])
def test_nan_and_infinities_decide_their_rows_as_x_minus_max_does(log):
    x = np.zeros((5, SOFTMAX_FROM), np.float32)
    x[0, 3] = np.nan
    x[1, 5] = np.inf
    x[2] = -np.inf
    x[3, ::2] = -np.inf  # -inf among finite values: e^-inf is 0
    x[4, 7] = 100.0  # every other term underflows
    out = np.empty_like(x)
    assert compiled_softmax(x, out, log)
    assert np.isnan(out[:3]).all()
    if log:
        assert np.all(out[3, ::2] == -np.inf)
        np.testing.assert_allclose(out[3, 1::2], -np.log(SOFTMAX_FROM / 2), rtol=1e-6)
        np.testing.assert_allclose(
            out[4], np.where(np.arange(SOFTMAX_FROM) == 7, 0.0, -100.0), rtol=1e-6
        )
    else:
        assert np.all(out[3, ::2] == 0)
        np.testing.assert_allclose(out[3, 1::2], 2 / SOFTMAX_FROM, rtol=1e-6)
        np.testing.assert_allclose(out[4], np.arange(SOFTMAX_FROM) == 7, atol=1e-40)


def test_log_softmax_over_its_own_input_is_the_same():
    x = _rows(600, 1, 5)
    apart = np.empty_like(x)
    assert compiled_softmax(x, apart, log=True)
    assert compiled_softmax(x, x, log=True)
    np.testing.assert_array_equal(x, apart)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_a_node_along_the_last_axis_takes_it(op, monkeypatch):
    from onemodel.backends.numpy_cpu import fast

    calls = []
    monkeypatch.setattr(
        fast, "compiled_softmax", lambda *a: calls.append(a[2]) or compiled_softmax(*a)
    )
    x = _rows(300, 2, 4).reshape(2, -1, 300)
    (y,) = run_node(op, [x], {"axis": -1}, opset=13)
    assert calls == [op == "LogSoftmax"]
    np.testing.assert_allclose(y, _truth(x, op == "LogSoftmax"), rtol=2e-5, atol=2e-6)


def test_other_types_and_layouts_are_declined_untouched():
    x = np.ones((4, SOFTMAX_FROM), np.float64)
    out = np.full(x.shape, 7.0)
    assert not compiled_softmax(x, out, log=False)
    x32 = np.ones((SOFTMAX_FROM, 4), np.float32)
    out32 = np.full((SOFTMAX_FROM, 4), 7.0, np.float32)
    assert not compiled_softmax(x32.T, out32.T, log=False)  # strided
    small = np.ones((2, SOFTMAX_FROM // 2 - 1), np.float32)
    untouched = np.full_like(small, 7.0)
    assert not compiled_softmax(small, untouched, log=False)
    assert np.all(out == 7) and np.all(out32 == 7) and np.all(untouched == 7)
