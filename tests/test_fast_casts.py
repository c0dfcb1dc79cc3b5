"""Fast-mode Cast (onemodel/backends/casts.py) gives the reference rules' values."""

import numpy as np
import pytest

from onemodel.backends.casts import fast_cast
from onemodel.tensors import DType
from onemodel.tensors.conversions import cast

TYPES = ("bool", "int8", "int32", "int64", "uint8", "uint64", "float16", "float32", "float64")
D_TYPES = {np.dtype(t): d for d in DType if d.numpy is not None for t in [d.numpy]}


def _values(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    if dtype == "bool":
        return rng.random(500) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        edges = np.array([info.min, info.max, 0, 1, info.max - 1], dtype)
        return np.concatenate([edges, rng.integers(info.min, info.max, 500, dtype, True)])
    wide = rng.standard_normal(500) * 10.0 ** rng.integers(-8, 8, 500)
    return wide.astype(dtype)


def _same(ours: np.ndarray, reference: np.ndarray) -> None:
    assert ours.dtype == reference.dtype
    if ours.dtype.kind == "f":
        np.testing.assert_array_equal(ours, reference)  # NaN matches NaN, payloads aside
    else:
        assert np.array_equal(ours, reference)


@pytest.mark.parametrize("source", TYPES)
@pytest.mark.parametrize("target", TYPES)
def test_fast_cast_matches_the_reference_rules(source: str, target: str) -> None:
    x = _values(source)
    reference = cast(x, D_TYPES[x.dtype], D_TYPES[np.dtype(target)])
    out = np.empty(x.shape, target)
    if fast_cast(np, x, out):
        _same(out, reference)
    else:  # only floats with a value outside the integer target's range are refused
        info = np.iinfo(target) if np.dtype(target).kind in "iu" else None
        assert x.dtype.kind == "f" and info is not None
        assert not np.all((x >= float(info.min)) & (x < float(info.max) + 1))


@pytest.mark.parametrize("source", ["float16", "float32", "float64"])
@pytest.mark.parametrize("target", ["int8", "int32", "int64", "uint8"])
def test_float_to_integer_in_range_is_fast_and_the_rest_is_refused(source, target) -> None:
    x = np.array([0.0, -0.9, 1.9, -7.5, 100.25], source)
    out = np.empty(x.shape, target)
    if np.dtype(target).kind == "u":
        x = np.abs(x)
    assert fast_cast(np, x, out)
    _same(out, cast(x, D_TYPES[x.dtype], D_TYPES[np.dtype(target)]))
    for bad in (np.nan, np.inf, -np.inf, 1e5 if target in ("int8", "uint8") else 1e30, -1.0):
        if bad == -1.0 and np.dtype(target).kind == "i":
            continue
        assert not fast_cast(np, np.array([1.0, bad], source), np.empty(2, target)), bad


def test_float64_to_float16_rounds_through_float32() -> None:
    twice = np.array([1 + 2**-11 + 2**-40])  # float32 rounds it to 1 + 2**-11, a tie, then 1
    out = np.empty(1, np.float16)
    assert fast_cast(np, twice, out) and out[0] == 1.0


def test_narrow_formats_are_left_to_the_reference_rules() -> None:
    import ml_dtypes

    x = np.ones(3, np.float32)
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn):
        assert not fast_cast(np, x, np.empty(3, dtype))
        assert not fast_cast(np, x.astype(dtype), np.empty(3, np.float32))
