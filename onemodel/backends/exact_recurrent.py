"""Exact mode's time loops of RNN, GRU and LSTM with the default activations, shared by NumPy
and CuPy.

The bits are those of the step-by-step formulas (graph/operators/recurrent.py: the products
h·Rᵀ (and GRU's (r·h)·R_hᵀ) by `float32_product`, sigmoid by `sigmoid64`, tanh by `tanh64`, the
cell equations in their order); only the number of array calls changes, which is what a step
of a few hundred elements costs:

- the product of a step is a `RowProduct` (matrix prepared once per plan, reused buffers, the
  enclosure test), its float32 result widened by one copy and added to X·Wᵀ + biases;
- the sigmoid gates are negated (R's columns and X·Wᵀ + biases negated once; the product's
  rounding and the addition are symmetric, so the gates hold −x exactly), so exp's argument −x
  needs no call; LSTM's gate blocks are kept in the order o, i, f, g, so [i, f]·[g, c] is one
  multiplication (c kept right after the candidate g);
- each group of activations that a step can evaluate at once (`activations`: LSTM's gates, a
  GRU's z and r, a tanh) runs one range reduction and one Horner evaluation over all its
  exponentials (the sigmoids' exp of −x, the tanhs' exp of 2a and expm1's series near 0), with
  one coefficient row per element, as `horner_segments` does;
- every buffer is allocated once per run and written with `out=`; constants are 0-d arrays;
  the coefficient rows are made once per shape; a group's names are closure locals (an
  attribute lookup costs a tenth of a call) and its masked copy is `putmask` (`copyto`'s
  where= costs 2 to 4 times more);
- steps that provably do nothing are left out: the clamps to ±746 and to −ln2/2 of a tanh's
  argument 2·min(|x|, 22), which lies in [0, 44] or is NaN (which the clamps keep), and the
  absolute value of it.

An LSTM step is then 109 array calls (the product and its test 8, its widening and the
gates' addition 2, the gates' sigmoids and tanh 49, the cell 2, its tanh 45, h 1, the rounding
2; the step-by-step formulas take about 145 and their temporaries), a GRU step 101 with
linear_before_reset (111 without: a second product), an RNN step 57. Where a product leaves
elements open and its rows are not finite (an inf or NaN state), `run` returns None and the
caller runs the step-by-step formulas instead.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import EXP_LIMIT, EXP_TERMS, INV_LN2, LN2_HI, LN2_LO
from onemodel.backends.exact_elementary import EXPM1_LIMIT, EXPM1_TERMS, TANH_LIMIT
from onemodel.backends.exact_gemm import ExactOperand, RowMatrix, RowProduct
from onemodel.backends.ieee_float32 import narrow, store, widen

Array = Any

# (ONNX gate block, sign) in each loop's order: the sigmoid gates negated.
LSTM_BLOCKS = ((1, -1.0), (0, -1.0), (2, -1.0), (3, 1.0))  # o, i, f, g
GRU_BLOCKS = ((0, -1.0), (1, -1.0), (2, 1.0))  # z, r, h
RNN_BLOCKS = ((0, 1.0),)


def loop_matrix(
    xp: Any, recurrence: ExactOperand, blocks: Sequence[tuple[int, float]]
) -> RowMatrix:
    """Rᵀ [H, gates·H] (prepared, finite) as a loop multiplies it: the given gate blocks of H
    columns in that order, each times its sign (exact; once per plan for a constant R)."""
    hidden = recurrence.finite.shape[0]
    columns = xp.concatenate([xp.arange(b * hidden, (b + 1) * hidden) for b, _ in blocks])
    signs = xp.asarray(np.repeat([s for _, s in blocks], hidden))
    finite = recurrence.finite[:, columns] * signs
    return RowMatrix.of(xp, ExactOperand(finite, None, recurrence.squares[columns], -2))


@functools.lru_cache(maxsize=64)
def _coefficient_rows(
    parts: tuple[tuple[int, tuple[float, ...]], ...], batch: int
) -> tuple[np.ndarray, ...]:
    """One [batch, N] row per degree: each element's own term (read-only, shared by runs)."""
    table = np.concatenate([np.repeat(np.asarray(t)[:, None], n, axis=1) for n, t in parts], 1)
    rows = tuple(np.repeat(row[None], batch, axis=0) for row in table)
    for row in rows:
        row.flags.writeable = False
    return rows


