"""Fast-mode Cast between the array library's numeric types: one conversion pass where the
library's conversion is the answer the spec (and `onemodel.tensors.conversions.cast`, exact
mode's reference rules) gives.

That holds for bool and integers to anything (NumPy and CuPy convert integers to floats with
one rounding to nearest even, and integers to integers by wrapping), for floats to floats (one
rounding; float64 to float16 rounds through float32 as the spec says) and for floats to bool.
Floats to integers saturate in the reference rules, where a plain conversion is undefined; on
the host a min/max pass proves the values in range (then the plain conversion is right), and
anything else (NaN, infinities, out of range, a device array, whose min/max would wait for the
device) is left to the reference rules. NaN payloads are not kept (fast mode does not promise
them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends import blocking
from onemodel.backends.fp_errors import quiet

# The types both libraries convert natively (ml_dtypes' float8s also say kind "f": not these).
_PLAIN = frozenset(
    np.dtype(f"{kind}{bits}")
    for kind, widths in (
        ("int", (8, 16, 32, 64)),
        ("uint", (8, 16, 32, 64)),
        ("float", (16, 32, 64)),
    )
    for bits in widths
) | {np.dtype(bool)}


def fast_cast(xp: Any, x: Any, out: Any) -> bool:
    """Write `x` converted into `out` when the plain conversion is the reference answer;
    False when the reference rules must decide (`out` may then hold part of the answer).

    Large host arrays convert a block of blocking.BLOCK elements at a time: the passes of the
    bit-operation conversions and their temporaries then stay in cache, and no temporary is
    large enough to be mapped and unmapped (page faults) in every call (float32 to float16 at
    4M elements: 1521 page faults a call before). A one-pass conversion (a plain copy) is not
    blocked: there the extra calls only cost (int32 to int64 at 4M elements 4.4 ms whole against
    5.2 ms blocked, AMD EPYC). Float to integer takes larger blocks (RANGE_CHECKED_BLOCK)."""
    with quiet():  # overflow to infinity is the intended result
        if (
            xp is not np
            or x.size <= blocking.BLOCKED_ABOVE
            or not _several_passes(x.dtype, out.dtype)
            or not (x.flags.c_contiguous and out.flags.c_contiguous)
        ):
            return _fast_cast(xp, x, out)
        flat_x, flat_out = x.reshape(-1), out.reshape(-1)
        block = blocking.BLOCK if np.float16 in (x.dtype, out.dtype) else RANGE_CHECKED_BLOCK
        return all(
            _fast_cast(xp, flat_x[start : start + block], flat_out[start : start + block])
            for start in range(0, x.size, block)
        )


def _several_passes(source: Any, target: Any) -> bool:
    """Whether `_fast_cast` converts source to target in several passes on the host: to or
    from float16 (bit operations) and float to integer (a range check first)."""
    return np.float16 in (source, target) or (source.kind == "f" and target.kind in "iu")


# Float to integer converts in blocks this large: its range check reads a block twice (min,
# max) before the conversion reads it again, and each reduction costs a call, so the bit
# operations' small blocks cost more calls than they save (float32 to int32 at 4M elements,
# AMD EPYC, 1 thread: 2.98 ms in blocks of 2^16, 2.07 whole, 1.60 in blocks of 2^20; to int64
# 4.21, 3.38, 3.21; to uint8 1.25, 1.22, 1.01).
RANGE_CHECKED_BLOCK = 1 << 20

# Below these sizes NumPy's own float16 conversions, scalar loops (3.3 ns an element to float16,
# 1.3 from it, AMD EPYC), cost less than the bit operations' ufunc calls (at 1k elements 2.6
# against 16 µs to float16, 2.0 against 5.9 from it; even at 16k and 4k elements).
NUMPY_TO_FLOAT16_BELOW = 1 << 14
NUMPY_FROM_FLOAT16_UP_TO = 1 << 12


def _fast_cast(xp: Any, x: Any, out: Any) -> bool:
    source, target = x.dtype, out.dtype
    if source not in _PLAIN or target not in _PLAIN:
        return False
    if target.kind == "b":
        if source == np.float16 and xp is np:  # NumPy compares float16 in a scalar loop
            magnitude = np.bitwise_and(x.view(np.uint16), np.uint16(0x7FFF))
            np.not_equal(magnitude, np.uint16(0), out=out)
        else:
            xp.not_equal(x, source.type(0), out=out)  # NaN is true, -0.0 false
        return True
    if source.kind == "f" and target.kind in "iu":
        return _float_to_integer(xp, x, out)
    if source == np.float64 and target == np.float16:
        x = x.astype(xp.float32)  # the spec's double rounding, through float32
    if target == np.float16 and source.kind in "biu" and xp is np:
        # through float32, exactly where it matters: integers beyond 2^24 are float16's inf
        x = x.astype(np.float32)
        source = x.dtype
    if source == np.float32 and target == np.float16 and xp is np:
        if x.size < NUMPY_TO_FLOAT16_BELOW:
            np.copyto(out, x)
        else:
            _float32_to_float16(x, out)
        return True
    if source == np.float16 and xp is np and target.kind == "f":
        if target == np.float32:
            _widen_float16(x, out)
        else:
            xp.copyto(out, _widen_float16(x, np.empty(x.shape, np.float32)))
        return True
    xp.copyto(out, x, casting="unsafe")
    return True


def _widen_float16(x: Any, out: Any) -> Any:
    """float16 x into float32 out: NumPy's conversion for small arrays, else bit operations."""
    if x.size <= NUMPY_FROM_FLOAT16_UP_TO:
        np.copyto(out, x)
        return out
    return _float16_to_float32(x, out)


