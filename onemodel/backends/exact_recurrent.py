"""Exact mode's LSTM time loop with the default activations, shared by NumPy and CuPy.

The bits are those of the step-by-step formulas (graph/operators/recurrent.py: the product
h·Rᵀ by `float32_product`, the gates by `sigmoid_and_tanh64`, the cell's tanh by `tanh64`, the
cell equations in their order); only the number of array calls changes, which is what a step
of a few hundred elements costs:

- the product of a step is a `RowProduct` (prepared matrix, reused buffers, the enclosure
  test), its float32 result widened into the gates by the addition of X·Wᵀ + biases;
- the gates are kept in the order o, i, f, g with the sigmoid gates negated (R's columns and
  X·Wᵀ + biases are permuted and negated once; the product's rounding and the addition are
  symmetric, so the gates hold −x exactly), so exp's argument −x needs no call and
  [i, f]·[g, c] is one multiplication (c kept right after the candidate g);
- each exp-type polynomial runs once over one array of all its arguments (the gates' exp of
  −x and of 2a with the series of expm1 near 0; the cell's series and exp), with one
  coefficient row per element, as `horner_segments` does;
- every buffer is allocated once per layer and written with `out=`; constants are 0-d arrays;
- steps that provably do nothing are left out: the clamps to ±746 and to −ln2/2 of an
  argument 2·min(|x|, 22), which lies in [0, 44] or is NaN (which the clamps keep), and the
  absolute value of it.

A step is then 108 array calls (the step-by-step formulas take about 145 and their
temporaries). Where a product leaves elements open and its rows are not finite (an inf or
NaN state), `run` returns None and the caller runs the step-by-step formulas instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import EXP_LIMIT, EXP_TERMS, INV_LN2, LN2_HI, LN2_LO
from onemodel.backends.exact_elementary import EXPM1_LIMIT, EXPM1_TERMS, TANH_LIMIT
from onemodel.backends.exact_gemm import ExactOperand, RowMatrix, RowProduct
from onemodel.backends.ieee_float32 import narrow, store, widen

Array = Any

# ONNX's gate blocks i, o, f, c in the loop's order o, i, f, g, and their signs there.
_ORDER = (1, 0, 2, 3)
_SIGNS = (-1.0, -1.0, -1.0, 1.0)


class _Horner:
    """Σ c_n·t^n by Horner's rule over one [B, N] array, each element with its own terms (one
    coefficient row per degree): `horner`'s operations, element by element."""

    def __init__(self, xp: Any, parts: Sequence[tuple[int, Sequence[float]]], batch: int) -> None:
        table = np.concatenate([np.repeat(np.asarray(t)[:, None], n, axis=1) for n, t in parts], 1)
        self.rows = [xp.asarray(np.repeat(row[None], batch, axis=0)) for row in table]
        self.total = xp.empty((batch, table.shape[1]), dtype=xp.float64)

    def __call__(self, xp: Any, t: Array) -> Array:
        total, rows = self.total, self.rows
        xp.multiply(t, rows[-1], total)  # `horner` starts from the highest term: ·t, + next
        xp.add(total, rows[-2], total)
        for row in rows[-3::-1]:
            xp.multiply(total, t, total)
            xp.add(total, row, total)
        return total


def _reduce(
    xp: Any, a: Array, k: Array, k_int: Array, work: Array, r: Array, reduction: Sequence[Array]
) -> None:
    """exp64's reduction into buffers: k = rint(a/ln2) (also as integers), r = a − k·ln2_hi −
    k·ln2_lo, the same calls and order as `exact_arrays.exp_reduced`."""
    inv_ln2, ln2_hi, ln2_lo = reduction
    xp.multiply(a, inv_ln2, k)
    xp.rint(k, k)
    xp.multiply(k, ln2_hi, work)
    xp.subtract(a, work, r)
    xp.multiply(k, ln2_lo, work)
    xp.subtract(r, work, r)
    k_int[...] = k


