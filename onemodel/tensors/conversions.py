"""Bit-exact conversions between the tensor layer's element types.

Exact mode promises the same bits on every device, so rounding into float16 and bfloat16 is done
by the spec's integer formulas instead of by NumPy, CuPy or the hardware, whose NaN payloads,
subnormal handling and rounding of wide integers differ. Every function takes its array namespace
from its input and uses only operations NumPy and CuPy share, so the same code runs on both.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.tensors.dtypes import DType

# A NumPy or CuPy array; the Array API has no common static type for both.
Array = Any


def float32_to_float16_bits(x: Array) -> Array:
    """Rounds to nearest even by integer arithmetic, so the bits do not depend on F16C or CUDA."""
    xp, a, shape = _flat(x, np.float32)
    u = a.view(xp.uint32)
    a = u & 0x7FFFFFFF
    m = a - (112 << 23)  # rebias; wraps below the normal range, where it is not selected
    normal = (m + 0xFFF + ((m >> 13) & 1)) >> 13  # a carry into the exponent is the right answer
    h = _select(
        xp,
        [
            (a > 0x7F800000, 0x7E00 | ((a >> 13) & 0x1FF)),
            (a >= 0x477FF000, 0x7C00),
            (a >= 0x38800000, normal),
            (a <= 0x33000000, 0),
        ],
        _float16_subnormal(xp, a),
    )
    return (h | ((u >> 16) & 0x8000)).astype(xp.uint16).reshape(shape)


def float16_bits_to_float32(bits: Array) -> Array:
    """Exact; only NaN needs a rule (payload kept, quiet bit forced), which devices disagree on."""
    xp, h, shape = _flat(bits, np.uint16)
    h = h.astype(xp.uint32)
    e = (h >> 10) & 0x1F
    man = h & 0x3FF
    # man < 2^11 is exact in float32 and man * 2^-24 is a normal float32, so nothing rounds.
    subnormal = (man.astype(xp.float32) * 2.0**-24).view(xp.uint32)
    f = _select(
        xp,
        [(e == 0x1F, 0x7F800000 | (man << 13)), (e == 0, subnormal)],
        ((e + 112) << 23) | (man << 13),
    )
    return _quiet(xp, f | ((h & 0x8000) << 16)).view(xp.float32).reshape(shape)


def float32_to_bfloat16_bits(x: Array) -> Array:
    """Rounds to nearest even by integer arithmetic; NaN keeps its top payload bits, made quiet."""
    xp, a, shape = _flat(x, np.float32)
    u = a.view(xp.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    h = xp.where(nan, (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    return h.astype(xp.uint16).reshape(shape)


def bfloat16_bits_to_float32(bits: Array) -> Array:
    """Exact; written out so that NaN comes out quiet on every device."""
    xp, h, shape = _flat(bits, np.uint16)
    return _quiet(xp, h.astype(xp.uint32) << 16).view(xp.float32).reshape(shape)


# float32 fields, and the scale of its subnormals: below 2^-126 the significand counts 2^-149s.
_SIGN32 = 0x80000000
_SIGNIFICAND32 = 0x007FFFFF
_SMALLEST_NORMAL32 = 2.0**-126
_SUBNORMAL_UNITS32 = 2.0**149


def float32_to_float64(x: Array) -> Array:
    """float32 values as float64, exactly, subnormals included even where the device's float32
    conversion flushes them (CuPy's -ftz=true): those are rebuilt from their bits."""
    xp = _namespace(x)
    bits = x.view(xp.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaNs become quiet, as intended
        converted = x.astype(xp.float64)  # right wherever x is not subnormal
    units = (bits & _SIGNIFICAND32).astype(xp.float64) * (1 / _SUBNORMAL_UNITS32)  # exact
    small = xp.where(bits >= _SIGN32, -units, units)  # ±0 and the subnormals, sign kept
    return xp.where((bits >> 23) & 0xFF == 0, small, converted)


def float64_to_float32(w: Array) -> Array:
    """float64 values rounded to nearest float32, ties to even, subnormal results included even
    where the device's conversion flushes them: there the significand is rint(|w|·2^149), one
    correctly rounded operation on an exactly scaled value."""
    xp = _namespace(w)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is intended
        converted = w.astype(xp.float32).view(xp.uint32)  # right where the result is normal
    magnitude = xp.abs(w)
    small = magnitude < _SMALLEST_NORMAL32  # NaN compares False and keeps the conversion
    units = xp.rint(xp.where(small, magnitude, 0.0) * _SUBNORMAL_UNITS32)  # at most 2^23
    small_bits = units.astype(xp.uint32) | (xp.signbit(w).astype(xp.uint32) << 31)
    return xp.where(small, small_bits, converted).view(xp.float32)


def cast(x: Array, src: DType, dst: DType) -> Array:
    """The reference Cast: one rounding for integers, saturation for floats to integers, and the
    spec's double rounding for float64 to the 16-bit formats, identical on every device.

    Where the array library has no bfloat16 (CuPy), bfloat16 values are held as uint16 bits, in
    and out."""
    xp = _namespace(x)
    xp, a, shape = _flat(x, held_dtype(xp, src))
    return _cast_flat(xp, a, src, dst).reshape(shape)


def held_dtype(xp: Any, dtype: DType) -> np.dtype:
    """The dtype an array of namespace `xp` holds `dtype` in."""
    if dtype == DType.BFLOAT16 and not _has_bfloat16(xp):
        return np.dtype(np.uint16)
    return dtype.numpy


def _has_bfloat16(xp: Any) -> bool:
    import array_api_compat

    return not array_api_compat.is_cupy_namespace(xp)


def _namespace(x: Array) -> Any:
    """The array API namespace of a NumPy or CuPy array (array_api_compat, ~5 ms to import,
    loads with the first conversion: a fast-mode session on float32 never calls one)."""
    import array_api_compat

    return array_api_compat.array_namespace(x)


def _cast_flat(xp: Any, x: Array, src: DType, dst: DType) -> Array:
    if src == dst:
        return x.copy()
    if dst == DType.BOOL:
        return _exact_wide(xp, x, src) != 0  # NaN is true, -0.0 false
    if src == DType.BOOL:
        x, src = x.astype(xp.uint8), DType.UINT8
    if not src.is_floating:
        return x.astype(dst.numpy) if dst.is_integer else _int_to_float(xp, x, src, dst)
    wide = _exact_wide(xp, x, src)
    return _float_to_int(xp, wide, dst) if dst.is_integer else _narrow_float(xp, wide, dst)


def _flat(x: Array, dtype: Any) -> tuple[Any, Array, tuple[int, ...]]:
    """Namespace, 1-D view and shape; 1-D so 0-d inputs stay arrays (NumPy turns 0-d results
    into scalars). The dtype is checked because the bit formulas would silently give garbage."""
    xp = _namespace(x)
    if x.dtype != np.dtype(dtype):
        raise TypeError(f"expected an array of {np.dtype(dtype)}, got {x.dtype}")
    return xp, x.reshape(-1), x.shape


def _select(xp: Any, cases: list[tuple[Array, Any]], default: Array) -> Array:
    """The value of the first true case, else default, from where() alone (numpy.select is not
    in CuPy's every version); constants become arrays of default's dtype so no promotion rule
    (NumPy's NEP 50 or CuPy's) can widen the result."""
    out = default
    for cond, value in reversed(cases):
        if not hasattr(value, "dtype"):
            value = xp.asarray(value, dtype=out.dtype)
        out = xp.where(cond, value, out)
    return out


def _float16_subnormal(xp: Any, a: Array) -> Array:
    """The float16 subnormal of |x| bits a in (2^-25, 2^-14), rounded to nearest even."""
    shift = 126 - xp.clip(a >> 23, 102, 112)  # clipped so lanes not selected still shift in range
    mant = (a & 0x7FFFFF) | 0x800000
    r = mant >> shift
    rem = mant & ((1 << shift) - 1)
    half = 1 << (shift - 1)
    return r + ((rem > half) | ((rem == half) & ((r & 1) == 1))).astype(r.dtype)


def _quiet(xp: Any, u: Array) -> Array:
    """float32 bits with the quiet bit forced on NaNs, as the spec's widenings require."""
    return xp.where((u & 0x7FFFFFFF) > 0x7F800000, u | 0x00400000, u)


def _exact_wide(xp: Any, x: Array, src: DType) -> Array:
    """float16 and bfloat16 widened exactly to float32, where the rounding formulas start; every
    other type as it is."""
    if src == DType.FLOAT16:
        return float16_bits_to_float32(x.view(xp.uint16))
    if src == DType.BFLOAT16:
        return bfloat16_bits_to_float32(x.view(xp.uint16))
    return x


def _narrow_float(xp: Any, w: Array, dst: DType) -> Array:
    """Round float32/float64 w into a float dst. float64 goes to the 16-bit types via float32, so
    it rounds twice, as the spec says; the float64->float32 step is IEEE's RNE cast everywhere,
    subnormals included."""
    if dst == DType.DOUBLE:
        if w.dtype == np.float32:
            return float32_to_float64(w)
        return w.astype(xp.float64)
    f = w if w.dtype == np.float32 else float64_to_float32(w)
    if dst == DType.FLOAT:
        return f
    to_bits = float32_to_float16_bits if dst == DType.FLOAT16 else float32_to_bfloat16_bits
    return to_bits(f).view(held_dtype(xp, dst))


def _float_to_int(xp: Any, w: Array, dst: DType) -> Array:
    """Truncate toward zero and saturate, NaN to 0. The bounds are compared as hi + 1 (a power of
    two, exact in any float) because float(2^63 - 1) is 2^63, which would not fit int64."""
    info = np.iinfo(dst.numpy)
    above = w >= float(info.max + 1)
    below = w <= float(info.min)
    inside = xp.where(above | below | xp.isnan(w), xp.zeros_like(w), w)  # C casts only these
    return _select(xp, [(above, int(info.max)), (below, int(info.min))], inside.astype(dst.numpy))


def _int_to_float(xp: Any, x: Array, src: DType, dst: DType) -> Array:
    """Integers to floats with ONE rounding to nearest even. Casting int64 to float32 and then to
    float16 would round twice; instead the value is rounded to odd at float64 (and at float32 for
    the 16-bit types), which a final RNE rounding to 2 or more fewer bits turns into the correct
    single rounding."""
    wide = x.astype(xp.uint64 if src == DType.UINT64 else xp.int64)
    hi = (wide >> 32) << 32  # hi and lo are exact in float64
    hi_f, lo_f = hi.astype(xp.float64), (wide - hi).astype(xp.float64)
    s = hi_f + lo_f  # the correctly rounded float64
    if dst == DType.DOUBLE:
        return s
    err = (hi_f - s) + lo_f  # fast two-sum, exact: |hi| >= |lo| whenever hi != 0
    w = _to_odd(xp, s, err > 0, err < 0)
    if dst != DType.FLOAT:
        f = w.astype(xp.float32)
        back = f.astype(xp.float64)
        w = _to_odd(xp, f, w > back, w < back)
    return _narrow_float(xp, w, dst)


def _to_odd(xp: Any, n: Array, above: Array, below: Array) -> Array:
    """Round-to-odd from the RNE result n, given where the exact value lies above or below it: an
    inexact n with an even last bit moves one ulp toward the exact value."""
    uint = xp.uint64 if n.dtype == xp.float64 else xp.uint32
    even = (n.view(uint) & 1) == 0
    toward = xp.where(above, xp.full_like(n, xp.inf), xp.full_like(n, -xp.inf))
    return xp.where((above | below) & even, xp.nextafter(n, toward), n)
