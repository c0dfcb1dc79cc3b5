"""Bit-exactness of onemodel.tensors.conversions against references that share none of its code.

The float16/bfloat16 formulas are compared with NumPy's float16 cast and ml_dtypes' bfloat16 cast.
`cast` is compared with a small exact model in plain Python integers: decode the source bits into
sign * n * 2^k, apply the rule, and round to nearest even in exact arithmetic for any format. It
knows nothing of round-to-odd, two-sums or bit tricks, so it cannot share their mistakes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest

from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.tensors import Memory
from onemodel.tensors.conversions import (
    bfloat16_bits_to_float32,
    cast,
    float16_bits_to_float32,
    float32_to_bfloat16_bits,
    float32_to_float16_bits,
    float32_to_float64,
    float64_to_float32,
)
from onemodel.tensors.dtypes import DType

ALL_16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
F32_QUIET = 0x00400000


def _bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of a float array as unsigned integers of the same width."""
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _is_nan16(h: np.ndarray) -> np.ndarray:
    return (h & 0x7FFF) > 0x7C00


# ---------------------------------------------------------------------------------------------
# float16 and bfloat16 <-> float32, exhaustively and against NumPy / ml_dtypes
# ---------------------------------------------------------------------------------------------


def test_float16_to_float32_all_patterns() -> None:
    got = _bits(float16_bits_to_float32(ALL_16))
    assert got.dtype == np.uint32
    nan = _is_nan16(ALL_16)
    want = _bits(ALL_16.view(np.float16).astype(np.float32))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    h = ALL_16[nan].astype(np.uint32)
    want_nan = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13) | F32_QUIET
    np.testing.assert_array_equal(got[nan], want_nan)


def test_float16_round_trip_all_patterns() -> None:
    back = float32_to_float16_bits(float16_bits_to_float32(ALL_16))
    assert back.dtype == np.uint16
    nan = _is_nan16(ALL_16)
    np.testing.assert_array_equal(back[~nan], ALL_16[~nan])
    np.testing.assert_array_equal(back[nan], ALL_16[nan] | 0x0200)  # quiet bit set, rest kept


def test_bfloat16_to_float32_all_patterns() -> None:
    got = _bits(bfloat16_bits_to_float32(ALL_16))
    nan = (ALL_16 & 0x7FFF) > 0x7F80
    want = _bits(ALL_16.view(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(got[~nan], ALL_16[~nan].astype(np.uint32) << 16)
    np.testing.assert_array_equal(got[nan], (ALL_16[nan].astype(np.uint32) << 16) | F32_QUIET)
    back = float32_to_bfloat16_bits(bfloat16_bits_to_float32(ALL_16))
    np.testing.assert_array_equal(back[~nan], ALL_16[~nan])
    np.testing.assert_array_equal(back[nan], ALL_16[nan] | 0x0040)


def _around(mid32: np.ndarray) -> np.ndarray:
    """Exact float32 midpoints, both signs, with the float32 values just below and above."""
    mid32 = np.concatenate([mid32, -mid32])
    with np.errstate(over="ignore"):  # the neighbours of +-max are +-inf
        up, down = np.nextafter(mid32, np.float32(np.inf)), np.nextafter(mid32, np.float32(-np.inf))
    return np.concatenate([mid32, up, down])


def _float32_sample(n: int = 2_000_000) -> np.ndarray:
    # Midpoints between adjacent finite float16 values (subnormals included); exact in float32.
    f16 = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    f16_mid = ((f16[:-1] + f16[1:]) / 2).astype(np.float32)
    # Midpoints between adjacent finite bfloat16 values: the low 16 bits are exactly 0x8000.
    bf16_mid = ((np.arange(0x7F80, dtype=np.uint32) << 16) | 0x8000).view(np.float32)
    boundaries = np.array(
        [65504, 65519.99, 65520, 65536, 2.0**-24, 2.0**-25, 2.0**-14, 2.0**-126, 2.0**-149,
         np.finfo(np.float32).max, 1, 0, np.inf],
        dtype=np.float32,
    )  # fmt: skip
    crafted = np.concatenate([_around(f16_mid), _around(bf16_mid), _around(boundaries)])
    rng = np.random.default_rng(20240611)
    random = rng.integers(0, 1 << 32, size=n - crafted.size, dtype=np.uint32).view(np.float32)
    return np.concatenate([crafted, random])


@pytest.fixture(scope="module")
def float32_sample() -> np.ndarray:
    return _float32_sample()


def test_float32_to_float16_against_numpy(float32_sample: np.ndarray) -> None:
    x = float32_sample
    assert x.size == 2_000_000
    got = float32_to_float16_bits(x)
    assert got.dtype == np.uint16
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        want = _bits(x[~nan].astype(np.float16))
    np.testing.assert_array_equal(got[~nan], want)
    u = _bits(x[nan])  # NumPy's NaN payload handling is not the spec's; check the formula
    want_nan = ((u >> 16) & 0x8000) | 0x7E00 | ((u >> 13) & 0x1FF)
    np.testing.assert_array_equal(got[nan], want_nan)


def test_float32_to_bfloat16_against_ml_dtypes(float32_sample: np.ndarray) -> None:
    x = float32_sample
    got = float32_to_bfloat16_bits(x)
    assert got.dtype == np.uint16
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], _bits(x[~nan].astype(ml_dtypes.bfloat16)))
    np.testing.assert_array_equal(got[nan], (_bits(x[nan]) >> 16) | 0x40)


