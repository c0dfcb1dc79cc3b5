"""The slow arbitrary-precision oracle of exact mode's matrix products (docs/exact-mode.md).

Each dot product is summed as a Python integer (every product of two float32 or narrower
values is an integer multiple of 2^-300) and the exact rational is rounded once, to nearest
with ties to even, into the output type, subnormals and overflow included; NaN and infinities
follow the IEEE rules of the product sum.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

_SCALE = 300  # every product of two float32 (or narrower) values is a multiple of 2^-300


def _round(total: int, dtype: Any) -> float:
    """total·2^-300, rounded to nearest (ties to even) into dtype, as a Python float."""
    if total == 0:
        return 0.0
    info = ml_dtypes.finfo(dtype)
    precision, lowest = info.nmant + 1, info.minexp + 1
    magnitude = Fraction(abs(total), 1 << _SCALE)
    exponent = abs(total).bit_length() - _SCALE  # 2^(exponent−1) ≤ magnitude < 2^exponent
    unit = Fraction(2) ** (max(exponent, lowest) - precision)
    rounded = round(magnitude / unit) * unit  # Fraction's round: ties to even
    value = math.inf if rounded > Fraction(float(info.max)) else float(rounded)
    return math.copysign(value, total)


def _scaled(value: float) -> int:
    numerator, denominator = value.as_integer_ratio()
    return numerator * ((1 << _SCALE) // denominator)


def oracle(a: np.ndarray, b: np.ndarray, dtype: Any) -> np.ndarray:
    """The exact product of 2-D a and b, rounded once per element into dtype."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.float64)
    for m in range(a.shape[0]):
        for n in range(b.shape[1]):
            row, col = a64[m], b64[:, n]
            with np.errstate(all="ignore"):
                products = row * col
            if np.isnan(products).any():  # a NaN operand or inf·0
                out[m, n] = np.nan
            elif np.isinf(products).any():
                signs = set(np.sign(products[np.isinf(products)]).tolist())
                out[m, n] = np.nan if len(signs) == 2 else math.inf * signs.pop()
            else:
                total = sum(
                    _scaled(x) * _scaled(y) >> _SCALE
                    for x, y in zip(row.tolist(), col.tolist(), strict=True)
                )
                out[m, n] = _round(total, dtype)
    return out.astype(dtype)


def batched_oracle(a: np.ndarray, b: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
    """oracle over the broadcast batch axes of a and b, as MatMul broadcasts them."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, (*batch, *a.shape[-2:]))
    b = np.broadcast_to(b, (*batch, *b.shape[-2:]))
    out = np.empty((*batch, a.shape[-2], b.shape[-1]), dtype=dtype)
    for index in np.ndindex(*batch):
        out[index] = oracle(a[index], b[index], dtype)
    return out


def adversarial_operands(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A small random case mixing what makes exact products hard: wide exponent ranges,
    cancelling twins with small perturbations, subnormals, zeros of both signs and, sometimes,
    infinities and NaNs."""
    m, k, n = (int(v) for v in rng.integers(1, 9, 3))
    k = int(rng.choice([k, 2 * k, 64]))
    spread = int(rng.choice([0, 8, 40, 120]))
    a = rng.standard_normal((m, k)) * 2.0 ** rng.integers(-spread, spread + 1, (m, k))
    b = rng.standard_normal((k, n)) * 2.0 ** rng.integers(-spread, spread + 1, (k, n))
    if rng.random() < 0.5 and k > 1:  # twins: every row cancels, up to perturbed columns
        half = k // 2
        a[:, half : 2 * half] = a[:, :half]
        b[half : 2 * half] = -b[:half] * (1 + rng.choice([0, 2**-23, 2**-12], (half, n)))
    if rng.random() < 0.3:
        a *= 2.0**-130  # subnormal operands and results
    a, b = a.astype(np.float32), b.astype(np.float32)
    for x in (a, b):
        if rng.random() < 0.3:
            x[tuple(rng.integers(0, s) for s in x.shape)] = -0.0
        if rng.random() < 0.15:
            x[tuple(rng.integers(0, s) for s in x.shape)] = rng.choice([np.inf, -np.inf, np.nan])
    return a, b
