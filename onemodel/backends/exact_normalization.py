"""Normalizations of exact mode as fixed float64 sequences (the LayerNormalization recipe of
exact_arrays.layer_norm_arrays, shared by Instance-, Group-, RMS-, Skip-, Lp- and
MeanVariance-normalization and LRN).

Inputs are float64 arrays (widened exactly by the caller, which also rounds the results once);
every statistic is an ordered float64 sum (exact_arrays.ordered_sum) divided once by the count,
and every other step one correctly rounded float64 operation. docs/exact-mode.md states them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import ordered_sum
from onemodel.backends.exact_elementary import pow64

Array = Any


def _mean(xp: Any, values: Array, axes: Sequence[int]) -> Array:
    """The ordered float64 sum over `axes` divided once by the count, keeping them as 1."""
    count = math.prod(values.shape[a] for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(values.shape))
    return (ordered_sum(xp, values, axes) / count).reshape(kept)


def standardize64(
    xp: Any, values: Array, axes: Sequence[int], epsilon: float, centered: bool = True
) -> tuple[Array, Array | None, Array]:
    """(d · inv_std, mean, inv_std) over `axes`: mean = Σx / n, d = x − mean, var = Σ d·d / n,
    inv_std = 1 / sqrt(var + ε); uncentered (RMS): d = x, var = Σ x·x / n and no mean.
    `values` is overwritten with the result."""
    with np.errstate(all="ignore"):
        mean = None
        if centered:
            mean = _mean(xp, values, axes)
            values -= mean
        inv_std = 1 / xp.sqrt(_mean(xp, values * values, axes) + float(epsilon))
        values *= inv_std
    return values, mean, inv_std


def lp_normalize64(xp: Any, values: Array, axis: int, p: int) -> Array:
    """x / ‖x‖_p along `axis` (Σ|x| or sqrt(Σ x·x) in order), a zero norm dividing by 1."""
    with np.errstate(all="ignore"):
        magnitude = xp.absolute(values) if p == 1 else values * values
        norm = xp.expand_dims(ordered_sum(xp, magnitude, (axis,)), axis)
        if p == 2:
            norm = xp.sqrt(norm)
        return values / xp.where(norm == 0, 1.0, norm)


def mean_variance_normalize64(xp: Any, values: Array, axes: Sequence[int]) -> Array:
    """(x − mean) / (sqrt(Σ d·d / n) + 1e-9) over `axes`."""
    with np.errstate(all="ignore"):
        values -= _mean(xp, values, axes)
        spread = xp.sqrt(_mean(xp, values * values, axes))
        return values / (spread + 1e-9)


def lrn64(xp: Any, values: Array, size: int, alpha: float, beta: float, bias: float) -> Array:
    """x / (bias + (alpha / size) · Σ x²)^beta, the window's squares over channels
    c − ⌊(size−1)/2⌋ .. c + ⌈(size−1)/2⌉ that exist added in channel order from +0."""
    before, after = (size - 1) // 2, size // 2
    channels = values.shape[1]
    squares = values * values
    window = xp.zeros(values.shape, dtype=xp.float64)
    with np.errstate(all="ignore"):
        for offset in range(-before, after + 1):
            low, high = max(0, -offset), min(channels, channels - offset)
            if low < high:
                window[:, low:high] += squares[:, low + offset : high + offset]
        scale = window * (alpha / size) + bias
        return values / pow64(xp, scale, xp.full(scale.shape, beta, dtype=xp.float64))
