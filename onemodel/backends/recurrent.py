"""The time loops of LSTM, GRU and RNN cells with their default activations, shared by NumPy
and CuPy: per step one GEMM of the state by Rᵀ and a fused gate update written in place into
preallocated arrays (a step of a one-entry batch is a dozen small calls, not two dozen
allocating ones).

The sigmoid gates arrive pre-scaled by 1/2 (their columns of Wᵀ, Rᵀ and the biases; exact in
binary floating point), so one tanh call serves every gate: σ(x) = 1/2 + tanh(x/2)/2.

Every function takes `projected` [T, B, gates·H] (X·Wᵀ + Wb and the parts of Rb outside the
recurrence, for every step at once), the initial state [B, H], Rᵀ [H, gates·H], `y` [T, B, H]
(a view of the output to write, or None) and whether to run from the last step; it returns
the final state.
"""

from __future__ import annotations

from typing import Any

# The factor the sigmoid gates' pre-activations carry (`sigmoid_scale`).
SIGMOID_SCALE = 0.5


def sigmoid_scale(xp: Any, sigmoid_gates: int, gates: int, hidden: int, dtype: Any) -> Any:
    """Per column of the gates: 1/2 for the `sigmoid_gates` leading blocks of H, 1 after."""
    scale = xp.ones(gates * hidden, dtype=dtype)
    scale[: sigmoid_gates * hidden] = SIGMOID_SCALE
    return scale


def _steps(count: int, backward: bool) -> range:
    return range(count - 1, -1, -1) if backward else range(count)


def _sigmoid_of_halves(xp: Any, x: Any) -> None:
    """x ← σ(2x) in place."""
    xp.tanh(x, out=x)
    x *= 0.5
    x += 0.5


def lstm_cells(
    xp: Any, projected: Any, h: Any, c: Any, recurrence: Any, y: Any | None, backward: bool
) -> tuple[Any, Any]:
    """Gates i, o, f (scaled), then the cell candidate; c ← f·c + i·g, h ← o·tanh(c)."""
    steps, batch, size = projected.shape
    hidden = size // 4
    gates = xp.empty((batch, size), dtype=projected.dtype)
    product = xp.empty((batch, hidden), dtype=projected.dtype)
    h, c = h.copy(), c.copy()
    i, o, f, g = (gates[:, k * hidden : (k + 1) * hidden] for k in range(4))
    for t in _steps(steps, backward):
        xp.matmul(h, recurrence, out=gates)
        gates += projected[t]
        xp.tanh(gates, out=gates)
        sigmoids = gates[:, : 3 * hidden]
        sigmoids *= 0.5
        sigmoids += 0.5
        c *= f
        xp.multiply(i, g, out=product)
        c += product
        target = h if y is None else y[t]
        xp.tanh(c, out=target)
        target *= o
        h = target
    return h, c


def gru_cells(
    xp: Any,
    projected: Any,
    h: Any,
    recurrence: Any,
    y: Any | None,
    backward: bool,
    hidden_bias: Any | None,
) -> tuple[Any]:
    """Gates z, r (scaled), then the candidate n; h ← n + z·(h − n). With `hidden_bias` (the
    hidden gate's Rb: linear_before_reset) n = tanh(xn + r·(h·Rnᵀ + Rbn)) from one GEMM of
    all three gates, else n = tanh(xn + (r·h)·Rnᵀ), a second GEMM after r."""
    steps, batch, size = projected.shape
    hidden = size // 3
    dtype = projected.dtype
    h = h.copy()
    difference = xp.empty((batch, hidden), dtype=dtype)
    if hidden_bias is not None:
        gates = xp.empty((batch, size), dtype=dtype)
        zr, candidate = gates[:, : 2 * hidden], gates[:, 2 * hidden :]
    else:
        zr = xp.empty((batch, 2 * hidden), dtype=dtype)
        candidate = xp.empty((batch, hidden), dtype=dtype)
        reset_state = xp.empty((batch, hidden), dtype=dtype)
        gate_weights = xp.ascontiguousarray(recurrence[:, : 2 * hidden])
        hidden_weights = xp.ascontiguousarray(recurrence[:, 2 * hidden :])
    z, r = zr[:, :hidden], zr[:, hidden:]
    for t in _steps(steps, backward):
        if hidden_bias is not None:
            xp.matmul(h, recurrence, out=gates)
            zr += projected[t, :, : 2 * hidden]
            _sigmoid_of_halves(xp, zr)
            candidate += hidden_bias
            candidate *= r
        else:
            xp.matmul(h, gate_weights, out=zr)
            zr += projected[t, :, : 2 * hidden]
            _sigmoid_of_halves(xp, zr)
            xp.multiply(r, h, out=reset_state)
            xp.matmul(reset_state, hidden_weights, out=candidate)
        candidate += projected[t, :, 2 * hidden :]
        xp.tanh(candidate, out=candidate)
        xp.subtract(h, candidate, out=difference)
        difference *= z
        target = h if y is None else y[t]
        xp.add(candidate, difference, out=target)
        h = target
    return (h,)


def rnn_cells(
    xp: Any, projected: Any, h: Any, recurrence: Any, y: Any | None, backward: bool
) -> tuple[Any]:
    """h ← tanh(x·Wᵀ + h·Rᵀ + Wb + Rb)."""
    steps, batch, size = projected.shape
    total = xp.empty((batch, size), dtype=projected.dtype)
    h = h.copy()
    for t in _steps(steps, backward):
        xp.matmul(h, recurrence, out=total)
        total += projected[t]
        target = h if y is None else y[t]
        xp.tanh(total, out=target)
        h = target
    return (h,)
