"""Exact mode's matrix product against a slow arbitrary-precision oracle.

The oracle sums each dot product as a Python integer (every float32 product is an integer
multiple of 2^-300) and rounds the exact rational once, to nearest with ties to even, into the
output type, subnormals and overflow included; NaN and infinities follow the IEEE rules of the
product sum (docs/exact-mode.md). Every case must give the oracle's bits exactly: on NumPy, on
the checked-device stand-in (which flushes float32 subnormals as CuPy does) and, under the gpu
mark, on CuPy. The cases are adversarial: cancellation to zero and to rounding midpoints (ties),
huge dynamic range inside one row, subnormal inputs and results, infinities, NaN, signed zeros,
K up to 2^16.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from exact_oracle import adversarial_operands, oracle

from onemodel.backends import exact_gemm
from onemodel.backends.checked_device import checked_xp


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16 if x.dtype.itemsize == 2 else np.uint32)


@pytest.fixture(params=["numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)])
def xp(request: pytest.FixtureRequest) -> Any:
    if request.param == "numpy":
        return np
    if request.param == "checked-device":
        return checked_xp
    cupy = pytest.importorskip("cupy")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # no driver or device: the GPU case does not apply here
        pytest.skip(f"no CUDA device: {error}")
    return cupy


def _host(x: Any) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return x.get()


def _product(xp: ModuleType, a: np.ndarray, b: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    out = xp.empty(
        (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]), dtype=dtype
    )
    exact_gemm.matmul(xp, xp.asarray(a), xp.asarray(b), out)
    return _host(out)


def assert_oracle(xp: ModuleType, a: np.ndarray, b: np.ndarray, dtype: Any = np.float32) -> None:
    got, want = _product(xp, a, b, dtype), oracle(a, b, dtype)
    wrong = np.argwhere(_bits(got) != _bits(want))
    if wrong.size:
        first = tuple(wrong[0])
        pytest.fail(f"{len(wrong)} differ, first at {first}: {got[first]!r}, not {want[first]!r}")


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 33, 5), (16, 300, 9), (3, 1000, 4)])
def test_random_products(xp: ModuleType, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = _rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    assert_oracle(xp, a, b)


def test_cancellation_to_zero_and_to_tiny_remainders(xp: ModuleType) -> None:
    rng = _rng(1)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    b = rng.standard_normal((64, 6)).astype(np.float32)
    a[:, 32:] = a[:, :32]
    b[32:] = -b[:32]  # every product cancels its twin: exact zero (+0)
    b[32:40, 1] *= np.float32(1 + 2**-23)  # remainders far below the products
    b[40, 2] = np.nextafter(b[40, 2], np.float32(0))
    a[3, 5] = np.float32(2.0**-60)  # a remainder 2^-60 below the cancelling terms
    assert_oracle(xp, a, b)
    zeros = np.delete(_product(xp, a, b)[:, 0], 3)  # row 3's 2^-60 breaks its cancellation
    assert (_bits(zeros) == 0).all(), "an exact zero is +0"


def test_rounding_midpoints_ties_and_near_ties(xp: ModuleType) -> None:
    # 1 + 2^-24 is the midpoint between 1 and its float32 successor: ties to even (1); a term
    # 2^-70 above or below decides it either way, far below what float64 sums could see.
    ones = np.float32(1.0)
    rows = []
    for tail in (0.0, 2.0**-70, -(2.0**-70), 3 * 2.0**-24, 2.0**-24 + 2.0**-75):
        rows.append([ones, np.float32(2.0**-24), np.float32(tail) if tail else np.float32(0)])
    a = np.array(rows, dtype=np.float32)
    b = np.ones((3, 2), dtype=np.float32)
    b[:, 1] = -1
    assert_oracle(xp, a, b)


def test_huge_dynamic_range_inside_one_row(xp: ModuleType) -> None:
    rng = _rng(2)
    a = (rng.standard_normal((6, 40)) * 2.0 ** rng.integers(-140, 120, (6, 40))).astype(np.float32)
    b = (rng.standard_normal((40, 5)) * 2.0 ** rng.integers(-140, 0, (40, 5))).astype(np.float32)
    b[:, 0] = 1
    a[0, :2] = [np.float32(2.0**100), np.float32(-(2.0**100))]  # cancels down to the small ones
    assert_oracle(xp, a, b)


def test_subnormal_inputs_and_results(xp: ModuleType) -> None:
    rng = _rng(3)
    tiny = (rng.integers(1, 1 << 23, (5, 12)) * 2.0**-149).astype(np.float32)  # subnormals
    tiny *= rng.choice([-1, 1], tiny.shape).astype(np.float32)
    b = (rng.standard_normal((12, 4)) * 2.0 ** rng.integers(-10, 40, (12, 4))).astype(np.float32)
    assert_oracle(xp, tiny, b)
    # products far below float32's range: results are subnormal, ±0 by their sign, or exact 0
    small = (rng.standard_normal((5, 12)) * 2.0**-70).astype(np.float32)
    assert_oracle(xp, small, (rng.standard_normal((12, 4)) * 2.0**-70).astype(np.float32))
    assert_oracle(xp, small, (rng.standard_normal((12, 4)) * 2.0**-90).astype(np.float32))


def test_overflow_rounds_to_infinity_at_the_threshold(xp: ModuleType) -> None:
    big = np.float32(2.0**127)
    a = np.array(
        [[big, big], [big, -big], [np.finfo(np.float32).max, np.float32(2.0**103)]],
        dtype=np.float32,
    )
    b = np.array([[1, 1], [1, np.float32(0.99999994)]], dtype=np.float32)
    assert_oracle(xp, a, b)


def test_infinities_nans_and_signed_zeros(xp: ModuleType) -> None:
    rng = _rng(4)
    a = rng.standard_normal((8, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    a[0, 1] = np.inf
    a[1, 2] = np.nan
    a[2, 0], a[2, 3] = -np.inf, np.inf  # +inf and -inf products in one sum: NaN
    a[3, 4] = -np.inf
    a[4] = -0.0
    b[0, 4] = 0.0  # inf·0: NaN
    b[3, 5] = np.inf
    b[:, 6] = -0.0
    assert_oracle(xp, a, b)
    got = np.delete(_product(xp, a[4:5], b), 5, axis=1)  # column 5 holds inf: −0·inf is NaN
    assert (_bits(got) == 0).all(), "products of −0 sum to the exact zero, +0"


def test_long_sums_up_to_2_to_the_16(xp: ModuleType) -> None:
    rng = _rng(5)
    k = 1 << 16
    a = (rng.standard_normal((2, k)) * 2.0 ** rng.integers(-30, 30, (2, k))).astype(np.float32)
    b = rng.standard_normal((k, 2)).astype(np.float32)
    a[1, k // 2 :] = -a[1, : k // 2]  # row 1 cancels down to what column 1 perturbs
    b[k // 2 :, 0] = b[: k // 2, 0]
    b[k // 2 :, 1] = b[: k // 2, 1] * np.float32(1 + 2**-23)
    assert_oracle(xp, a, b)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_narrow_floats_round_once(dtype: Any) -> None:
    rng = _rng(6)
    a = rng.standard_normal((9, 70)).astype(dtype)
    b = rng.standard_normal((70, 8)).astype(dtype)
    b[:35, 0] = -b[35:, 0] * 0  # a few exact zeros in a column's terms
    assert_oracle(np, a, b, dtype)


def test_batches_broadcast_and_prepared_operands_give_the_same_bits(xp: ModuleType) -> None:
    rng = _rng(7)
    a = rng.standard_normal((3, 1, 4, 20)).astype(np.float32)
    b = rng.standard_normal((2, 20, 5)).astype(np.float32)
    got = _product(xp, a, b)
    for i in range(3):
        for j in range(2):
            want = oracle(a[i, 0], b[j], np.float32)
            assert (_bits(got[i, j]) == _bits(want)).all()
    out = xp.empty((3, 2, 4, 5), dtype=np.float32)
    left = exact_gemm.prepare(xp, xp.asarray(a), -1)
    right = exact_gemm.prepare(xp, xp.asarray(b), -2)
    exact_gemm.matmul(xp, left, right, out)
    assert (_bits(_host(out)) == _bits(got)).all()


def test_every_element_through_the_exact_path(
    xp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact summation alone (no BLAS value decides anything) also gives the oracle's bits."""
    undecided = exact_gemm._decide

    def nothing_decided(xp_: Any, approx: Any, radius: Any, dtype: Any) -> Any:
        value, decided = undecided(xp_, approx, radius, dtype)
        return value, decided & (radius == 0)

    monkeypatch.setattr(exact_gemm, "_decide", nothing_decided)
    rng = _rng(8)
    a = (rng.standard_normal((6, 50)) * 2.0 ** rng.integers(-60, 60, (6, 50))).astype(np.float32)
    b = rng.standard_normal((50, 7)).astype(np.float32)
    assert_oracle(xp, a, b)
    assert_oracle(
        xp,
        rng.standard_normal((5, 3)).astype(np.float32),
        rng.standard_normal((3, 4)).astype(np.float32),
    )


