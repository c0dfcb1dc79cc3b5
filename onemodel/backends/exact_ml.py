"""Exact mode's pieces of the ai.onnx.ml models, as fixed float64 sequences.

The post transforms (LOGISTIC, SOFTMAX, SOFTMAX_ZERO and PROBIT) of the linear models, the
tree ensembles and the support vector machines, and the order-free sum of a forest's leaf
weights. Each function takes and returns float64 arrays of the namespace `xp` and is built from
correctly rounded single operations and exact mode's exp64 and log64, so every backend computes
the same bits; docs/exact-mode.md states the definitions and their accuracy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import exp64, horner, log64, ordered_extremum, ordered_sum
from onemodel.backends.exact_gemm import odd_sum

Array = Any

# Wichura's algorithm AS241 (PPND16, Applied Statistics 37, 1988): the normal quantile by
# three rational functions of degree 7/7, about 1e-16 relative. Coefficients lowest first.
_CENTRAL_SPLIT, _TAIL_SPLIT = 0.425, 5.0
_CENTRAL_SHIFT, _NEAR_SHIFT, _FAR_SHIFT = 0.180625, 1.6, 5.0
_CENTRAL = (
    (3.3871328727963666080, 1.3314166789178437745e2, 1.9715909503065514427e3,
     1.3731693765509461125e4, 4.5921953931549871457e4, 6.7265770927008700853e4,
     3.3430575583588128105e4, 2.5090809287301226727e3),
    (1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3,
     2.1213794301586595867e4, 3.9307895800092710610e4, 2.8729085735721942674e4,
     5.2264952788528545610e3),
)  # fmt: skip
_NEAR = (
    (1.42343711074968357734, 4.63033784615654529590, 5.76949722146069140550,
     3.64784832476320460504, 1.27045825245236838258, 2.41780725177450611770e-1,
     2.27238449892691845833e-2, 7.74545014278341407640e-4),
    (1.0, 2.05319162663775882187, 1.67638483018380384940, 6.89767334985100004550e-1,
     1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4,
     1.05075007164441684324e-9),
)  # fmt: skip
_FAR = (
    (6.65790464350110377720, 5.46378491116411436990, 1.78482653991729133580,
     2.96560571828504891230e-1, 2.65321895265761230930e-2, 1.24266094738807843860e-3,
     2.71155556874348757815e-5, 2.01033439929228813265e-7),
    (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
     7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7,
     2.04426310338993978564e-15),
)  # fmt: skip
# Leaf weights odd_sum can add: finite multiples of 2^-1000 whose sums stay below 2^1000.
_SUMMABLE_LARGEST, _SUMMABLE_SMALLEST = 2.0**980, 2.0**-940


def logistic64(xp: Any, v: Array) -> Array:
    """1 / (1 + e^-v) that never overflows: e = exp64(−|v|); v < 0 ? e/(e + 1) : 1/(e + 1)."""
    e = exp64(xp, -xp.absolute(v))
    return xp.where(v < 0, e / (e + 1), 1 / (e + 1))


def softmax64(xp: Any, v: Array, zero_scores: bool = False) -> Array:
    """Softmax's exact recipe along the last axis: the max, exp64(v − max), the ordered sum;
    with `zero_scores` (SOFTMAX_ZERO) scores with |v| ≤ 1e-7 give 0 and are left out."""
    axis = v.ndim - 1
    e = exp64(xp, v - ordered_extremum(xp, v, (axis,), True)[..., None])
    if zero_scores:
        e = xp.where(xp.absolute(v) <= 1e-7, 0.0, e)
    return e / ordered_sum(xp, e, (axis,))[..., None]


def _rational(xp: Any, t: Array, terms: tuple[tuple[float, ...], tuple[float, ...]]) -> Array:
    numerator, denominator = terms
    return horner(xp, t, numerator) / horner(xp, t, denominator)


def probit64(xp: Any, p: Array) -> Array:
    """Φ⁻¹(p) = √2·erfinv(2p − 1), the normal quantile, by AS241: q = p − 0.5; for |q| ≤ 0.425
    q·A(0.180625 − q·q)/B(…); else r = sqrt(−log64(min(p, 1 − p))) and C(r − 1.6)/D(…) for
    r ≤ 5, E(r − 5)/F(…) beyond, negated for q < 0 (Horner's rule, one rounded multiply and
    add per step). 0 and 1 give −inf and inf; NaN and p outside [0, 1] give NaN."""
    with np.errstate(all="ignore"):
        q = p - 0.5
        central = q * _rational(xp, _CENTRAL_SHIFT - q * q, _CENTRAL)
        r = xp.sqrt(-log64(xp, xp.minimum(p, 1 - p)))  # 1 − p is exact for p ≥ 0.5
        near, far = _rational(xp, r - _NEAR_SHIFT, _NEAR), _rational(xp, r - _FAR_SHIFT, _FAR)
        tail = xp.where(r <= _TAIL_SPLIT, near, far)
        value = xp.where(xp.absolute(q) <= _CENTRAL_SPLIT, central, xp.where(q < 0, -tail, tail))
        value = xp.where(p == 0, -xp.inf, value)
        return xp.where(p == 1, xp.inf, value)


def summable(weights: np.ndarray) -> bool:
    """Whether `exact_sums` adds these weights (finite, 0 or 2^-940 ≤ |w| ≤ 2^980): every
    float32 value, and every float64 value but the subnormal-like and the huge."""
    size = np.abs(np.asarray(weights, dtype=np.float64))
    return bool(np.all((size == 0) | ((size >= _SUMMABLE_SMALLEST) & (size <= _SUMMABLE_LARGEST))))


def exact_sums(xp: Any, terms: Array) -> Array:
    """Σ terms along the last axis, the exact sum rounded to odd at 53 bits (float64), for
    `summable` terms: a value of the terms as a multiset, so the same whatever the order or
    the library (exact_gemm.odd_sum). Rounded once more to nearest into a type of at most 51
    bits (float32, float16) it is the exact sum correctly rounded there."""
    count = terms.shape[-1]
    if count == 0 or terms.size == 0:
        return xp.zeros(terms.shape[:-1], dtype=xp.float64)
    return odd_sum(xp, terms.reshape(-1, count)).reshape(terms.shape[:-1])


# Platt's probabilities are clamped into [1e-7, 1 − 1e-7]; the coupling stops where every
# |(Qp)_t − pᵀQp| < 0.005 / classes, or after max(100, classes) rounds (libsvm's rules).
_PAIR_CLAMP = 1e-7
_COUPLING_ROUNDS = 100


def coupled_probabilities(
    xp: Any, pairs: Array, prob_a: np.ndarray, prob_b: np.ndarray, classes: int,
    logistic: Any,
) -> Array:  # fmt: skip
    """libsvm's class probabilities of one-vs-one scores ([N, pairs] float64, pairs in (i, j)
    order, i < j): r_ij = 1 − logistic(s·A + B) clamped into [1e-7, 1 − 1e-7], r_ji = 1 − r_ij,
    then Wu, Lin and Weng's pairwise coupling (libsvm's multiclass_probability, as
    onnxruntime writes it) from p = 1/k, each row iterating until it meets the stopping rule.
    Every sum runs in index order from +0, each step one float64 operation: given an exact
    `logistic` (logistic64), a fixed sequence of correctly rounded operations."""
    with np.errstate(all="ignore"):
        rows = pairs.shape[0]
        value = pairs * xp.asarray(prob_a) + xp.asarray(prob_b)
        clamped = xp.minimum(xp.maximum(1 - logistic(xp, value), _PAIR_CLAMP), 1 - _PAIR_CLAMP)
        r = [[None] * classes for _ in range(classes)]
        index = 0
        for i in range(classes):
            for j in range(i + 1, classes):
                r[i][j], r[j][i] = clamped[:, index], 1 - clamped[:, index]
                index += 1
        q = [[None] * classes for _ in range(classes)]
        for t in range(classes):
            q[t][t] = xp.zeros(rows)
            for j in (*range(t), *range(t + 1, classes)):
                q[t][t] = q[t][t] + r[j][t] * r[j][t]
            for j in range(t + 1, classes):
                q[t][j] = q[j][t] = -(r[j][t] * r[t][j])
        p = [xp.full(rows, 1 / classes) for _ in range(classes)]
        active = xp.ones(rows, dtype=bool)
        for _ in range(max(_COUPLING_ROUNDS, classes)):
            qp = [_ordered_dot(xp, q[t], p) for t in range(classes)]
            pqp = _ordered_dot(xp, p, qp)
            error = xp.absolute(qp[0] - pqp)
            for t in range(1, classes):
                error = xp.maximum(error, xp.absolute(qp[t] - pqp))
            active = active & ~(error < 0.005 / classes)
            if not bool(active.any()):
                break
            for t in range(classes):
                diff = (pqp - qp[t]) / q[t][t]
                grown = 1 + diff
                moved = [p[j] + diff if j == t else p[j] for j in range(classes)]
                pqp_next = (pqp + diff * (diff * q[t][t] + qp[t] * 2)) / grown / grown
                qp = [xp.where(active, (qp[j] + diff * q[t][j]) / grown, qp[j])
                      for j in range(classes)]  # fmt: skip
                p = [xp.where(active, moved[j] / grown, p[j]) for j in range(classes)]
                pqp = xp.where(active, pqp_next, pqp)
        return xp.stack(p, axis=1)


def _ordered_dot(xp: Any, a: list, b: list) -> Array:
    total = xp.zeros(a[0].shape)
    for x, y in zip(a, b, strict=True):
        total = total + x * y
    return total