def _float16_to_float32(x: Any, out: Any) -> Any:
    """float16 to float32 by bit operations, 3 passes (NumPy's own conversion is a scalar loop,
    measured 3x slower): the bits as int16, widened to int32 and shifted left by 13, hold the
    sign (extended over bits 28-31, which an AND clears) and the 15 other bits in float32's
    layout, which make float32 value · 2^-112 exactly (subnormals included, as float32 normals
    or subnormals), so a multiplication by 2^112 is exact; infinities and NaNs, whose exponent
    field is all ones, then need that field set too (checked for first, on the 16-bit
    magnitudes, which cost a quarter of a float32 pass: they are rare)."""
    bits = out.view(np.int32)
    np.left_shift(x.view(np.int16), np.int32(13), out=bits, dtype=np.int32)
    np.bitwise_and(bits, np.int32(-0x70000001), out=bits)  # 0x8FFFFFFF: the sign kept
    np.multiply(out, np.float32(2.0**112), out=out)
    magnitude = np.bitwise_and(x.view(np.uint16), np.uint16(0x7FFF))
    if x.size and magnitude.max() >= 0x7C00:
        special = magnitude >= 0x7C00
        np.bitwise_or(bits, np.int32(0x7F800000), out=bits, where=special)
    return out


def _float_to_integer(xp: Any, x: Any, out: Any) -> bool:
    """Truncation toward zero, where every value provably truncates into the target's range."""
    if xp is not np:
        return False
    if x.dtype == np.float16:  # NumPy's float16 reductions are slow
        x = _widen_float16(x, np.empty(x.shape, np.float32))
    if x.size:
        info = np.iinfo(out.dtype)
        # the ufuncs' reductions (ndarray.min's wrapper costs a microsecond a call more); a NaN
        # makes both comparisons false
        low, high = np.minimum.reduce(x, axis=None), np.maximum.reduce(x, axis=None)
        if not (low >= float(info.min) and high < float(info.max + 1)):
            return False
    np.copyto(out, x, casting="unsafe")
    return True


def _float32_to_float16(x: Any, out: Any) -> None:
    """float32 to float16, rounding to nearest even, by float and bit operations: 10 float32
    passes and 2 of 16 bits (NumPy's own conversion is a scalar loop, 5 ns an element here).
    With m = |x| clamped to 2^16 (NaN kept) and c = 2^e for its exponent e (at least 2^-14,
    float16's smallest normal, so that its subnormals round at 2^-24; at most 2^16),
    s = m·2^-13 lies in c's binade below 2c, where IEEE addition rounds s + c at 2^(e-23):
    (s + c) - c is s rounded at float16's last place of m, exactly. Times 2^-99 (2^13 · 2^-112)
    that value's float32 bits shifted right by 13 are the float16 bits (2^16 lands on
    infinity's, NaN on a NaN's)."""
    # Explicit outputs throughout: on a 0-d array NumPy's ufuncs would answer scalars.
    magnitude = np.empty(x.shape, np.float32)
    np.bitwise_and(x.view(np.uint32), np.uint32(0x7FFFFFFF), out=magnitude.view(np.uint32))
    scale = np.clip(
        magnitude, np.float32(2.0**-14), np.float32(2.0**16), out=np.empty_like(magnitude)
    )
    np.bitwise_and(scale.view(np.uint32), np.uint32(0x7F800000), out=scale.view(np.uint32))
    np.clip(magnitude, np.float32(0), np.float32(2.0**16), out=magnitude)
    np.multiply(magnitude, np.float32(2.0**-13), out=magnitude)
    np.add(magnitude, scale, out=magnitude)
    np.subtract(magnitude, scale, out=magnitude)
    np.multiply(magnitude, np.float32(2.0**-99), out=magnitude)
    half = out.view(np.uint16)
    np.right_shift(magnitude.view(np.uint32), np.uint32(13), out=half, casting="unsafe")
    sign = np.right_shift(
        x.view(np.uint32), np.uint32(16), out=np.empty(x.shape, np.uint16), casting="unsafe"
    )
    np.bitwise_and(sign, np.uint16(0x8000), out=sign)
    np.bitwise_or(half, sign, out=half)
