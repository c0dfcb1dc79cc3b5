"""Elementary functions of exact mode beyond exp, log and erf, as fixed float64 sequences.

Each function takes and returns float64 arrays of the namespace `xp` and is built only from
`exact_arrays`' exp64, log64 and erf64 and correctly rounded single operations (+ − × ÷, compare,
select, floor, copysign), each its own call, so every backend computes the same bits. The
library's own tanh, expm1, log1p or power are never used: they differ between libraries and
machines. `map_arrays` is the frame of every element-wise exact kernel built on them: float64
copies in (exact for float16, bfloat16 and float32, subnormals included on a flushing backend),
one rounding into the output. docs/exact-mode.md states each definition and its accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import exp64, horner, log64
from onemodel.backends.ieee_float32 import store, widen

Array = Any

# expm1: below |x| = ln2/2 exp(x) − 1 would cancel, so the series x·Σ x^n/(n+1)! is used there
# (degree 13; the first term left out is < 3e-19 relative); beyond, exp64(x) − 1 loses at most
# a factor 2.5 of exp64's relative error.
_EXPM1_LIMIT = math.log(2) / 2
_EXPM1_TERMS = tuple(float(Fraction(1, math.factorial(n + 1))) for n in range(14))
# tanh(a) rounds to 1 in float64 from a ≈ 19.1 on; clamping there keeps expm1(2a) finite.
_TANH_LIMIT = 22.0
# erfc by its continued fraction, 60 levels from the bottom: within 2.2e-16 for y ≥ 2.12.
_ERFC_LEVELS = 60
_ONE_OVER_SQRT_PI = float.fromhex("0x1.20dd750429b6dp-1")  # 1/√π rounded to float64


def map_arrays(
    xp: Any, function: Callable[..., Array], inputs: Sequence[Array], out: Array
) -> None:
    """out = function(xp, *float64 copies of inputs), rounded once (inputs broadcast to out)."""
    with np.errstate(all="ignore"):
        store(xp, out, function(xp, *(widen(xp, x) for x in inputs)))


def expm1_64(xp: Any, x: Array) -> Array:
    """exp(x) − 1: x·Σ_{n≤13} x^n/(n+1)! by Horner's rule for |x| < ln2/2, else exp64(x) − 1.
    −0 stays −0, −inf gives −1."""
    near = xp.clip(x, -_EXPM1_LIMIT, _EXPM1_LIMIT)
    series = horner(xp, near, _EXPM1_TERMS)
    series *= near
    far = exp64(xp, x) - 1
    return xp.where(xp.absolute(x) < _EXPM1_LIMIT, series, far)


def log1p64(xp: Any, t: Array) -> Array:
    """log(1 + t) for t ≥ 0 without losing a small t: u = 1 + t; t where u = 1, else
    log64(u) · (t / (u − 1)) (u − 1 is exact; the quotient corrects u's rounding)."""
    u = t + 1
    return xp.where(u == 1, t, log64(xp, u) * (t / (u - 1)))


def tanh64(xp: Any, x: Array) -> Array:
    """tanh: a = min(|x|, 22), e = expm1_64(2a), e / (e + 2) with x's sign (−0 stays −0)."""
    a = xp.minimum(xp.absolute(x), _TANH_LIMIT)
    e = expm1_64(xp, a * 2)
    return xp.copysign(e / (e + 2), x)


def sigmoid64(xp: Any, x: Array) -> Array:
    """1 / (1 + exp64(−x)): exp64 overflowing to inf for very negative x gives 0."""
    return 1 / (exp64(xp, -x) + 1)


def softplus64(xp: Any, x: Array) -> Array:
    """log(1 + exp(x)) as max(x, 0) + log1p64(exp64(−|x|)): neither overflows."""
    return xp.maximum(x, 0.0) + log1p64(xp, exp64(xp, -xp.absolute(x)))


def erfc_far64(xp: Any, y: Array) -> Array:
    """erfc(y) for y ≥ 2.12 by its continued fraction exp(−y²)/√π · 1/(y + (1/2)/(y + (2/2)/
    (y + …))), 60 levels evaluated from the bottom (garbage below 2.12, where not selected)."""
    t = y
    for level in range(_ERFC_LEVELS, 0, -1):
        t = y + (level / 2) / t
    return exp64(xp, -(y * y)) * _ONE_OVER_SQRT_PI / t


def pow64(xp: Any, x: Array, y: Array) -> Array:
    """x^y as C's pow defines it: exp64(y · log64(|x|)), negated for a negative base (−0 too)
    and an odd integer y; NaN for a negative base and a non-integer y; 1 for y = 0, x = 1 and
    x = −1 with y = ±inf (even with a NaN operand)."""
    magnitude = exp64(xp, y * log64(xp, xp.absolute(x)))
    integer = xp.floor(y) == y
    odd = (y - xp.floor(y / 2) * 2) == 1
    result = xp.where(xp.signbit(x) & odd, -magnitude, magnitude)
    result = xp.where((x < 0) & ~integer, xp.nan, result)
    one = (y == 0) | (x == 1) | ((x == -1) & xp.isinf(y))
    return xp.where(one, 1.0, result)
