"""Casts compiled by numba (numpy_cpu/compiled.py). Between float32 and float16: the bit
operations of backends/casts.py, each rounded as there (so the same bits, NaN, ±0, ±inf and
subnormals included), run loop by loop over a block in cache instead of pass by pass over the
whole array. NumPy's own conversion is a scalar loop and casts.py's whole-array form 12 or 4
passes; numba has no float16 type and no bit cast of a scalar, so the values move between
their float and integer readings through two views of small block buffers. Float32 and
float64 to integers: casts.py's range check (every value truncates into the target's range,
else the reference rules decide) as one counting pass, then the truncating conversion, where
NumPy takes a minimum, a maximum and the conversion.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.numpy_cpu.compiled import jitted

# Elements a block buffer holds (in L1 across a block's loops).
_BLOCK = 512
# Below this many elements NumPy's own conversion (backends/casts.py) costs less than a call.
COMPILED_FROM = 1 << 12


def _to_float16(bits, half, magnitude, scale):
    """float32 (its bits) to float16 (its bits), casts.py's `_float32_to_float16` a block at a
    time: m = |x| clamped to [0, 2^16], c = 2^e of m clamped to [2^-14, 2^16], (m·2^-13 + c) -
    c rounded at float16's last place, times 2^-99, its bits shifted right by 13; NaN kept."""
    low, high, zero = np.float32(2.0**-14), np.float32(2.0**16), np.float32(0)
    shrink, down = np.float32(2.0**-13), np.float32(2.0**-99)
    m_bits, m_float = magnitude.view(np.uint32), magnitude
    c_bits, c_float = scale.view(np.uint32), scale
    size = magnitude.shape[0]
    for start in range(0, bits.shape[0], size):
        count = min(size, bits.shape[0] - start)
        part, result = bits[start : start + count], half[start : start + count]
        for i in range(count):
            m_bits[i] = part[i] & np.uint32(0x7FFFFFFF)
        for i in range(count):
            m = m_float[i]
            c_float[i] = m if m != m else min(max(m, low), high)
        for i in range(count):
            c_bits[i] = c_bits[i] & np.uint32(0x7F800000)
        for i in range(count):
            m = m_float[i]
            m = m if m != m else min(max(m, zero), high)
            c = c_float[i]
            m_float[i] = ((m * shrink + c) - c) * down
        for i in range(count):
            sign = (part[i] >> np.uint32(16)) & np.uint32(0x8000)
            result[i] = np.uint16((m_bits[i] >> np.uint32(13)) | sign)


def _to_float32(half, out):
    """float16 (its bits, as int16) to float32, casts.py's `_float16_to_float32`: the bits
    widened, shifted left by 13 and the sign's extension cleared make the value · 2^-112
    exactly, so a product by 2^112 is exact; an all-ones exponent (inf, NaN) sets float32's."""
    bits = out.view(np.int32)
    up = np.float32(2.0**112)
    for i in range(half.shape[0]):
        bits[i] = (np.int32(half[i]) << np.int32(13)) & np.int32(-0x70000001)
    for i in range(half.shape[0]):
        out[i] = out[i] * up
    for i in range(half.shape[0]):
        special = (np.int32(half[i]) & np.int32(0x7C00)) == np.int32(0x7C00)
        bits[i] = bits[i] | (np.int32(0x7F800000) if special else np.int32(0))


def _float_to_integer(x, out, low, high):
    """out = x truncated toward zero where every value of x is in [low, high) (NaN is not),
    and True; else False with nothing written. The check reads x first in full: out may be
    x's memory."""
    inside = 0
    for i in range(x.shape[0]):
        v = x[i]
        inside += (v >= low) & (v < high)
    if inside != x.shape[0]:
        return False
    for i in range(x.shape[0]):
        out[i] = x[i]
    return True


# The integer types a float converts to here.
_INTEGERS = frozenset(np.dtype(t) for t in "bBhHiIlLqQ")


def compiled_cast(x: Any, out: Any) -> bool:
    """out = x converted, for float32 to float16 or back, or float32/float64 to an integer
    type whose range holds every value, over C-contiguous host arrays of at least
    COMPILED_FROM elements; False, with nothing written, otherwise or without numba."""
    if x.size < COMPILED_FROM or not isinstance(x, np.ndarray):
        return False
    if not (x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    if x.dtype in (np.float32, np.float64) and out.dtype in _INTEGERS:
        kernel = jitted(_float_to_integer, contract=False)
        if kernel is None:
            return False
        info = np.iinfo(out.dtype)  # [min, max + 1) as casts.py checks: exact in either float
        low, high = x.dtype.type(info.min), x.dtype.type(float(info.max) + 1)
        return bool(kernel(x.reshape(-1), out.reshape(-1), low, high))
    if (x.dtype, out.dtype) not in ((np.float32, np.float16), (np.float16, np.float32)):
        return False
    if x.dtype == np.float32:
        kernel = jitted(_to_float16, contract=False)
        if kernel is None:
            return False
        buffers = np.empty(_BLOCK, np.float32), np.empty(_BLOCK, np.float32)
        kernel(x.reshape(-1).view(np.uint32), out.reshape(-1).view(np.uint16), *buffers)
        return True
    kernel = jitted(_to_float32, contract=False)
    if kernel is None:
        return False
    kernel(x.reshape(-1).view(np.int16), out.reshape(-1))
    return True
