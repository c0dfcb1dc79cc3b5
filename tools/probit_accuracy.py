"""How far exact mode's PROBIT (exact_ml.probit64, AS241 in float64) is from the normal quantile.

Compares probit64 on float32 probabilities (uniform in (0, 1), log-uniform down to the float32
subnormals near 0, and 1 − 2^-k near 1) with √2·erfinv(2p − 1) in mpmath at 200 bits: prints
the largest error in float64 ulps and how many float32 roundings differ from the correctly
rounded quantile (docs/exact-mode.md, "PROBIT"). Needs mpmath (a dependency of torch/sympy).
Run from the repository root:

    PYTHONPATH=$PWD python tools/probit_accuracy.py [--samples 20000]
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np

from onemodel.backends.exact_ml import probit64


def samples(count: int, rng: np.random.Generator) -> np.ndarray:
    third = count // 3
    near_zero = np.float32(10.0) ** rng.uniform(-45.5, 0, third).astype(np.float32)
    near_one = 1 - np.float32(2.0) ** -rng.uniform(1, 24, third).astype(np.float32)
    uniform = rng.uniform(0, 1, count - 2 * third).astype(np.float32)
    p = np.concatenate([near_zero, near_one, uniform]).astype(np.float32)
    return np.unique(p[(p > 0) & (p < 1)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20000)
    count = parser.parse_args().samples
    mpmath.mp.prec = 200
    p = samples(count, np.random.default_rng(2026))
    got = probit64(np, p.astype(np.float64))
    worst, differ = 0.0, 0
    for value, mine in zip(p.tolist(), got.tolist(), strict=True):
        true = mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(value) - 1)
        worst = max(worst, float(abs(mpmath.mpf(mine) - true) / np.spacing(abs(float(true)))))
        # the correctly rounded float32: via float64 rounded to odd would be exact; at 200 bits
        # a float64 rounding first only errs where the quantile is within 2^-53 of a midpoint
        differ += np.float32(mine) != np.float32(float(true))
    print(f"{len(p)} float32 probabilities: at most {worst:.2f} float64 ulps from the quantile;")
    print(f"rounded to float32, {differ} differ from the correctly rounded quantile")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
