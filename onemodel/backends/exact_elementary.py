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
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

from onemodel.backends.exact_arrays import (
    EXP_TERMS,
    elementwise,
    exp64,
    exp_reduced,
    horner,
    horner_segments,
    log64,
)

Array = Any

# expm1: below |x| = ln2/2 exp(x) − 1 would cancel, so the series x·Σ x^n/(n+1)! is used there
# (degree 13; the first term left out is < 3e-19 relative); beyond, exp64(x) − 1 loses at most
# a factor 2.5 of exp64's relative error.
EXPM1_LIMIT = math.log(2) / 2
EXPM1_TERMS = tuple(float(Fraction(1, math.factorial(n + 1))) for n in range(14))
# tanh(a) rounds to 1 in float64 from a ≈ 19.1 on; clamping there keeps expm1(2a) finite.
TANH_LIMIT = 22.0
# erfc by its continued fraction, 60 levels from the bottom: within 2.2e-16 for y ≥ 2.12.
_ERFC_LEVELS = 60
_ONE_OVER_SQRT_PI = float.fromhex("0x1.20dd750429b6dp-1")  # 1/√π rounded to float64


def map_arrays(
    xp: Any, function: Callable[..., Array], inputs: Sequence[Array], out: Array
) -> None:
    """out = function(xp, *float64 copies of inputs), rounded once (inputs broadcast to out;
    `function` element-wise: exact_arrays.elementwise, in blocks on NumPy)."""
    elementwise(xp, function, inputs, out)


def expm1_64(xp: Any, x: Array) -> Array:
    """exp(x) − 1: x·Σ_{n≤13} x^n/(n+1)! by Horner's rule for |x| < ln2/2, else exp64(x) − 1.
    −0 stays −0, −inf gives −1."""
    near = xp.minimum(xp.maximum(x, -EXPM1_LIMIT), EXPM1_LIMIT)  # clip's values, cheaper
    r, k = exp_reduced(xp, x)  # exp64's steps; both polynomials in one evaluation
    series, far = horner_segments(xp, ((near, EXPM1_TERMS), (r, EXP_TERMS)))
    series *= near
    far = xp.ldexp(far, k) - 1
    return xp.where(xp.absolute(x) < EXPM1_LIMIT, series, far)


def log1p64(xp: Any, t: Array) -> Array:
    """log(1 + t) for t ≥ 0 without losing a small t: u = 1 + t; t where u = 1 or t = inf,
    else log64(u) · (t / (u − 1)) (u − 1 is exact; the quotient corrects u's rounding)."""
    u = t + 1
    return xp.where((u == 1) | (t == xp.inf), t, log64(xp, u) * (t / (u - 1)))


def tanh64(xp: Any, x: Array) -> Array:
    """tanh: a = min(|x|, 22), e = expm1_64(2a), e / (e + 2) with x's sign (−0 stays −0)."""
    a = xp.minimum(xp.absolute(x), TANH_LIMIT)
    e = expm1_64(xp, a * 2)
    return xp.copysign(e / (e + 2), x)


def sigmoid_and_tanh64(xp: Any, x: Array, split: int) -> tuple[Array, Array]:
    """sigmoid64(x[..., :split]) and tanh64(x[..., split:]), bit for bit, with their three
    polynomials (exp of −x; expm1's series and exp of 2a) in one `horner_segments` call: an
    LSTM step's gates, whose small arrays cost by the number of array calls."""
    s, t = x[..., :split], x[..., split:]
    twice = xp.minimum(xp.absolute(t), TANH_LIMIT) * 2  # tanh64's a·2, expm1_64's argument
    near = xp.minimum(twice, EXPM1_LIMIT)  # twice ≥ 0 (or NaN): clip's values
    r, k = exp_reduced(xp, xp.concatenate([-s, twice], axis=-1))
    exp_r, series = horner_segments(xp, ((r, EXP_TERMS), (near, EXPM1_TERMS)))
    powers = xp.ldexp(exp_r, k)
    sigmoid = 1 / (powers[..., :split] + 1)
    series *= near
    e = xp.where(xp.absolute(twice) < EXPM1_LIMIT, series, powers[..., split:] - 1)
    return sigmoid, xp.copysign(e / (e + 2), t)


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


