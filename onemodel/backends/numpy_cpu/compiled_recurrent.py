"""LSTM and GRU layers' whole time loops compiled by numba (numpy_cpu/compiled.py), for one
direction whose input projection X·Wᵀ + bias is made before the loop (backends/recurrent.py).

In NumPy a step is a BLAS product and eight ufunc calls on a few hundred elements: at H = 128
and one batch entry OpenBLAS's gemv takes 3.7 µs and the calls 2.9, where onnxruntime's
whole step takes 2.8. Compiled, a step is a loop: the recurrence h·R as rows of R scaled and
added into the step's gates (R read once, the gates in L1), every gate's tanh by
`compiled_exponentials.exponentials` (Cephes' tanhf, its sigmoid gates pre-scaled by 1/2 as
the NumPy loop's: σ(x) = 1/2 + tanh(x/2)/2), then the cell update; GRU the same with its
second product (h·Rn, or (r·h)·Rn without linear_before_reset). Fast mode only.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from onemodel.backends.numpy_cpu import compiled_exponentials
from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.compiled_exponentials import NO_PEAKS, TANH_OF_ODD, block_buffers

# The compiled `exponentials`, `_add_products` and `_sigmoids`, bound by `_compiled` before
# the loops first compile: numba reads a called function from the caller's globals when it
# compiles the caller, and it must be a numba one there (this module is imported without
# numba).
tanh_rows: Any = None
add_products: Any = None
sigmoid_rows: Any = None


def _add_products(rows, vectors, matrix):
    """rows[e] += vectors[:, e] · matrix for every batch entry e (rows [B, N], vectors
    [K, B], matrix [K, N]), four rows of the matrix a pass, each read once for every entry
    (the rows of a pass stay in L1), so that each entry's row is stored a quarter as often
    as with one row a pass."""
    size, width = matrix.shape
    paired = size - size % 4
    for k in range(0, paired, 4):
        wa, wb, wc, wd = matrix[k], matrix[k + 1], matrix[k + 2], matrix[k + 3]
        for entry in range(rows.shape[0]):
            a, b = vectors[k, entry], vectors[k + 1, entry]
            c, d = vectors[k + 2, entry], vectors[k + 3, entry]
            row = rows[entry]
            for j in range(width):
                row[j] += a * wa[j] + b * wb[j] + c * wc[j] + d * wd[j]
    for k in range(paired, size):
        weights = matrix[k]
        for entry in range(rows.shape[0]):
            scale, row = vectors[k, entry], rows[entry]
            for j in range(width):
                row[j] += scale * weights[j]


def _sigmoids(rows, count):
    """σ of each row's first `count` values from the tanh of their halved pre-activations."""
    half = np.float32(0.5)
    for entry in range(rows.shape[0]):
        row = rows[entry]
        for j in range(count):
            row[j] = row[j] * half + half


def _lstm_steps(projected, rt, states, c, backward, gates, cell, buffers, peaks, unit):
    """Every step of an LSTM direction: projected [T, B, 4H] (gates o, i, f, g, the sigmoid
    gates' pre-activations halved), rt = Rᵀ [H, 4H] in that order and scaling, states
    [T + 1, H, B] with the initial state in row 0 (forward) or row T (backward), each step
    writing the next; c [H, B] the cell state, updated. `gates` [B, 4H] and `cell` [B, H]
    are work arrays, `buffers` the exponentials' block buffers."""
    steps, batch = projected.shape[:2]
    hidden = rt.shape[0]
    gate, bits, held = buffers
    for step in range(steps):
        t = steps - 1 - step if backward else step
        before, after = (t + 1, t) if backward else (t, t + 1)
        gates[:, :] = projected[t]
        add_products(gates, states[before], rt)
        tanh_rows(gates, gates, peaks, unit, TANH_OF_ODD, gate, bits, held)
        sigmoid_rows(gates, 3 * hidden)  # o, i, f
        for entry in range(batch):
            row, cell_row = gates[entry], cell[entry]
            for k in range(hidden):
                updated = row[hidden + k] * row[3 * hidden + k] + row[2 * hidden + k] * c[k, entry]
                c[k, entry] = updated
                cell_row[k] = updated
        tanh_rows(cell, cell, peaks, unit, TANH_OF_ODD, gate, bits, held)
        for k in range(hidden):
            for entry in range(batch):
                states[after, k, entry] = gates[entry, k] * cell[entry, k]