def _horner(xp: Any, parts: Sequence[tuple[int, Sequence[float]]], t: Array) -> Any:
    """Σ c_n·t^n by Horner's rule over one [B, N] buffer `t`, each element with its own terms
    (one coefficient row per degree): `horner`'s operations, element by element. Returns the
    evaluation (a function of no arguments) and the buffer it writes."""
    key = tuple((n, tuple(terms)) for n, terms in parts)
    rows = [xp.asarray(row) for row in _coefficient_rows(key, t.shape[0])]
    top, second, rest = rows[-1], rows[-2], rows[-3::-1]
    total = xp.empty(t.shape, dtype=xp.float64)
    multiply, add = xp.multiply, xp.add

    def evaluate() -> None:
        multiply(t, top, total)  # `horner` starts from the highest term: ·t, + next
        add(total, second, total)
        for row in rest:
            multiply(total, t, total)
            add(total, row, total)

    return evaluate, total


def _scalars(xp: Any) -> tuple[Array, ...]:
    """The loops' scalars as 0-d float64 arrays (a Python float costs each call 0.5 µs more):
    −746, 746, 1/ln2, ln2_hi, ln2_lo, 22, ln2/2, 1 and 2."""
    values = (-EXP_LIMIT, EXP_LIMIT, INV_LN2, LN2_HI, LN2_LO, TANH_LIMIT, EXPM1_LIMIT, 1.0, 2.0)
    return tuple(xp.asarray(value, dtype=xp.float64) for value in values)


def activations(xp: Any, x: Array, sigmoid: Array, tanh: Array) -> Any:
    """sigmoid64 of the first columns of `x` (given negated: −x, exp's argument) into `sigmoid`
    and tanh64 of its last `tanh.shape[1]` columns into `tanh`, every exponential of both in
    one range reduction and one Horner evaluation: exp of −x (clamped to ±746), exp of 2a =
    2·min(|x|, 22) and expm1's series of min(2a, ln2/2), whose result is taken where 2a < ln2/2
    (`sigmoid_and_tanh64`'s operations). Returns the evaluation, a function of no arguments
    over buffers fixed for the run: its names are local variables, as a step's cost is in its
    calls (an attribute lookup costs as much as a tenth of one)."""
    batch, width = x.shape
    tanhs = tanh.shape[1]
    sigmoids = width - tanhs
    low, high, inv_ln2, ln2_hi, ln2_lo, tanh_limit, near_limit, one, two = _scalars(xp)
    x_sigmoid, x_tanh = x[:, :sigmoids], x[:, sigmoids:]
    arguments = xp.empty((batch, width), dtype=xp.float64)  # clamped −x, then 2a
    reduced = xp.empty((batch, width + tanhs), dtype=xp.float64)  # their r, min(2a, ln2/2)
    k = xp.empty((batch, width), dtype=xp.float64)
    k_int = xp.empty((batch, width), dtype=xp.int32)
    work = xp.empty((batch, width), dtype=xp.float64)
    mask = xp.empty((batch, tanhs), dtype=xp.bool_)
    polynomial, total = _horner(xp, ((width, EXP_TERMS), (tanhs, EXPM1_TERMS)), reduced)
    arguments_sigmoid, twice = arguments[:, :sigmoids], arguments[:, sigmoids:]
    r, near = reduced[:, :width], reduced[:, width:]
    exp_sigmoid, far = work[:, :sigmoids], work[:, sigmoids:]
    exp_part, series = total[:, :width], total[:, width:]
    maximum, minimum, absolute, multiply, subtract = (
        xp.maximum, xp.minimum, xp.absolute, xp.multiply, xp.subtract
    )  # fmt: skip
    rint, ldexp, add, divide, less, putmask, copysign = (
        xp.rint, xp.ldexp, xp.add, xp.divide, xp.less, xp.putmask, xp.copysign
    )  # fmt: skip

    def evaluate() -> None:
        if sigmoids:
            maximum(x_sigmoid, low, out=arguments_sigmoid)
            minimum(arguments_sigmoid, high, out=arguments_sigmoid)
        if tanhs:
            absolute(x_tanh, twice)
            minimum(twice, tanh_limit, out=twice)
            multiply(twice, two, twice)
            minimum(twice, near_limit, out=near)
        # exp64's reduction (`exact_arrays.exp_reduced`'s calls and order)
        multiply(arguments, inv_ln2, k)
        rint(k, k)
        multiply(k, ln2_hi, work)
        subtract(arguments, work, r)
        multiply(k, ln2_lo, work)
        subtract(r, work, r)
        k_int[...] = k
        polynomial()
        ldexp(exp_part, k_int, work)
        if sigmoids:
            add(exp_sigmoid, one, sigmoid)
            divide(one, sigmoid, sigmoid)
        if tanhs:
            multiply(series, near, series)
            subtract(far, one, far)
            less(twice, near_limit, mask)
            putmask(far, mask, series)  # copyto(where=)'s values, cheaper
            add(far, two, tanh)
            divide(far, tanh, tanh)
            copysign(tanh, x_tanh, tanh)

    return evaluate


