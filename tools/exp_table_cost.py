"""Would another exp64 or tanh64 make exact LSTM steps cheaper on NumPy? Times one step's two
activation groups (`exact_recurrent.activations`: LSTM's gates, then tanh of the cell) against
the same groups by two alternatives, side by side (process time, min and median).

    OPENBLAS_NUM_THREADS=1 python tools/exp_table_cost.py [hidden]

The alternative (timing only: its table and constants are stand-ins, its bits are not a
definition): k = rint(x·64/ln2), j = k & 63, m = k >> 6, r = x − k·ln2/64 in two parts, p =
r·Q(r) with Q of 6 terms (|r| ≤ ln2/128), exp = ldexp(T_j + T_j·p, m) from a 64-entry table
T_j = 2^(j/64) (`take`); a tanh's expm1(2a) from the same reduction, D_j + T_j·p with
D_j = 2^(j/64) − 1 where m = 0 (no cancellation), exp − 1 elsewhere. That is one exponential
per element (the present groups take two for each tanh: exp of 2a and expm1's series) and a
Horner of 12 calls instead of 26 (41 calls for the gates' group instead of 49, 37 for the
cell's instead of 45), but two of them table lookups (`take`, about 1.2 µs each against
0.35 µs for a ufunc) and four more besides.

The one-exponential tanh (`one_exponential_group`, the present exp64 and series): each tanh's
expm1(2a) = 2^k·expm1(r) + (2^k − 1) from the one reduction of 2a (the series of degree 13 over
|r| ≤ ln2/2, as now where k = 0), so the groups' Horner runs over 1024 and 256 elements
instead of 1280 and 512, in as many calls (no mask and `putmask`, two more for 2^k − 1).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from onemodel.backends.exact_arrays import EXP_LIMIT, EXP_TERMS, INV_LN2, LN2_HI, LN2_LO
from onemodel.backends.exact_elementary import EXPM1_TERMS, TANH_LIMIT
from onemodel.backends.exact_recurrent import _horner, activations

_TERMS = 6


def table_group(x: np.ndarray, sigmoid: np.ndarray, tanh: np.ndarray) -> Callable[[], None]:
    """The alternative group over `x` (sigmoids' −x first, then the tanhs' x), as
    `activations` is called; returns its evaluation."""
    batch, width = x.shape
    sigmoids = width - tanh.shape[1]
    table = np.exp2(np.arange(64) / 64)
    minus_one = table - 1.0
    low, high, inv, hi, lo, limit, one, two = (
        np.asarray(v) for v in (-746.0, 746.0, 64 / np.log(2), 0.0108, 1e-12, 22.0, 1.0, 2.0)
    )
    mask_bits, shift, zero = (np.asarray(v, dtype=np.int32) for v in (63, 6, 0))
    rows = [np.full((batch, width), 1.0 / (n + 1)) for n in range(_TERMS)]
    arguments, k, r, work, entry, q, e = (np.empty((batch, width)) for _ in range(7))
    k_int, j, m = (np.empty((batch, width), dtype=np.int32) for _ in range(3))
    near = np.empty((batch, width - sigmoids))
    mask = np.empty(near.shape, dtype=bool)
    x_sigmoid, x_tanh = x[:, :sigmoids], x[:, sigmoids:]
    clamped, twice = arguments[:, :sigmoids], arguments[:, sigmoids:]

    def evaluate() -> None:
        np.maximum(x_sigmoid, low, out=clamped)
        np.minimum(clamped, high, out=clamped)
        np.absolute(x_tanh, twice)
        np.minimum(twice, limit, out=twice)
        np.multiply(twice, two, twice)
        np.multiply(arguments, inv, k)
        np.rint(k, k)
        np.multiply(k, hi, work)
        np.subtract(arguments, work, r)
        np.multiply(k, lo, work)
        np.subtract(r, work, r)
        k_int[...] = k
        np.bitwise_and(k_int, mask_bits, j)
        np.right_shift(k_int, shift, m)
        table.take(j, out=entry, mode="clip")
        np.multiply(r, rows[-1], q)
        np.add(q, rows[-2], q)
        for row in rows[-3::-1]:
            np.multiply(q, r, q)
            np.add(q, row, q)
        np.multiply(q, r, q)  # p
        np.multiply(entry, q, q)  # T·p
        np.add(entry, q, e)
        np.ldexp(e, m, e)
        if sigmoids:
            np.add(e[:, :sigmoids], one, sigmoid)
            np.divide(one, sigmoid, sigmoid)
        if tanh.shape[1]:
            far = e[:, sigmoids:]
            minus_one.take(j[:, sigmoids:], out=near, mode="clip")
            np.add(near, q[:, sigmoids:], near)
            np.subtract(far, one, far)
            np.equal(m[:, sigmoids:], zero, mask)
            np.putmask(far, mask, near)
            np.add(far, two, tanh)
            np.divide(far, tanh, tanh)
            np.copysign(tanh, x_tanh, tanh)

    return evaluate


def one_exponential_group(
    x: np.ndarray, sigmoid: np.ndarray, tanh: np.ndarray
) -> Callable[[], None]:
    """The one-exponential alternative over `x`, as `activations` is called."""
    batch, width = x.shape
    sigmoids, tanhs = width - tanh.shape[1], tanh.shape[1]
    low, high, inv, hi, lo, limit, one, two = (
        np.asarray(v)
        for v in (-EXP_LIMIT, EXP_LIMIT, INV_LN2, LN2_HI, LN2_LO, TANH_LIMIT, 1.0, 2.0)
    )
    arguments, k, r, work = (np.empty((batch, width)) for _ in range(4))
    k_int = np.empty((batch, width), dtype=np.int32)
    power = np.empty((batch, tanhs))
    polynomial, total = _horner(np, ((sigmoids, EXP_TERMS), (tanhs, EXPM1_TERMS)), r)
    x_sigmoid, x_tanh = x[:, :sigmoids], x[:, sigmoids:]
    clamped, twice = arguments[:, :sigmoids], arguments[:, sigmoids:]
    series, expm1 = total[:, sigmoids:], work[:, sigmoids:]
    r_tanh, k_tanh, exp_sigmoid = r[:, sigmoids:], k_int[:, sigmoids:], work[:, :sigmoids]

    def evaluate() -> None:
        if sigmoids:
            np.maximum(x_sigmoid, low, out=clamped)
            np.minimum(clamped, high, out=clamped)
        if tanhs:
            np.absolute(x_tanh, twice)
            np.minimum(twice, limit, out=twice)
            np.multiply(twice, two, twice)
        np.multiply(arguments, inv, k)
        np.rint(k, k)
        np.multiply(k, hi, work)
        np.subtract(arguments, work, r)
        np.multiply(k, lo, work)
        np.subtract(r, work, r)
        k_int[...] = k
        polynomial()
        if tanhs:
            np.multiply(series, r_tanh, series)  # expm1(r)
        np.ldexp(total, k_int, work)
        if sigmoids:
            np.add(exp_sigmoid, one, sigmoid)
            np.divide(one, sigmoid, sigmoid)
        if tanhs:
            np.ldexp(one, k_tanh, power)
            np.subtract(power, one, power)
            np.add(expm1, power, expm1)
            np.add(expm1, two, tanh)
            np.divide(expm1, tanh, tanh)
            np.copysign(tanh, x_tanh, tanh)

    return evaluate


def _times(run: Callable[[], None], calls: int = 2000, repeats: int = 7) -> tuple[float, float]:
    run()
    per_call = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            run()
        per_call.append((time.process_time() - start) / calls * 1e6)
    return round(min(per_call), 2), round(statistics.median(per_call), 2)


def main() -> None:
    hidden = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    gates = np.random.default_rng(0).standard_normal((1, 4 * hidden))
    sigmoids, candidate_cell, cell_tanh = (np.empty((1, n * hidden)) for n in (3, 2, 1))
    cell = candidate_cell[:, hidden:]
    cell[...] = gates[:, :hidden]
    groups = {
        "gates": (gates, sigmoids, candidate_cell[:, :hidden]),
        "cell": (cell, sigmoids[:, :0], cell_tanh),
    }
    for name, arrays in groups.items():
        present, table = _times(activations(np, *arrays)), _times(table_group(*arrays))
        single = _times(one_exponential_group(*arrays))
        print(
            f"{name}: present {present} µs, table-driven {table} µs, "
            f"one exponential per tanh {single} µs (min, median)"
        )


if __name__ == "__main__":
    main()