def _gru_steps(
    projected, rzr, rn, bias_n, states, backward, before_reset, gates, candidate, recurrence,
    reset, buffers, peaks, unit,
):  # fmt: skip
    """Every step of a GRU direction: projected [T, B, 3H] (z and r, their pre-activations
    halved, then n's input part; every bias in it but Rbn where `before_reset`), rzr [H, 2H]
    z's and r's recurrence, rn [H, H] n's, bias_n [H] its Rbn (read where `before_reset`),
    states [T + 1, H, B] as in `_lstm_steps`. n = tanh(xn + r·(h·Rn + Rbn)) where
    `before_reset` (linear_before_reset), else tanh(xn + (r·h)·Rn); h ← n + z·(h − n).
    `gates` [B, 2H], `candidate` and `recurrence` [B, H] and `reset` [H, B] are work arrays."""
    steps, batch, _ = projected.shape
    hidden = rn.shape[0]
    gate, bits, held = buffers
    for step in range(steps):
        t = steps - 1 - step if backward else step
        before, after = (t + 1, t) if backward else (t, t + 1)
        h = states[before]
        gates[:, :] = projected[t, :, : 2 * hidden]
        add_products(gates, h, rzr)
        tanh_rows(gates, gates, peaks, unit, TANH_OF_ODD, gate, bits, held)
        sigmoid_rows(gates, 2 * hidden)  # z, r
        for entry in range(batch):
            for j in range(hidden):
                recurrence[entry, j] = bias_n[j] if before_reset else np.float32(0)
                reset[j, entry] = gates[entry, hidden + j] * h[j, entry]
        add_products(recurrence, h if before_reset else reset, rn)
        for entry in range(batch):
            source = projected[t, entry]
            for j in range(hidden):
                scale = gates[entry, hidden + j] if before_reset else np.float32(1)
                candidate[entry, j] = source[2 * hidden + j] + scale * recurrence[entry, j]
        tanh_rows(candidate, candidate, peaks, unit, TANH_OF_ODD, gate, bits, held)
        for j in range(hidden):
            for entry in range(batch):
                n = candidate[entry, j]
                states[after, j, entry] = n + gates[entry, j] * (h[j, entry] - n)


@functools.cache
def _compiled() -> tuple[Any, Any] | None:
    """`_lstm_steps` and `_gru_steps` compiled, their callees bound first; None without
    numba."""
    global tanh_rows, add_products, sigmoid_rows
    tanh_rows = jitted(compiled_exponentials.exponentials)
    if tanh_rows is None:
        return None
    add_products, sigmoid_rows = jitted(_add_products), jitted(_sigmoids)
    return jitted(_lstm_steps), jitted(_gru_steps)


def compiles() -> bool:
    """Whether the compiled loops can run (numba is there)."""
    return _compiled() is not None


def _float32_arrays(*arrays: Any) -> bool:
    return all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays)


def compiled_lstm_steps(projected: Any, rt: Any, states: Any, c: Any, backward: bool) -> bool:
    """Run `_lstm_steps` over these arrays (float32; all but states C-contiguous; c [H, B] a
    separate array), True; False, having written nothing, for other arrays or without
    numba."""
    if not _float32_arrays(projected, rt, states, c):
        return False
    if not all(a.flags.c_contiguous for a in (projected, rt, c)):
        return False
    loops = _compiled()
    if loops is None:
        return False
    hidden, width = rt.shape
    batch = projected.shape[1]
    gates, cell = np.empty((batch, width), np.float32), np.empty((batch, hidden), np.float32)
    loops[0](projected, rt, states, c, backward, gates, cell, block_buffers(), NO_PEAKS, _UNIT)
    return True


def compiled_gru_steps(
    projected: Any, rzr: Any, rn: Any, bias_n: Any, states: Any, backward: bool,
    before_reset: bool,
) -> bool:  # fmt: skip
    """Run `_gru_steps` over these arrays (float32; all but states C-contiguous), True;
    False, having written nothing, for other arrays or without numba."""
    if not _float32_arrays(projected, rzr, rn, bias_n, states):
        return False
    if not all(a.flags.c_contiguous for a in (projected, rzr, rn, bias_n)):
        return False
    loops = _compiled()
    if loops is None:
        return False
    hidden, batch = rn.shape[0], projected.shape[1]
    gates = np.empty((batch, 2 * hidden), np.float32)
    candidate, recurrence = (np.empty((batch, hidden), np.float32) for _ in range(2))
    reset = np.empty((hidden, batch), np.float32)
    loops[1](
        projected, rzr, rn, bias_n, states, backward, before_reset, gates, candidate,
        recurrence, reset, block_buffers(), NO_PEAKS, _UNIT,
    )  # fmt: skip
    return True


_UNIT = (np.float32(1),)