class _Loop:
    """What the three loops share: the state h [B, H] (float64, carried unrounded), the
    products' rows (h rounded to float32), the steps' order and the rounding of each h into
    Y. A loop sets `blocks` (its gate order and signs) and `step`, one time step from its
    row of X·Wᵀ + biases, False where a product leaves it to the step-by-step formulas."""

    blocks: Sequence[tuple[int, float]]

    def __init__(self, xp: Any, hidden: int, batch: int) -> None:
        self.xp, self.hidden, self.batch = xp, hidden, batch
        self.state = self.buffer(hidden)
        self.operand = self.buffer(hidden)

    def buffer(self, width: int) -> Array:
        return self.xp.empty((self.batch, width), dtype=self.xp.float64)

    def start(self, states: Sequence[Array]) -> None:
        """Takes the initial states (h first)."""
        self.state[...] = states[0]

    def finals(self) -> tuple[Array, ...]:
        return (self.state.copy(),)

    def step(self, row: Array) -> bool:
        raise NotImplementedError

    def product_into(self, product: RowProduct, rows: Array, target: Array) -> bool:
        """target = the float32 product of `rows`, widened (a float32 operand makes an
        addition 1.5 times dearer than the widening and a float64 addition); False where the
        product leaves its elements to the step-by-step formulas."""
        value = product(rows)
        if value is None:
            return False
        if self.xp is np:
            np.copyto(target, value)
        else:
            target[...] = widen(self.xp, value)
        return True

    def run(
        self, projected: Array, states: Sequence[Array], backward: bool, y: Array | None
    ) -> tuple[Array, ...] | None:
        """Every step over `projected` [T, B, gates·H] (X·Wᵀ and the biases, float64, ONNX
        gate order) from the initial states ([B, H] float64), writing each h rounded once into
        y [T, B, H] when given; the final states, or None (see the module's docstring)."""
        xp = self.xp
        if any(block != i or sign != 1.0 for i, (block, sign) in enumerate(self.blocks)):
            given = projected.reshape(*projected.shape[:2], -1, self.hidden)
            projected = xp.empty(projected.shape, dtype=projected.dtype)
            ordered = projected.reshape(given.shape)
            for index, (block, sign) in enumerate(self.blocks):  # the loop's order and signs
                xp.multiply(given[:, :, block], sign, out=ordered[:, :, index])  # exact
        rows = list(projected)
        self.start(states)
        self.round_state(None)
        for t in range(len(rows) - 1, -1, -1) if backward else range(len(rows)):
            if not self.step(rows[t]):
                return None
            self.round_state(None if y is None else y[t])
        return self.finals()

    def round_state(self, y: Array | None) -> None:
        """The products' rows: the state rounded to float32, in float64; y gets the state
        rounded once into its type."""
        xp, state = self.xp, self.state
        if y is not None and y.dtype == np.float32 and xp is np:
            np.copyto(y, state)
            np.copyto(self.operand, y)
            return
        float32_rows_into(xp, state, self.operand)
        if y is not None:
            store(xp, y, state)


def float32_rows_into(xp: Any, values: Array, rows: Array) -> None:
    """rows = float64 `values` rounded to float32, in float64 (through the bits off NumPy: the
    library's conversion flushes subnormals)."""
    rows[...] = values.astype(np.float32) if xp is np else widen(xp, narrow(xp, values))


class ExactLSTM(_Loop):
    """One direction's exact LSTM steps for a batch size, from `loop_matrix`'s Rᵀ in
    `LSTM_BLOCKS`' order: c = f·c + i·g, h = o·tanh64(c)."""

    blocks = LSTM_BLOCKS

    def __init__(self, xp: Any, recurrence: RowMatrix, batch: int) -> None:
        hidden = recurrence.matrix.shape[0]
        super().__init__(xp, hidden, batch)
        h = hidden
        self.product = RowProduct(xp, recurrence, batch)
        self.gates = self.buffer(4 * h)  # −o, −i, −f, g
        self.sigmoids = self.buffer(3 * h)  # o, i, f
        self.candidate_cell = self.buffer(2 * h)  # g, c
        self.terms = self.buffer(2 * h)  # i·g, f·c
        self.cell_tanh = self.buffer(h)
        self.o, self.i_f = self.sigmoids[:, :h], self.sigmoids[:, h:]
        self.cell = self.candidate_cell[:, h:]
        self.input_term, self.forget_term = self.terms[:, :h], self.terms[:, h:]
        self.gate_functions = activations(xp, self.gates, self.sigmoids, self.candidate_cell[:, :h])
        self.cell_function = activations(xp, self.cell, self.sigmoids[:, :0], self.cell_tanh)

    def start(self, states: Sequence[Array]) -> None:
        self.state[...] = states[0]
        self.cell[...] = states[1]

    def finals(self) -> tuple[Array, ...]:
        return self.state.copy(), self.cell.copy()

    def step(self, row: Array) -> bool:
        xp = self.xp
        if not self.product_into(self.product, self.operand, self.gates):
            return False
        xp.add(row, self.gates, self.gates)
        self.gate_functions()
        xp.multiply(self.i_f, self.candidate_cell, self.terms)
        xp.add(self.forget_term, self.input_term, self.cell)  # c = f·c + i·g
        self.cell_function()
        xp.multiply(self.o, self.cell_tanh, self.state)  # h = o·tanh(c)
        return True


