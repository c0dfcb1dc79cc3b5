"""The exact array kernels on their own, with NumPy and (GPU mark) CuPy as the namespace.

Session-level checks are in test_exact_operators.py; here each kernel meets an oracle built
differently: exact conv against explicit im2col columns multiplied by the exact-product oracle
(tests/test_exact_gemm.py), ordered sums against Python float loops, exp/log/erf against the
math module rounded once.
"""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np
import pytest

from onemodel.backends import exact_arrays
from tests.test_exact_gemm import oracle


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "numpy":
        return np
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver or device: the GPU case does not apply here
        pytest.skip(f"no CUDA device: {error}")
    return cupy


def host(array: object) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def im2col_exact_conv(
    x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int
) -> np.ndarray:
    """2-D conv (group 1) as explicit columns, rows (c, ky, kx), multiplied by W in the
    oracle's exact arithmetic and rounded once: the exact matmul's definition."""
    n_, c_, h, w_ = x.shape
    m_, _, kh, kw = w.shape
    oh = (h + 2 * pad - (kh - 1) * dilation - 1) // stride + 1
    ow = (w_ + 2 * pad - (kw - 1) * dilation - 1) // stride + 1
    padded = np.zeros(
        (n_, c_, h + 2 * pad + 2 * kh * dilation, w_ + 2 * pad + 2 * kw * dilation), np.float32
    )
    padded[:, :, pad : pad + h, pad : pad + w_] = x
    rows = []
    for c, ky, kx in itertools.product(range(c_), range(kh), range(kw)):
        y0, x0 = ky * dilation, kx * dilation
        window = padded[:, c, y0 : y0 + (oh - 1) * stride + 1 : stride]
        rows.append(window[:, :, x0 : x0 + (ow - 1) * stride + 1 : stride].reshape(n_, -1))
    columns = np.stack(rows, axis=1)  # (n, c·kh·kw, oh·ow)
    weights = w.reshape(m_, -1)
    return np.stack([oracle(weights, cols, np.float32) for cols in columns]).reshape(n_, m_, oh, ow)


@pytest.mark.parametrize(
    "stride,pad,dilation,kernel",
    [(1, 0, 1, (3, 2)), (2, 1, 1, (3, 2)), (1, 2, 2, (3, 2)), (1, 0, 1, (1, 1)), (2, 0, 1, (1, 1))],
)
def test_conv_equals_the_exact_matmul_over_im2col_columns(
    xp: ModuleType, stride: int, pad: int, dilation: int, kernel: tuple[int, int]
) -> None:
    rng = np.random.default_rng(stride + 3 * pad + 7 * dilation)
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, *kernel)).astype(np.float32)
    want = im2col_exact_conv(x, w, stride, pad, dilation)
    out = xp.empty(want.shape, dtype=xp.float32)
    exact_arrays.conv_arrays(
        xp, xp.asarray(x), xp.asarray(w), out, (stride,) * 2, (pad,) * 2, (dilation,) * 2, 1
    )
    assert host(out).tobytes() == want.tobytes()


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_ordered_sum_adds_in_row_major_order(xp: ModuleType, axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(axes))
    x = (rng.standard_normal((3, 4, 5)) * 10.0 ** rng.integers(-6, 7, (3, 4, 5))).astype(np.float32)
    kept = [a for a in range(3) if a not in axes]
    want = np.zeros([x.shape[a] for a in kept])
    for index in itertools.product(*(range(d) for d in x.shape)):  # row-major over everything
        target = tuple(index[a] for a in kept)
        want[target] = float(want[target]) + float(x[index])
    got = exact_arrays.ordered_sum(xp, xp.asarray(x), axes)
    assert host(got).tobytes() == want.tobytes()


@pytest.mark.parametrize(
    "name,function,low,high",
    [
        ("exp", math.exp, -104.0, 89.0),
        ("log", math.log, 1e-38, 1e6),
        ("erf", math.erf, -6.0, 6.0),
    ],
)
def test_float64_functions_are_within_a_few_ulps_of_the_math_module(
    xp: ModuleType, name: str, function: object, low: float, high: float
) -> None:
    x = np.random.default_rng(len(name)).uniform(low, high, 5_000)
    got = host(getattr(exact_arrays, f"{name}64")(xp, xp.asarray(x)))
    want = np.array([function(value) for value in x])  # type: ignore[operator]
    assert np.max(np.abs(got - want) / np.abs(want)) < 4e-15


def test_special_values(xp: ModuleType) -> None:
    values = xp.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0])
    with np.errstate(invalid="ignore"):
        expected = {
            "exp64": [1.0, 1.0, np.inf, 0.0, np.nan, math.exp(-1.0)],
            "log64": [-np.inf, -np.inf, np.inf, np.nan, np.nan, np.nan],
            "erf64": [0.0, -0.0, 1.0, -1.0, np.nan, math.erf(-1.0)],
        }
    for name, want in expected.items():
        got = host(getattr(exact_arrays, name)(xp, values))
        np.testing.assert_allclose(got, want, rtol=4e-16, err_msg=name)
        assert list(np.signbit(got)) == list(np.signbit(want)), name