def lstm_matrix(xp: Any, recurrence: ExactOperand) -> RowMatrix:
    """Rᵀ [H, 4H] (prepared, finite) with its gate blocks in the loop's order and signs, as
    `ExactLSTM` multiplies it (once per plan for a constant R)."""
    hidden = recurrence.finite.shape[1] // 4
    columns = xp.concatenate([xp.arange(k * hidden, (k + 1) * hidden) for k in _ORDER])
    signs = xp.asarray(np.repeat(_SIGNS, hidden))
    finite = recurrence.finite[:, columns] * signs  # exact
    return RowMatrix.of(xp, ExactOperand(finite, None, recurrence.squares[columns], -2))


class ExactLSTM:
    """One direction's exact LSTM steps for a batch size, from `lstm_matrix`'s Rᵀ; the
    buffers of one run."""

    def __init__(self, xp: Any, recurrence: RowMatrix, batch: int) -> None:
        self.xp = xp
        self.hidden = hidden = recurrence.matrix.shape[0]
        self.product = RowProduct(xp, recurrence, batch)
        h = hidden

        def buffer(width: int, dtype: Any = xp.float64) -> Array:
            return xp.empty((batch, width), dtype=dtype)

        # 0-d arrays: a Python float costs each call 0.5 µs more
        self.constants = [
            xp.asarray(v, dtype=xp.float64)
            for v in (-EXP_LIMIT, EXP_LIMIT, INV_LN2, LN2_HI, LN2_LO, TANH_LIMIT, EXPM1_LIMIT)
        ] + [xp.asarray(1.0, dtype=xp.float64), xp.asarray(2.0, dtype=xp.float64)]
        self.operand = buffer(h)
        self.gates = buffer(4 * h)  # −o, −i, −f, g
        self.arguments = buffer(4 * h)  # exp's: the clamped −(o, i, f), 2a of g
        self.reduced = buffer(5 * h)  # the polynomial's: r of those, min(2a, ln2/2)
        self.k = buffer(4 * h)
        self.k_int = buffer(4 * h, xp.int32)
        self.work = buffer(4 * h)
        self.sigmoids = buffer(3 * h)  # o, i, f
        self.candidate_cell = buffer(2 * h)  # g, c
        self.terms = buffer(2 * h)  # i·g, f·c
        self.mask = buffer(h, xp.bool_)
        self.gate_polynomial = _Horner(xp, ((4 * h, EXP_TERMS), (h, EXPM1_TERMS)), batch)
        self.twice = buffer(h)  # 2·min(|c|, 22)
        self.cell_reduced = buffer(2 * h)  # min(2a, ln2/2), r
        self.cell_k = buffer(h)
        self.cell_k_int = buffer(h, xp.int32)
        self.cell_work = buffer(h)
        self.cell_far = buffer(h)
        self.cell_polynomial = _Horner(xp, ((h, EXPM1_TERMS), (h, EXP_TERMS)), batch)
        self.state = buffer(h)

    def run(
        self, projected: Array, h: Array, c: Array, backward: bool, y: Array | None
    ) -> tuple[Array, Array] | None:
        """Every step over `projected` [T, B, 4H] (X·Wᵀ and the biases, float64, ONNX gate
        order) from the states h and c ([B, H] float64), writing each h rounded once into y
        [T, B, H] when given; the final (h, c), or None (see the module's docstring)."""
        xp, hh = self.xp, self.hidden
        inputs = projected.reshape(*projected.shape[:2], 4, hh)[:, :, _ORDER]
        inputs = inputs * xp.asarray(_SIGNS)[:, None]  # exact
        rows = list(inputs.reshape(projected.shape))
        steps = range(len(rows) - 1, -1, -1) if backward else range(len(rows))
        low, high, inv_ln2, ln2_hi, ln2_lo, tanh_limit, near_limit, one, two = self.constants
        reduction = inv_ln2, ln2_hi, ln2_lo
        gates, arguments, reduced, k, k_int, work = (
            self.gates, self.arguments, self.reduced, self.k, self.k_int, self.work
        )  # fmt: skip
        candidate_in, candidate_twice = gates[:, 3 * hh :], arguments[:, 3 * hh :]
        r_gates, near_gates = reduced[:, : 4 * hh], reduced[:, 4 * hh :]
        sigmoids, candidate_cell, terms, mask = (
            self.sigmoids, self.candidate_cell, self.terms, self.mask
        )  # fmt: skip
        o, i_f = sigmoids[:, :hh], sigmoids[:, hh:]
        candidate, cell = candidate_cell[:, :hh], candidate_cell[:, hh:]
        twice, cell_reduced = self.twice, self.cell_reduced
        near_cell, r_cell = cell_reduced[:, :hh], cell_reduced[:, hh:]
        cell_k, cell_k_int, cell_work, cell_far = (
            self.cell_k, self.cell_k_int, self.cell_work, self.cell_far
        )  # fmt: skip
        operand, state = self.operand, self.state
        cell[...] = c
        state[...] = h
        self._round(state, None)
        for t in steps:
            value = self.product(operand)
            if value is None:
                return None
            xp.add(rows[t], value if xp is np else widen(xp, value), gates)
            # sigmoid_and_tanh64: exp of −x (clamped to ±746) and of 2a = 2·min(|g|, 22)
            xp.maximum(gates, low, out=arguments)
            xp.absolute(candidate_in, candidate_twice)
            xp.minimum(candidate_twice, tanh_limit, out=candidate_twice)
            xp.multiply(candidate_twice, two, candidate_twice)
            xp.minimum(candidate_twice, near_limit, out=near_gates)
            xp.minimum(arguments, high, out=arguments)
            _reduce(xp, arguments, k, k_int, work, r_gates, reduction)
            total = self.gate_polynomial(xp, reduced)
            xp.ldexp(total[:, : 4 * hh], k_int, work)
            xp.add(work[:, : 3 * hh], one, sigmoids)
            xp.divide(one, sigmoids, sigmoids)
            series, far = total[:, 4 * hh :], work[:, 3 * hh :]
            xp.multiply(series, near_gates, series)
            xp.subtract(far, one, far)
            xp.less(candidate_twice, near_limit, mask)
            xp.copyto(far, series, where=mask)
            xp.add(far, two, candidate)
            xp.divide(far, candidate, candidate)
            xp.copysign(candidate, candidate_in, candidate)
            # c = f·c + i·g
            xp.multiply(i_f, candidate_cell, terms)
            xp.add(terms[:, hh:], terms[:, :hh], cell)
            # h = o·tanh64(c)
            xp.absolute(cell, twice)
            xp.minimum(twice, tanh_limit, out=twice)
            xp.multiply(twice, two, twice)
            xp.minimum(twice, near_limit, out=near_cell)
            _reduce(xp, twice, cell_k, cell_k_int, cell_work, r_cell, reduction)
            total = self.cell_polynomial(xp, cell_reduced)
            series = total[:, :hh]
            xp.multiply(series, near_cell, series)
            xp.ldexp(total[:, hh:], cell_k_int, cell_far)
            xp.subtract(cell_far, one, cell_far)
            xp.less(twice, near_limit, mask)
            xp.copyto(cell_far, series, where=mask)
            xp.add(cell_far, two, cell_work)
            xp.divide(cell_far, cell_work, cell_work)
            xp.copysign(cell_work, cell, cell_work)
            xp.multiply(o, cell_work, state)
            self._round(state, None if y is None else y[t])
        return state.copy(), cell.copy()

    def _round(self, state: Array, y: Array | None) -> None:
        """The product's rows: the state rounded to float32, in float64; y gets the state
        rounded once into its type."""
        xp = self.xp
        if xp is not np:  # through the bits: the library's conversion flushes subnormals
            self.operand[...] = widen(xp, narrow(xp, state))
            if y is not None:
                store(xp, y, state)
            return
        if y is not None and y.dtype == np.float32:
            np.copyto(y, state)
            np.copyto(self.operand, y)
            return
        self.operand[...] = state.astype(np.float32)
        if y is not None:
            store(xp, y, state)
