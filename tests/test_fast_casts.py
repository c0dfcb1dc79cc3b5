"""Fast-mode Cast (onemodel/backends/casts.py) gives the reference rules' values."""

import numpy as np
import pytest

from onemodel.backends import casts
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
    return np.concatenate([wide, [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]]).astype(dtype)


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


@pytest.mark.parametrize("target", ["int32", "int64", "uint8"])
def test_large_float_to_integer_converts_block_by_block_and_refuses_a_bad_last_block(target):
    """Above blocking.BLOCKED_ABOVE the range check and conversion go a block
    (RANGE_CHECKED_BLOCK) at a time: every block converts as the reference rules, and a value
    out of range in the last, partial block alone still refuses the whole."""
    size = 2 * casts.RANGE_CHECKED_BLOCK + 12345
    x = np.random.default_rng(5).uniform(0.0, 250.0, size).astype(np.float32)
    out = np.empty(size, target)
    assert fast_cast(np, x, out)
    _same(out, cast(x, DType.FLOAT, D_TYPES[np.dtype(target)]))
    x[-1] = np.nan
    assert not fast_cast(np, x, np.empty(size, target))


@pytest.mark.parametrize("source", TYPES)
@pytest.mark.parametrize("target", TYPES)
def test_zero_dimensional_arrays_cast_as_the_reference_rules(source: str, target: str) -> None:
    """A 0-d array (a scalar Cast in Celu's and FlexAttention's expansions) stays an array
    through every bit-operation step."""
    x = np.asarray(_values(source)[1])
    out = np.empty((), target)
    if fast_cast(np, x, out):
        _same(out, cast(x, D_TYPES[x.dtype], D_TYPES[np.dtype(target)]))


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


@pytest.mark.parametrize("target", ["float32", "float64", "bool", "int32"])
def test_every_float16_converts_as_the_reference_rules(target: str) -> None:
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    if target == "int32":
        every = every[np.isfinite(every)]
    out = np.empty(every.shape, target)
    assert fast_cast(np, every, out)
    reference = cast(every, DType.FLOAT16, D_TYPES[np.dtype(target)])
    _same(out, reference)
    if out.dtype.kind == "f":  # the same signs of zeros and NaNs
        np.testing.assert_array_equal(np.signbit(out), np.signbit(reference))


def test_float32_to_float16_rounds_as_the_reference_rules_over_bit_patterns() -> None:
    rng = np.random.default_rng(7)
    edges = [  # float16's subnormal, normal and overflow thresholds, densely
        np.arange(0x33000000, 0x33800000, 97, dtype=np.uint32),
        np.arange(0x387F0000, 0x38810000, dtype=np.uint32),
        np.arange(0x477FE000, 0x47800100, dtype=np.uint32),
    ]
    bits = np.concatenate(
        [rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32), *edges]
    )
    x = np.concatenate([bits, bits | 0x80000000]).view(np.float32)
    out = np.empty(x.shape, np.float16)
    assert fast_cast(np, x, out)
    reference = cast(x, DType.FLOAT, DType.FLOAT16)
    nan = np.isnan(reference)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], reference.view(np.uint16)[~nan])


@pytest.mark.parametrize("size", [1, 1000, casts.NUMPY_TO_FLOAT16_BELOW])
def test_float16_conversions_of_every_size_match_the_reference_rules(size: int) -> None:
    """Small arrays take NumPy's own conversions, larger ones the bit operations: edge bit
    patterns (float16's subnormal, normal and overflow thresholds, NaN, infinities, zeros)
    convert as the reference rules either way."""
    edges = np.concatenate(
        [
            np.arange(0x33000000, 0x33800000, 4099, dtype=np.uint32),
            np.arange(0x387FF000, 0x38801000, 2, dtype=np.uint32),
            np.arange(0x477FE000, 0x47800100, 3, dtype=np.uint32),
            np.uint32([0, 0x7F800000, 0x7FC00000, 0x00000001, 0x3F800000]),
        ]
    )
    bits = np.resize(np.concatenate([edges, edges | 0x80000000]), size)
    x = bits.view(np.float32)
    half = np.empty(x.shape, np.float16)
    assert fast_cast(np, x, half)
    wide = np.empty(x.shape, np.float32)
    assert fast_cast(np, half, wide)
    for ours, reference in (
        (half, cast(x, DType.FLOAT, DType.FLOAT16)),
        (wide, cast(half, DType.FLOAT16, DType.FLOAT)),
    ):
        _same(ours, reference)
        number = ~np.isnan(reference)
        np.testing.assert_array_equal(np.signbit(ours[number]), np.signbit(reference[number]))


@pytest.mark.parametrize(
    ("source", "target"),
    [("float32", "float16"), ("float16", "float32"), ("float16", "bool"), ("float32", "int32"),
     ("int64", "float16"), ("uint8", "int64")],
)  # fmt: skip
def test_large_arrays_convert_block_by_block_as_a_whole(monkeypatch, source, target) -> None:
    from onemodel.backends import blocking

    x = np.resize(_values(source), 5000)
    if target == "int32":
        x = np.nan_to_num(x, posinf=0, neginf=0).clip(-1e9, 1e9)
    reference = cast(x, D_TYPES[x.dtype], D_TYPES[np.dtype(target)])
    monkeypatch.setattr(blocking, "BLOCKED_ABOVE", 1000)
    monkeypatch.setattr(blocking, "BLOCK", 777)  # blocks that do not divide the size
    out = np.empty(x.shape, target)
    assert fast_cast(np, x, out)
    _same(out, reference)
    if target == "int32":  # a value out of range in the last block only refuses the whole
        x[-1] = 1e30
        assert not fast_cast(np, x, np.empty(x.shape, target))