@pytest.mark.parametrize("start", range(0, 400, 100))
def test_random_adversarial_cases(xp: ModuleType, start: int) -> None:
    for seed in range(start, start + 100):
        a, b = adversarial_operands(_rng(1000 + seed))
        assert_oracle(xp, a, b)


def test_the_short_path_of_a_few_rows_gives_the_oracles_bits(xp: ModuleType) -> None:
    """float32_rows (a recurrent step's product against a prepared weight) on rows that make
    the decision leave elements open: cancellation to zero and to tiny remainders, subnormal
    results, a zero row (+0), one row of huge dynamic range."""
    rng = _rng(21)
    k, n = 64, 40
    b = rng.standard_normal((k, n)).astype(np.float32)
    a = rng.standard_normal((5, k)).astype(np.float32)
    a[1] = 0
    a[2, 1:] *= np.float32(2.0**-60)
    b[:, 3] = b[:, 4]  # columns 3 and 4 equal: a·b3 − a·b4 can cancel below
    b[:32, 5], b[32:, 5] = b[:32, 6], -b[:32, 6]
    a[3, 32:] = a[3, :32]  # row 3 · column 5 cancels to exactly zero
    a[4] *= np.float32(2.0**-75)  # results near and below float32's subnormals
    right = exact_gemm.prepare(xp, xp.asarray(b.astype(np.float64)), -2)
    got = exact_gemm.float32_rows(xp, xp.asarray(a.astype(np.float64)), right)
    want = oracle(a, b, np.float32)
    assert np.array_equal(_bits(_host(got).astype(np.float32)), _bits(want))
    assert _host(got)[3, 5] == 0 and not np.signbit(_host(got)[3, 5])
    infinite = a.astype(np.float64)
    infinite[0, 0] = np.inf  # non-finite rows are left to `matmul`'s rules
    assert exact_gemm.float32_rows(xp, xp.asarray(infinite), right) is None
