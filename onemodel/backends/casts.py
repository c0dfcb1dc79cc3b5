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
    False (nothing written) when the reference rules must decide."""
    with quiet():  # overflow to infinity is the intended result
        return _fast_cast(xp, x, out)


def _fast_cast(xp: Any, x: Any, out: Any) -> bool:
    source, target = x.dtype, out.dtype
    if source not in _PLAIN or target not in _PLAIN:
        return False
    if target.kind == "b":
        xp.not_equal(x, source.type(0), out=out)  # NaN is true, -0.0 false
        return True
    if source.kind == "f" and target.kind in "iu":
        return _float_to_integer(xp, x, out)
    if source == np.float64 and target == np.float16:
        x = x.astype(xp.float32)  # the spec's double rounding, through float32
    xp.copyto(out, x, casting="unsafe")
    return True


def _float_to_integer(xp: Any, x: Any, out: Any) -> bool:
    """Truncation toward zero, where every value provably truncates into the target's range."""
    if xp is not np:
        return False
    if x.dtype == np.float16:
        x = x.astype(np.float32)  # NumPy's float16 reductions and casts are slow
    if x.size:
        info = np.iinfo(out.dtype)
        low, high = x.min(), x.max()  # a NaN makes both comparisons false
        if not (low >= float(info.min) and high < float(info.max + 1)):
            return False
    np.copyto(out, x, casting="unsafe")
    return True