# -- trigonometric and hyperbolic functions ------------------------------------------------


def _pi() -> Decimal:
    """π by Machin's formula 16·atan(1/5) − 4·atan(1/239): the series summed to 70 digits, the
    combination in Decimal's default 28-digit context, so π within 1e-27 (the π/2 pieces and
    the exact trigonometric functions' bits are defined by this value)."""
    context = Context(prec=70)
    negligible = Decimal(10) ** -75  # Decimal only reaches 0 at its exponent limit

    def atan_inverse(n: int) -> Decimal:
        total, power, k = Decimal(0), context.divide(1, n), 0
        while power > negligible:
            total += context.divide(power, 2 * k + 1) * (-1 if k % 2 else 1)
            power, k = context.divide(power, n * n), k + 1
        return total

    return 16 * atan_inverse(5) - 4 * atan_inverse(239)


PI = _pi()


def _split(value: Decimal, parts: int, bits: int) -> tuple[float, ...]:
    """value as `parts` float64s of `bits` significant bits each, the last the rest rounded."""
    pieces = []
    for _ in range(parts - 1):
        exponent = math.frexp(float(value))[1] - bits
        piece = math.ldexp(math.floor(math.ldexp(float(value), -exponent)), exponent)
        if Decimal(piece) > value:  # float(value) rounded up across a power of two
            piece = math.ldexp(math.floor(math.ldexp(float(value), -exponent)) - 1, exponent)
        pieces.append(piece)
        value -= Decimal(piece)
    return (*pieces, float(value))


# π/2 in four pieces, the first three of 28 bits, so that k·piece is exact for |k| < 2^25:
# the Cody–Waite reduction r = x − k·π/2 then loses nothing for |x| up to about 5·10^7.
_HALF_PI_PARTS = _split(PI / 2, 4, 28)
_TWO_OVER_PI = float(2 / PI)
_HALF_PI = float(PI / 2)
_SIXTH_PI = float(PI / 6)
_SQRT_THREE = float(Context(prec=60).sqrt(Decimal(3)))
_TAN_TWELFTH_PI = float(2 - Context(prec=60).sqrt(Decimal(3)))  # tan(π/12)
_LN2 = float(Context(prec=60).ln(Decimal(2)))
# sin r = r·Σ (−r²)^n/(2n+1)!, cos r = Σ (−r²)^n/(2n)! on |r| ≤ π/4 (+ slack): 11 terms leave
# less than 1e-22; atan t = t·Σ (−t²)^n/(2n+1) on |t| ≤ tan(π/12): 17 terms leave < 1e-19.
_SIN_TERMS = tuple(float(Fraction((-1) ** n, math.factorial(2 * n + 1))) for n in range(11))
_COS_TERMS = tuple(float(Fraction((-1) ** n, math.factorial(2 * n))) for n in range(12))
_ATAN_TERMS = tuple(float(Fraction((-1) ** n, 2 * n + 1)) for n in range(17))
# From here on asinh, acosh = log(2|x|) in float64 (the terms left out are below 2^-54).
_LARGE = 2.0**28


def sincos64(xp: Any, x: Array) -> tuple[Array, Array]:
    """(sin x, cos x): k = rint(x·2/π); r = x − k·π/2 by four exact-product pieces; sin r and
    cos r by their Taylor polynomials (Horner in r²); the quadrant k mod 4 picks and negates.
    ±inf and NaN give NaN; sin keeps −0."""
    k = xp.rint(x * _TWO_OVER_PI)
    r = x.copy()
    for piece in _HALF_PI_PARTS:
        r -= k * piece
    square = r * r
    sine = horner(xp, square, _SIN_TERMS)
    sine *= r
    cosine = horner(xp, square, _COS_TERMS)
    quadrant = k - xp.floor(k / 4) * 4
    swap = (quadrant == 1) | (quadrant == 3)
    s = xp.where(swap, cosine, sine)
    c = xp.where(swap, sine, cosine)
    s = xp.where(quadrant >= 2, -s, s)
    c = xp.where((quadrant == 1) | (quadrant == 2), -c, c)
    finite = xp.isfinite(x)
    return xp.where(x == 0, x, xp.where(finite, s, xp.nan)), xp.where(finite, c, xp.nan)


