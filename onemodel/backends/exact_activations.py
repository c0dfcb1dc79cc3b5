"""The activation functions of exact mode, each a fixed sequence of float64 operations.

Every function takes float64 arrays (made by `exact_elementary.map_arrays`, which also rounds
the result once into the output) and the operator's attributes as Python floats; it uses only
correctly rounded single operations, selections and the exact elementary functions, so every
backend gives the same bits. docs/exact-mode.md lists the definitions.
"""

from __future__ import annotations

from decimal import Context, Decimal
from typing import Any

from onemodel.backends.exact_arrays import erf64, exp64, ordered_extremum, ordered_sum
from onemodel.backends.exact_elementary import (
    PI,
    erfc_far64,
    expm1_64,
    sigmoid64,
    softplus64,
    tanh64,
)

Array = Any


_CONTEXT = Context(prec=60)
_SQRT_HALF = float(_CONTEXT.sqrt(Decimal(2)) / 2)
# Gelu's tanh form as x / (1 + exp(−2u)), u = √(2/π)·(x + 0.044715·x³): the factor 2·√(2/π).
_TWO_SQRT_TWO_OVER_PI = float(2 * _CONTEXT.sqrt(_CONTEXT.divide(2, PI)))
_GELU_CUBIC = 0.044715
# Below x = −3 (erfc's argument above 2.12) 1 + erf(x/√2) would cancel: erfc's continued
# fraction takes over.
_GELU_TAIL = -3.0


def sigmoid(xp: Any, x: Array) -> Array:
    return sigmoid64(xp, x)


def tanh(xp: Any, x: Array) -> Array:
    return tanh64(xp, x)


def softplus(xp: Any, x: Array) -> Array:
    return softplus64(xp, x)


def softsign(xp: Any, x: Array) -> Array:
    """x / (1 + |x|); ±1 for ±inf (where the quotient would be inf/inf)."""
    return xp.where(xp.isinf(x), xp.sign(x), x / (xp.absolute(x) + 1))


def mish(xp: Any, x: Array) -> Array:
    """x · tanh64(softplus64(x))."""
    return x * tanh64(xp, softplus64(xp, x))


def swish(xp: Any, x: Array, alpha: float) -> Array:
    """x · sigmoid64(alpha · x) (Swish, and com.microsoft's QuickGelu)."""
    return x * sigmoid64(xp, x * alpha)


def leaky_relu(xp: Any, x: Array, alpha: float) -> Array:
    """alpha · x below 0, else x."""
    return xp.where(x < 0, x * alpha, x)


def thresholded_relu(xp: Any, x: Array, alpha: float) -> Array:
    """x above alpha, else 0."""
    return xp.where(x > alpha, x, 0.0)


def elu(xp: Any, x: Array, alpha: float) -> Array:
    """alpha · expm1_64(x) below 0, else x."""
    return xp.where(x < 0, expm1_64(xp, x) * alpha, x)


def selu(xp: Any, x: Array, alpha: float, gamma: float) -> Array:
    """gamma · (alpha · expm1_64(x) for x ≤ 0, else x)."""
    return xp.where(x <= 0, expm1_64(xp, x) * alpha, x) * gamma


def celu(xp: Any, x: Array, alpha: float) -> Array:
    """max(x, 0) + min(alpha · expm1_64(x / alpha), 0)."""
    return xp.maximum(x, 0.0) + xp.minimum(expm1_64(xp, x / alpha) * alpha, 0.0)


def hard_sigmoid(xp: Any, x: Array, alpha: float, beta: float) -> Array:
    """min(max(alpha · x + beta, 0), 1) (NaN stays NaN)."""
    return xp.minimum(xp.maximum(x * alpha + beta, 0.0), 1.0)


def hard_swish(xp: Any, x: Array) -> Array:
    """x · min(max(x / 6 + 1/2, 0), 1); −inf gives −0 (where the product would be NaN)."""
    result = x * xp.minimum(xp.maximum(x / 6 + 0.5, 0.0), 1.0)
    return xp.where(x == -xp.inf, -0.0, result)


def shrink(xp: Any, x: Array, lambd: float, bias: float) -> Array:
    """x + bias below −lambd, x − bias above lambd, else 0."""
    shrunk = xp.where(x > lambd, x - bias, 0.0)
    return xp.where(x < -lambd, x + bias, shrunk)


def gelu(xp: Any, x: Array) -> Array:
    """x · Φ(x): Φ = (1 + erf64(x·√½)) / 2 from x = −3 on; below, erfc_far64(−x·√½) / 2,
    which keeps the tail's relative accuracy; −inf gives −0."""
    scaled = x * _SQRT_HALF
    near = erf64(xp, scaled) + 1
    far = erfc_far64(xp, xp.maximum(-scaled, 2.0))
    phi = xp.where(x < _GELU_TAIL, far, near) * 0.5
    return xp.where(x == -xp.inf, -0.0, x * phi)


def gelu_tanh(xp: Any, x: Array) -> Array:
    """Gelu's tanh form x/2 · (1 + tanh(u)) as x / (1 + exp64(−2u)), 2u = 2√(2/π) ·
    (((x · x) · x) · 0.044715 + x); −inf gives −0."""
    inner = x * x * x * _GELU_CUBIC + x
    result = x / (exp64(xp, inner * -_TWO_SQRT_TWO_OVER_PI) + 1)
    return xp.where(x == -xp.inf, -0.0, result)


def masked_softmax(xp: Any, scores: Array) -> Array:
    """Softmax over the last axis as Softmax's exact recipe (the exact max m, exp64(x − m), the
    ordered sum, one division), except that a row of −inf only gives zeros: m = −inf counts as
    0 and a zero sum as 1 (the attention operators' rule)."""
    last = scores.ndim - 1
    peak = ordered_extremum(xp, scores, (last,), True)
    peak = xp.where(peak == -xp.inf, 0.0, peak)
    powers = exp64(xp, scores - peak[..., None])
    total = ordered_sum(xp, powers, (last,))[..., None]
    return powers / xp.where(total == 0, 1.0, total)
