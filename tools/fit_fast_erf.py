"""Fit the rational erf of onemodel/backends/activations.py: erf(x) ≈ x·P(x²)/Q(x²) on
[0, 3.92] (beyond, float32's erf is 1), P of degree 6 and Q of degree 4 with Q(0) = 1.

Linearised least squares on the relative error (x·P - erf·Q = 0, weighted by 1/(erf·Q) of the
previous fit), then Lawson reweighting towards the minimax fit; prints the best coefficients
and their maximum relative error in exact (float64) arithmetic. Run: python tools/fit_fast_erf.py
"""

from __future__ import annotations

import math

import numpy as np

P_DEGREE, Q_DEGREE, LIMIT = 6, 4, 3.92


def fit() -> tuple[float, np.ndarray, np.ndarray]:
    x = np.concatenate([np.linspace(1e-4, LIMIT, 40000), np.geomspace(1e-6, 1e-4, 200)])
    f = np.array([math.erf(v) for v in x])
    s = x * x
    columns = [x * s**k for k in range(P_DEGREE + 1)]
    columns += [-f * s**k for k in range(1, Q_DEGREE + 1)]
    design = np.stack(columns, 1)
    weight, lawson, best = 1 / f, np.ones_like(x), None
    for iteration in range(60):
        root = np.sqrt(lawson) * weight
        coefficients, *_ = np.linalg.lstsq(design * root[:, None], f * root, rcond=None)
        p = coefficients[: P_DEGREE + 1]
        q = np.concatenate([[1.0], coefficients[P_DEGREE + 1 :]])
        denominator = np.polyval(q[::-1], s)
        error = np.abs(x * np.polyval(p[::-1], s) / denominator / f - 1)
        if best is None or error.max() < best[0]:
            best = (float(error.max()), p, q)
        weight = 1 / (f * denominator)
        if iteration > 5:
            lawson = lawson * (error / error.max()) ** 0.3 + 1e-12
            lawson /= lawson.mean()
    return best


if __name__ == "__main__":
    error, p, q = fit()
    print(f"max relative error {error:.3g}")
    print("P", tuple(float(c) for c in p))
    print("Q", tuple(float(c) for c in q))