def atan64(xp: Any, x: Array) -> Array:
    """atan: a = |x|, above 1 as π/2 − atan(1/a); above tan(π/12) as π/6 + atan((a·√3 − 1) /
    (a + √3)); then t·Σ (−t²)^n/(2n+1) by Horner; x's sign (−0 kept)."""
    a = xp.absolute(x)
    inverted = a > 1
    a = xp.where(inverted, 1 / a, a)
    shifted = a > _TAN_TWELFTH_PI
    a = xp.where(shifted, (a * _SQRT_THREE - 1) / (a + _SQRT_THREE), a)
    result = horner(xp, a * a, _ATAN_TERMS)
    result *= a
    result = xp.where(shifted, result + _SIXTH_PI, result)
    result = xp.where(inverted, _HALF_PI - result, result)
    return xp.copysign(result, x)


def asin64(xp: Any, x: Array) -> Array:
    """atan64(x / sqrt((1 − x)·(1 + x))): ±π/2 at ±1, NaN beyond."""
    return atan64(xp, x / xp.sqrt((1 - x) * (x + 1)))


def acos64(xp: Any, x: Array) -> Array:
    """2 · atan64(sqrt((1 − x) / (1 + x))): π at −1, NaN beyond ±1."""
    return atan64(xp, xp.sqrt((1 - x) / (x + 1))) * 2


def sinh64(xp: Any, x: Array) -> Array:
    """(E + E/(E + 1)) / 2 with E = expm1_64(|x|), x's sign; inf where E overflows."""
    e = expm1_64(xp, xp.absolute(x))
    result = xp.where(xp.isinf(e), xp.inf, (e / (e + 1) + e) * 0.5)
    return xp.copysign(result, x)


def cosh64(xp: Any, x: Array) -> Array:
    """(e + 1/e) / 2 with e = exp64(|x|)."""
    e = exp64(xp, xp.absolute(x))
    return (1 / e + e) * 0.5


def asinh64(xp: Any, x: Array) -> Array:
    """log1p64(a + a²/(1 + sqrt(1 + a²))) for a = |x| < 2^28, else log64(a) + ln2; x's sign."""
    a = xp.absolute(x)
    small = xp.minimum(a, _LARGE)
    square = small * small
    near = log1p64(xp, square / (xp.sqrt(square + 1) + 1) + small)
    return xp.copysign(xp.where(a < _LARGE, near, log64(xp, a) + _LN2), x)


def acosh64(xp: Any, x: Array) -> Array:
    """log1p64(t + sqrt(2t + t²)) with t = x − 1 for x < 2^28, else log64(x) + ln2; NaN
    below 1."""
    t = xp.minimum(x, _LARGE) - 1
    near = log1p64(xp, xp.sqrt(t * 2 + t * t) + t)
    return xp.where(x < _LARGE, near, log64(xp, x) + _LN2)


def atanh64(xp: Any, x: Array) -> Array:
    """log1p64(2a / (1 − a)) / 2 for a = |x|, x's sign: ±inf at ±1, NaN beyond."""
    a = xp.absolute(x)
    return xp.copysign(log1p64(xp, (a * 2) / (1 - a)) * 0.5, x)


def sin64(xp: Any, x: Array) -> Array:
    return sincos64(xp, x)[0]


def cos64(xp: Any, x: Array) -> Array:
    return sincos64(xp, x)[1]


def tan64(xp: Any, x: Array) -> Array:
    """sin / cos of one reduction: one division."""
    sine, cosine = sincos64(xp, x)
    return sine / cosine
