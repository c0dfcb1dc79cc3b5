"""An LSTM layer's whole time loop compiled by numba (numpy_cpu/compiled.py), for one direction
whose input projection X·Wᵀ + bias is made before the loop (backends/recurrent.py).

In NumPy a step is a BLAS product and eight ufunc calls on a few hundred elements: at H = 128
and one batch entry OpenBLAS's gemv takes 3.7 µs and the calls 2.9, where onnxruntime's
whole step takes 2.8. Compiled, a step is a loop: the recurrence h·R as rows of R scaled and
added into the step's gates (R read once, the gates in L1), every gate's tanh by
`compiled_exponentials.exponentials` (Cephes' tanhf, its sigmoid gates pre-scaled by 1/2 as
the NumPy loop's: σ(x) = 1/2 + tanh(x/2)/2), then the cell update. Fast mode only.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from onemodel.backends.numpy_cpu import compiled_exponentials
from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.compiled_exponentials import BLOCK, TANH_OF_ODD

# The compiled `exponentials`, bound by `_compiled_steps` before `_lstm_steps` first compiles:
# numba reads a called function from the caller's globals when it compiles the caller, and a
# compiled function must be a numba one there (this module is imported without numba).
tanh_rows: Any = None


def _lstm_steps(projected, rt, states, c, backward, gates, cell, buffers, peaks, unit):
    """Every step of an LSTM direction: projected [T, B, 4H] (gates o, i, f, g, the sigmoid
    gates' pre-activations halved), rt = Rᵀ [H, 4H] in that order and scaling, states
    [T + 1, H, B] with the initial state in row 0 (forward) or row T (backward), each step
    writing the next; c [H, B] the cell state, updated. `gates` [1, 4H] and `cell` [1, H] are
    work rows, `buffers` the exponentials' block buffers."""
    steps, batch, width = projected.shape
    hidden = rt.shape[0]
    half = np.float32(0.5)
    gate, bits, held = buffers
    row, cell_row = gates[0], cell[0]
    for step in range(steps):
        t = steps - 1 - step if backward else step
        before, after = (t + 1, t) if backward else (t, t + 1)
        for entry in range(batch):
            source = projected[t, entry]
            for j in range(width):
                row[j] = source[j]
            paired = (
                hidden - hidden % 4
            )  # four rows of R a pass: the gates stored a quarter as often
            for k in range(0, paired, 4):
                a, b = states[before, k, entry], states[before, k + 1, entry]
                c2, d = states[before, k + 2, entry], states[before, k + 3, entry]
                wa, wb, wc, wd = rt[k], rt[k + 1], rt[k + 2], rt[k + 3]
                for j in range(width):
                    row[j] += a * wa[j] + b * wb[j] + c2 * wc[j] + d * wd[j]
            for k in range(paired, hidden):
                scale, weights = states[before, k, entry], rt[k]
                for j in range(width):
                    row[j] += scale * weights[j]
            tanh_rows(gates, gates, peaks, unit, TANH_OF_ODD, gate, bits, held)
            for j in range(3 * hidden):  # o, i, f: σ from the halved pre-activation's tanh
                row[j] = row[j] * half + half
            for k in range(hidden):
                updated = row[hidden + k] * row[3 * hidden + k] + row[2 * hidden + k] * c[k, entry]
                c[k, entry] = updated
                cell_row[k] = updated
            tanh_rows(cell, cell, peaks, unit, TANH_OF_ODD, gate, bits, held)
            for k in range(hidden):
                states[after, k, entry] = row[k] * cell_row[k]


@functools.cache
def _compiled_steps() -> Any:
    """`_lstm_steps` compiled, `tanh_rows` bound first; None without numba."""
    global tanh_rows
    tanh_rows = jitted(compiled_exponentials.exponentials)
    return None if tanh_rows is None else jitted(_lstm_steps)


def compiles_lstm() -> bool:
    """Whether `compiled_lstm_steps` can run (numba is there)."""
    return _compiled_steps() is not None


def compiled_lstm_steps(projected: Any, rt: Any, states: Any, c: Any, backward: bool) -> bool:
    """Run `_lstm_steps` over these arrays (float32, C-contiguous, c [H, B] a separate array),
    True; False, having written nothing, for other arrays or without numba."""
    arrays = (projected, rt, states, c)
    if not all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays):
        return False
    if not all(a.flags.c_contiguous for a in arrays):
        return False
    steps = _compiled_steps()
    if steps is None:
        return False
    width = rt.shape[1]
    buffers = (np.empty(BLOCK, np.float32), np.empty(BLOCK, np.int32), np.empty(BLOCK, np.float32))
    gates, cell = np.empty((1, width), np.float32), np.empty((1, rt.shape[0]), np.float32)
    unit = (np.float32(1),)
    steps(projected, rt, states, c, backward, gates, cell, buffers, _NO_PEAKS, unit)
    return True


_NO_PEAKS = np.zeros(1, np.float32)