def test_spec_boundaries() -> None:
    x = np.array([65504, 65519.99, 65520, 2.0**-24, 2.0**-25, 2.0**-24 * 1.5, 2.0**-24 * 2.5],
                 dtype=np.float32)  # fmt: skip
    up = np.nextafter(np.float32(2.0**-25), np.float32(1))
    down = np.nextafter(np.float32(2.0**-25), np.float32(0))
    got = float32_to_float16_bits(np.concatenate([x, [up, down]]).astype(np.float32))
    assert got.tolist() == [0x7BFF, 0x7BFF, 0x7C00, 0x0001, 0x0000, 0x0002, 0x0002, 0x0001, 0x0]


@pytest.mark.parametrize(
    "fn, dtype",
    [
        (float32_to_float16_bits, np.float32),
        (float32_to_bfloat16_bits, np.float32),
        (float16_bits_to_float32, np.uint16),
        (bfloat16_bits_to_float32, np.uint16),
    ],
)
def test_bit_functions_keep_shape(fn, dtype) -> None:
    for shape in [(), (0,), (2, 0, 3), (2, 3, 4)]:
        x = np.ones(shape, dtype=dtype)
        out = fn(x)
        assert isinstance(out, np.ndarray) and out.shape == shape
        np.testing.assert_array_equal(out.reshape(-1), fn(x.reshape(-1)))
    strided = np.arange(10, dtype=dtype)[::3]
    np.testing.assert_array_equal(fn(strided), fn(strided.copy()))
    with pytest.raises(TypeError):
        fn(np.ones(3, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# The exact reference for Cast
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fmt:
    """An IEEE-style binary format: `width` bits, `man` stored mantissa bits."""

    width: int
    man: int

    @property
    def emask(self) -> int:
        return (1 << (self.width - 1 - self.man)) - 1

    @property
    def bias(self) -> int:
        return self.emask >> 1


FMT = {
    DType.FLOAT16: Fmt(16, 10),
    DType.BFLOAT16: Fmt(16, 7),
    DType.FLOAT: Fmt(32, 23),
    DType.DOUBLE: Fmt(64, 52),
}


class Value(NamedTuple):
    """(-1)^sign * n * 2^k for kind "num"; for "nan" n * 2^k is the payload as a fraction of 1."""

    kind: str
    sign: int
    n: int = 0
    k: int = 0


def _shift(n: int, s: int) -> int:
    """floor(n * 2^s) for n >= 0."""
    return n << s if s >= 0 else n >> -s


def decode(bits: int, f: Fmt) -> Value:
    sign, e, m = bits >> (f.width - 1), (bits >> f.man) & f.emask, bits & ((1 << f.man) - 1)
    if e == f.emask:
        return Value("nan" if m else "inf", sign, m, -f.man)
    if e == 0:
        return Value("num", sign, m, 1 - f.bias - f.man)
    return Value("num", sign, m | (1 << f.man), e - f.bias - f.man)


def encode(v: Value, f: Fmt) -> int:
    """The bits of v in format f: round to nearest, ties to even; NaN keeps its leading payload
    bits and is made quiet."""
    sign = v.sign << (f.width - 1)
    if v.kind == "nan":
        return sign | (f.emask << f.man) | _shift(v.n, f.man + v.k) | (1 << (f.man - 1))
    if v.kind == "inf" or v.n == 0:
        return sign | ((f.emask << f.man) if v.kind == "inf" else 0)
    lead = v.n.bit_length() - 1 + v.k  # exponent of the leading bit
    q = max(lead, 1 - f.bias) - f.man  # exponent of the last mantissa bit kept
    if v.k >= q:
        r = v.n << (v.k - q)
    else:
        r, rest, half = v.n >> (q - v.k), v.n & ((1 << (q - v.k)) - 1), 1 << (q - v.k - 1)
        r += rest > half or (rest == half and r & 1)
    if r >> (f.man + 1):  # rounding carried out of the mantissa
        r, q = r >> 1, q + 1
    biased = q + f.man + f.bias if r >> f.man else 0
    if biased >= f.emask:
        return sign | (f.emask << f.man)
    return sign | (biased << f.man) | (r & ((1 << f.man) - 1))


def _int_range(t: DType) -> tuple[int, int]:
    bits = 8 * t.itemsize
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t.is_signed else (0, (1 << bits) - 1)


def ref_cast(raw: int, src: DType, dst: DType) -> int | bool:
    """Cast of one element given as a Python int: the value for int/bool types, the bit pattern
    for float types. Returns the same kind of thing for dst."""
    if src == dst:
        return raw
    v = decode(raw, FMT[src]) if src.is_floating else Value("num", int(raw < 0), abs(int(raw)))
    if dst == DType.BOOL:
        return v.kind != "num" or v.n != 0
    if dst.is_floating:
        if src == DType.DOUBLE and dst in (DType.FLOAT16, DType.BFLOAT16):
            v = decode(encode(v, FMT[DType.FLOAT]), FMT[DType.FLOAT])  # the spec's double rounding
        return encode(v, FMT[dst])
    lo, hi = _int_range(dst)
    if v.kind != "num":
        return 0 if v.kind == "nan" else (lo if v.sign else hi)
    value = -_shift(v.n, v.k) if v.sign else _shift(v.n, v.k)  # truncation toward zero
    if src.is_floating:
        return min(max(value, lo), hi)
    value %= 1 << (8 * dst.itemsize)
    return value - (1 << (8 * dst.itemsize)) if value > hi else value


def test_reference_rounding_examples() -> None:
    """The reference itself, on cases worked out by hand."""
    f16, f32 = FMT[DType.FLOAT16], FMT[DType.FLOAT]
    assert encode(Value("num", 0, 1), f16) == 0x3C00
    assert encode(Value("num", 0, 2049), f16) == 0x6800  # tie to even: 2048
    assert encode(Value("num", 0, 2051), f16) == 0x6802  # tie to even: 2052
    assert encode(Value("num", 0, 65519), f16) == 0x7BFF
    assert encode(Value("num", 0, 65520), f16) == 0x7C00
    assert encode(Value("num", 1, 1, -25), f16) == 0x8000  # -2^-25: tie to even, zero
    assert encode(Value("num", 0, 3, -26), f16) == 0x0001  # 1.5 * 2^-25
    assert encode(Value("num", 0, 1, -24), f16) == 0x0001
    assert encode(Value("num", 0, (1 << 24) + 1), f32) == 0x4B800000
    assert encode(Value("num", 0, (1 << 24) + 3), f32) == 0x4B800002
    assert encode(Value("nan", 1, 1, -23), f16) == 0xFE00  # payload below float16's bits is lost
    assert decode(0x0001, f16) == Value("num", 0, 1, -24)
    assert ref_cast(-1, DType.INT32, DType.UINT8) == 255
    assert ref_cast(0xC0200000, DType.FLOAT, DType.INT8) == -2  # -2.5 truncates to -2
    # float64 1 + 2^-11 + 2^-40 rounds to 1 + 2^-11 in float32, a float16 tie, then down to 1.0;
    # one rounding would give 1 + 2^-10.
    x = np.array([1 + 2.0**-11 + 2.0**-40]).view(np.uint64)[0]
    assert ref_cast(int(x), DType.DOUBLE, DType.FLOAT16) == 0x3C00


# ---------------------------------------------------------------------------------------------
# Cast for all 169 ordered pairs, crafted values
# ---------------------------------------------------------------------------------------------

_INT_SEEDS = [
    0, 1, 2, 3, 5, 127, 128, 129, 255, 256, 257, 259, 2049, 2051, 32767, 32768, 65504, 65505,
    65519, 65520, 65535, 65536, 2**24 + 1, 2**24 + 3, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
    2**53 + 1, 2**62 + 2**9, 2**63 - 1, 2**63, 2**64 - 1, 257 * 2**55, 2049 * 2**40,
    2049 * 2**40 + 1, (2**24 + 1) * 2**39, (2**53 + 1) * 2**9, 2**63 - 2**10, 2**64 - 2**11,
]  # fmt: skip

_FLOAT_SEEDS = [
    0.0, 1.0, 0.5, 1.5, 2.5, 3.5, 0.49999997, 0.9999999, 127.5, 128.0, 128.5, 129.0, 255.5,
    256.0, 32767.5, 32768.0, 65504.0, 65519.99, 65520.0, 65535.5, 65536.0, 2.0**31 - 128,
    2.0**31, 2.0**32, 2.0**32 - 1, 2.0**63 - 1024, 2.0**63, 2.0**64 - 2048, 2.0**64, 2.0**24 + 2,
    2.0**53 + 2, 1e30, 1e300, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-25 * (1 + 2.0**-23),
    2.0**-14, 1 + 2.0**-11, 1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8, 1 + 2.0**-8 + 2.0**-40,
    1.401298464324817e-45, 1.1754943508222875e-38, 3.4028234663852886e38, 3.4028235677973366e38,
    5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, float("inf"),
]  # fmt: skip


def _nan_patterns(f: Fmt) -> list[int]:
    nan = f.emask << f.man
    quiet = 1 << (f.man - 1)
    patterns = [nan | quiet, nan | quiet | 1, nan | 1, nan | ((1 << f.man) - 1), nan | (quiet >> 1)]
    return patterns + [p | (1 << (f.width - 1)) for p in patterns]


def crafted(src: DType) -> list[int]:
    """Source elements as Python ints: values for int/bool types, bit patterns for floats."""
    if src == DType.BOOL:
        return [0, 1]
    if src.is_integer:
        lo, hi = _int_range(src)
        near = {s + d for s in _INT_SEEDS for d in (-1, 0, 1)} | {lo, lo + 1, hi, hi - 1}
        return sorted({v for s in near for v in (s, -s) if lo <= v <= hi})
    values = np.array([s for v in _FLOAT_SEEDS for s in (v, -v)], dtype=np.float64)
    with np.errstate(over="ignore"):
        narrowed = values.astype(src.numpy)  # whatever this rounds to is still a valid input
    bits = set(_bits(narrowed).tolist()) | set(_nan_patterns(FMT[src]))
    f = FMT[src]
    top = f.emask << f.man
    bits |= {top - 1, (top - 1) | (1 << (f.width - 1)), 1, 1 << f.man}  # max, -max, tiny, normal
    return sorted(bits)


def _array(raw: list[int], src: DType) -> np.ndarray:
    if src.is_floating:
        return np.array(raw, dtype=np.uint64).astype(f"u{src.itemsize}").view(src.numpy)
    return np.array(raw, dtype=src.numpy)


def _check_cast(raw: list[int], src: DType, dst: DType) -> None:
    x = _array(raw, src)
    got = cast(x, src, dst)
    assert got.dtype == dst.numpy and got.shape == x.shape
    got_list = (_bits(got) if dst.is_floating else got).tolist()
    want = [ref_cast(r, src, dst) for r in raw]
    bad = [(r, g, w) for r, g, w in zip(raw, got_list, want, strict=True) if g != w]
    fmt = (lambda v: hex(v)) if dst.is_floating else repr
    assert not bad, f"{src.name}->{dst.name}: (input, got, want) " + ", ".join(
        f"({r if not src.is_floating else hex(r)}, {fmt(g)}, {fmt(w)})" for r, g, w in bad[:10]
    )


@pytest.mark.parametrize("src, dst", list(itertools.product(DType, DType)), ids=lambda t: t.name)
def test_cast_crafted(src: DType, dst: DType) -> None:
    _check_cast(crafted(src), src, dst)


def test_cast_same_type_is_a_copy() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    y = cast(x, DType.INT32, DType.INT32)
    assert not np.shares_memory(x, y)
    np.testing.assert_array_equal(x, y)


def test_cast_shapes_and_dtype_check() -> None:
    for shape in [(), (0,), (3, 0), (2, 3, 4)]:
        x = np.full(shape, 2.5, dtype=np.float32)
        for dst in DType:
            got = cast(x, DType.FLOAT, dst)
            assert got.shape == shape and got.dtype == dst.numpy
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4).transpose(2, 0, 1)[::2]
    got = cast(x, DType.INT64, DType.FLOAT16)
    np.testing.assert_array_equal(got, x.astype(np.float16))  # small ints: exact either way
    with pytest.raises(TypeError):
        cast(np.ones(3, dtype=np.float64), DType.FLOAT, DType.INT32)


# ---------------------------------------------------------------------------------------------
# Integers to floats: exhaustive for the narrow types, random and tie-built for the wide ones
# ---------------------------------------------------------------------------------------------

NARROW_INTS = [DType.INT8, DType.UINT8, DType.INT16, DType.UINT16]
WIDE_INTS = [DType.INT32, DType.INT64, DType.UINT64]
FLOATS = [DType.FLOAT16, DType.BFLOAT16, DType.FLOAT, DType.DOUBLE]


@pytest.mark.parametrize("dst", [DType.FLOAT16, DType.BFLOAT16, DType.FLOAT], ids=lambda t: t.name)
@pytest.mark.parametrize("src", NARROW_INTS, ids=lambda t: t.name)
def test_narrow_ints_exhaustive(src: DType, dst: DType) -> None:
    lo, hi = _int_range(src)
    _check_cast(list(range(lo, hi + 1)), src, dst)


def _wide_sample(src: DType) -> list[int]:
    lo, hi = _int_range(src)
    bits = 8 * src.itemsize
    rng = np.random.default_rng(bits + src.value)
    words = rng.integers(0, 1 << bits, size=2000, dtype=np.uint64).tolist()
    uniform = [w + lo for w in words[:1000]]
    # Uniform bit lengths, so small magnitudes (exact even in float16) get their share.
    mags = [
        w >> int(n) for w, n in zip(words[1000:], rng.integers(0, bits, size=1000), strict=True)
    ]
    # (2^p + 1) * 2^m is a midpoint between two values of a p-bit format and (2^p + 3) * 2^m
    # one that rounds the other way; +-1 puts the value just off the tie, where rounding twice
    # (int64 -> float32 -> float16) goes wrong.
    ties = [
        ((1 << p) + off) * (1 << m) + d
        for p in (8, 11, 24, 53)
        for off in (1, 3, (1 << p) - 1)
        for m in range(bits)
        for d in (-1, 0, 1)
    ]
    candidates = uniform + mags + ties
    return sorted({v for c in candidates for v in (c, -c) if lo <= v <= hi})


@pytest.mark.parametrize("dst", FLOATS, ids=lambda t: t.name)
@pytest.mark.parametrize("src", WIDE_INTS, ids=lambda t: t.name)
def test_wide_ints_random_and_ties(src: DType, dst: DType) -> None:
    sample = _wide_sample(src)
    assert len(sample) > 2000
    _check_cast(sample, src, dst)


# ---------------------------------------------------------------------------------------------
# Floats to everything: random bit patterns
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("src", FLOATS, ids=lambda t: t.name)
def test_floats_random_bits(src: DType) -> None:
    f = FMT[src]
    rng = np.random.default_rng(src.value)
    uniform = rng.integers(0, 1 << f.width, size=1500, dtype=np.uint64).tolist()
    # Also magnitudes 2^-2 .. 2^65, where the integer types' truncation and saturation happen.
    exps = rng.integers(f.bias - 2, min(f.bias + 66, f.emask), size=1500).tolist()
    mans = rng.integers(0, 1 << f.man, size=1500, dtype=np.uint64).tolist()
    signs = rng.integers(0, 2, size=1500).tolist()
    near_ints = [
        (s << (f.width - 1)) | (e << f.man) | m for s, e, m in zip(signs, exps, mans, strict=True)
    ]
    raw = sorted(set(uniform + near_ints))
    for dst in DType:
        _check_cast(raw, src, dst)


@pytest.mark.parametrize("dst", [DType.FLOAT16, DType.BFLOAT16], ids=lambda t: t.name)
def test_float64_to_16_bit_rounds_twice(dst: DType) -> None:
    """float64 values just off a 16-bit midpoint: by less than float32's half ulp (float32
    rounds them onto the tie, then ties-to-even decides) and by more (a single rounding)."""
    rng = np.random.default_rng(dst.value)
    f = FMT[dst]
    bits = rng.integers(0, (f.emask << f.man) - 1, size=1000).astype(np.uint16)
    lower = bits.view(dst.numpy).astype(np.float64)
    mid = (lower + (bits + 1).view(dst.numpy).astype(np.float64)) / 2
    x = np.concatenate([mid * (1 + e) for e in (2.0**-30, -(2.0**-30), 2.0**-20, -(2.0**-20))])
    x = np.concatenate([x, -x])
    _check_cast(_bits(x).tolist(), DType.DOUBLE, dst)


# ---------------------------------------------------------------------------------------------
# float32 <-> float64 through the bits: NumPy's IEEE conversions, even on a flushing device
# ---------------------------------------------------------------------------------------------

FLUSHING_OR_NOT = ["numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)]


def _memory(name: str) -> Memory:
    try:
        return KernelPaths.get(name).memory
    except BackendUnavailableError as error:
        pytest.skip(str(error))


def _float64_sample() -> np.ndarray:
    """float64 values whose float32 rounding is hard: every tie and near-tie between adjacent
    float32 subnormals and around 2^-126 (rounding up into the normals), the subnormal range's
    random points, and random bits of every exponent."""
    units = np.arange(0, 1 << 12, dtype=np.float64)
    ties = np.concatenate([units + 0.5, (1 << 23) - units - 0.5]) * 2.0**-149
    near = np.concatenate([np.nextafter(ties, 0), np.nextafter(ties, 1)])
    rng = np.random.default_rng(17)
    subnormal = rng.random(200_000) * 2.0**-126
    random = rng.integers(0, 1 << 64, size=200_000, dtype=np.uint64).view(np.float64)
    values = np.concatenate([ties, near, subnormal, random, [0.0, 2.0**-150, 2.0**-126]])
    return np.concatenate([values, -values])


@pytest.mark.parametrize("backend", FLUSHING_OR_NOT)
def test_float64_to_float32_rounds_as_numpy_does_subnormals_included(backend: str) -> None:
    memory, values = _memory(backend), _float64_sample()
    with np.errstate(over="ignore", invalid="ignore"):
        expected = values.astype(np.float32)
    got = memory.to_host(float64_to_float32(memory.xp.asarray(values)))
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(expected)[~nan])
    assert (np.abs(expected) < 2.0**-126).sum() > 100_000  # the subnormals are really tested


@pytest.mark.parametrize("backend", FLUSHING_OR_NOT)
def test_float32_to_float64_is_exact_subnormals_included(
    backend: str, float32_sample: np.ndarray
) -> None:
    memory = _memory(backend)
    subnormals = np.arange(1 << 23, dtype=np.uint32)[::7].view(np.float32)
    values = np.concatenate([float32_sample, subnormals, -subnormals])
    with np.errstate(invalid="ignore"):
        expected = values.astype(np.float64)
    got = memory.to_host(float32_to_float64(memory.xp.asarray(values)))
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(expected)[~nan])