class ExactGRU(_Loop):
    """One direction's exact GRU steps from `loop_matrix`'s Rᵀ in `GRU_BLOCKS`' order: with
    linear_before_reset one product h·Rᵀ a step and ĥ = tanh(x_h + r·(h·R_hᵀ + Rb_h)) (`bias`
    Rb_h), else two, h·R_zrᵀ and (r·h)·R_hᵀ (`recurrence` then the two matrices) and ĥ =
    tanh(x_h + (r·h)·R_hᵀ); h = ĥ + z·(h − ĥ)."""

    blocks = GRU_BLOCKS

    def __init__(
        self, xp: Any, recurrence: Sequence[RowMatrix], batch: int, bias: Array | None
    ) -> None:
        hidden = recurrence[0].matrix.shape[0]
        super().__init__(xp, hidden, batch)
        h = hidden
        self.products = [RowProduct(xp, matrix, batch) for matrix in recurrence]
        self.bias = bias  # linear_before_reset's Rb_h, or None (two products)
        self.value = self.buffer(3 * h if bias is not None else 2 * h)  # the product h·Rᵀ
        self.value_gates, self.value_hidden = self.value[:, : 2 * h], self.value[:, 2 * h :]
        self.gates = self.buffer(2 * h)  # −z, −r
        self.zr = self.buffer(2 * h)
        self.z, self.r = self.zr[:, :h], self.zr[:, h:]
        self.hidden_gate = self.buffer(h)  # r·(h·R_hᵀ + Rb_h), or r·h then (r·h)·R_hᵀ
        self.candidate_in = self.buffer(h)
        self.candidate = self.buffer(h)
        self.difference = self.buffer(h)
        self.reset_rows = self.buffer(h)  # r·h rounded to float32 (two products)
        self.gate_functions = activations(xp, self.gates, self.zr, self.zr[:, :0])
        self.candidate_function = activations(xp, self.candidate_in, self.zr[:, :0], self.candidate)

    def step(self, row: Array) -> bool:
        xp, h = self.xp, self.hidden
        if not self.product_into(self.products[0], self.operand, self.value):
            return False
        xp.add(row[:, : 2 * h], self.value_gates, self.gates)
        self.gate_functions()
        hidden = self.hidden_gate
        if self.bias is not None:  # linear_before_reset: r·(h·R_hᵀ + Rb_h)
            xp.add(self.value_hidden, self.bias, hidden)
            xp.multiply(self.r, hidden, hidden)
        else:  # (r·h)·R_hᵀ, r·h rounded to float32
            xp.multiply(self.r, self.state, hidden)
            float32_rows_into(xp, hidden, self.reset_rows)
            if not self.product_into(self.products[1], self.reset_rows, hidden):
                return False
        xp.add(row[:, 2 * h :], hidden, self.candidate_in)
        self.candidate_function()
        xp.subtract(self.state, self.candidate, self.difference)
        xp.multiply(self.z, self.difference, self.difference)
        xp.add(self.candidate, self.difference, self.state)  # h = ĥ + z·(h − ĥ)
        return True


class ExactRNN(_Loop):
    """One direction's exact RNN steps: h = tanh64(x + h·Rᵀ)."""

    blocks = RNN_BLOCKS

    def __init__(self, xp: Any, recurrence: RowMatrix, batch: int) -> None:
        super().__init__(xp, recurrence.matrix.shape[0], batch)
        self.product = RowProduct(xp, recurrence, batch)
        self.gates = self.buffer(self.hidden)
        self.function = activations(xp, self.gates, self.gates[:, :0], self.state)

    def step(self, row: Array) -> bool:
        xp = self.xp
        if not self.product_into(self.product, self.operand, self.gates):
            return False
        xp.add(row, self.gates, self.gates)
        self.function()
        return True
