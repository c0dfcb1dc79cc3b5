"""Fit fast mode's float32 erf (onemodel/backends/activations.py): erf(x) ≈ tanh(x·P(x²)) on
[0, 3.92] (beyond, float32's erf is 1), P of degree 6.

tanh is NumPy's cheapest float32 transcendental, so the form costs a tanh and 14 passes. The
fit is least squares on atanh(erf(x)) weighted by (1 - erf²)/erf (what an error in the tanh's
argument does to erf's relative error), then Lawson reweighting towards the minimax fit;
prints the best coefficients, their maximum relative error in exact (float64) arithmetic, the
smallest x·P(x²) beyond 3.92 (it must stay above 9, where tanh rounds to 1) and the error of
the float32 evaluation in ulps against math.erf. Run: python tools/fit_fast_erf.py
"""

from __future__ import annotations

import math

import numpy as np

DEGREE, LIMIT = 6, 3.92


def fit() -> tuple[float, np.ndarray]:
    x = np.concatenate([np.linspace(1e-4, LIMIT, 40000), np.geomspace(1e-7, 1e-4, 300)])
    f = np.array([math.erf(v) for v in x])
    argument = 0.5 * np.log((1 + f) / np.array([math.erfc(v) for v in x]))  # atanh(erf)
    design = np.stack([x * (x * x) ** k for k in range(DEGREE + 1)], 1)
    weight, lawson, best = (1 - f * f) / f, np.ones_like(x), None
    for _ in range(300):
        root = np.sqrt(lawson) * weight
        coefficients, *_ = np.linalg.lstsq(design * root[:, None], argument * root, rcond=None)
        error = np.abs(np.tanh(design @ coefficients) / f - 1)
        if best is None or error.max() < best[0]:
            best = (float(error.max()), coefficients)
        lawson = lawson * (error / error.max()) ** 0.3 + 1e-14
        lawson /= lawson.mean()
    return best


def float32_ulps(coefficients: np.ndarray) -> float:
    """The largest error of the float32 evaluation (Horner's rule, then NumPy's tanh)."""
    x = np.arange(-8.0, 8.0, 2.0**-12).astype(np.float32)
    c = coefficients.astype(np.float32)
    s = x * x
    p = s * c[-1] + c[-2]
    for k in range(DEGREE - 2, -1, -1):
        p = p * s + c[k]
    got = np.tanh(p * x).astype(np.float64)
    truth = np.array([math.erf(v) for v in x.astype(np.float64)])
    return float((np.abs(got - truth) / np.spacing(np.abs(truth).astype(np.float32))).max())


if __name__ == "__main__":
    error, p = fit()
    beyond = np.linspace(LIMIT, 40.0, 10000)
    print(f"max relative error {error:.3g} ({error / 2.0**-24:.2f}·2^-24)")
    print("P", tuple(float(c) for c in p))
    print(f"smallest x·P(x²) beyond {LIMIT}: {(beyond * np.polyval(p[::-1], beyond**2)).min():.3f}")
    print(f"float32 evaluation: within {float32_ulps(p):.2f} ulps")
