"""The time loops of LSTM, GRU and RNN layers with their default activations, shared by NumPy
and CuPy (fast mode).

A step is a handful of ufunc calls on arrays of a few hundred elements, so what costs is the
number of calls and how NumPy iterates each one, not the arithmetic:

- Weights are prepared once per plan (`Cells.prepare`): gates in the order the step wants, the
  sigmoid gates' rows pre-scaled by 1/2 (exact in binary floating point) so that one tanh call
  serves every gate (σ(x) = 1/2 + tanh(x/2)/2), and every bias outside the recurrence as one
  more column of W: X·Wᵀ + bias of every step is one GEMM, over x with a column of ones.
- The states are feature-major, [H, B]: the GEMM of a step is Rᵀ·h into a [gates·H, B] array,
  whose gate blocks are then contiguous row ranges, so every call takes NumPy's contiguous
  fast path (a [B, H] column block of a [B, gates·H] array costs a full iterator set-up per
  call: 3× the time of the same call on contiguous memory at B = 8). With one batch entry
  ([H, 1] is a row) the GEMM is h·R, a gemv.
- Each step writes its output state into a history [T + 1, H, B]; Y is one transposed copy of
  it after the loop, so no step writes strided memory. The views every step reads and writes
  are made before the loop (`Walk`), and scalars are 0-d arrays (a Python float costs a ufunc
  call 0.5 µs more).
- LSTM keeps c right after the cell candidate g and orders its gates o, i, f, g: [i, f]·[g, c]
  is one multiplication, c = i·g + f·c one addition. GRU with linear_before_reset gets its
  hidden gate's recurrence bias Rbn from a row of ones under the state (one more column of
  Rᵀ), so h·Rᵀ + Rbn is one GEMM.

Per step then: LSTM one GEMM and 8 ufunc calls, GRU 1 and 10 (two GEMMs and 11 calls without
linear_before_reset), RNN 1 and 2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Scratch = Callable[[tuple[int, ...], Any], Any]

# The factor the sigmoid gates' pre-activations carry.
SIGMOID_SCALE = 0.5


@dataclass(frozen=True, slots=True)
class Product:
    """One recurrent matrix in both forms a step's GEMM takes: `rows` [K, N] (h·R for a
    one-entry batch, a gemv) and `columns` [N, K] (Rᵀ·H for [K, B] states)."""

    rows: Any
    columns: Any

    @classmethod
    def of(cls, xp: Any, matrix: Any) -> Product:
        """From the [N, K] matrix (output units by state units)."""
        return cls(xp.ascontiguousarray(matrix.T), xp.ascontiguousarray(matrix))


@dataclass(frozen=True, slots=True)
class CellWeights:
    """One direction's weights in the cells' layout (`Cells.prepare`)."""

    inputs: Any  # [N, I + 1]: W, then the bias (Wb and the parts of Rb outside the
    # recurrence) as its last column, rows in the cells' order, sigmoid rows scaled
    products: tuple[Product, ...]  # the recurrence's GEMMs


def with_bias(xp: Any, w: Any, bias: Any) -> Any:
    """[W | bias]: the input weights [N, I] with the bias [N] as one more column."""
    return xp.ascontiguousarray(xp.concatenate([w, bias[:, None]], axis=1))


class Cells:
    """One layer kind's fused time loop; subclasses give the gate order and the step."""

    gates: ClassVar[int]
    order: ClassVar[tuple[int, ...]]  # the ONNX gate blocks (W, R, B order) in the cells' order
    sigmoid_gates: ClassVar[int] = 0  # leading blocks (cells' order) a sigmoid activates
    states: ClassVar[int] = 1
    ones_row: ClassVar[bool] = False  # the history has a row of ones under the state

    def prepare(self, xp: Any, w: Any, r: Any, wb: Any, rb: Any) -> CellWeights:
        """From one direction's W [gates·H, I], R [gates·H, H] and biases [gates·H] (ONNX
        order, the working type)."""
        hidden = r.shape[1]
        rows = xp.concatenate([xp.arange(k * hidden, (k + 1) * hidden) for k in self.order])
        scale = xp.ones(self.gates * hidden, dtype=w.dtype)
        scale[: self.sigmoid_gates * hidden] = SIGMOID_SCALE
        w, r = w[rows] * scale[:, None], r[rows] * scale[:, None]
        wb, rb = wb[rows] * scale, rb[rows] * scale
        return self._weights(xp, w, r, wb, rb)

    def _weights(self, xp: Any, w: Any, r: Any, wb: Any, rb: Any) -> CellWeights:
        return CellWeights(with_bias(xp, w, wb + rb), (Product.of(xp, r),))

    def run(
        self,
        xp: Any,
        x: Any,
        weights: CellWeights,
        initial: Sequence[Any],
        y: Any | None,
        backward: bool,
        scratch: Scratch,
    ) -> tuple[Any, ...]:
        """The layer over x [T, B, I] from the initial states ([B, H] each), writing y
        [T, B, H] when given; returns the final states ([B, H] each)."""
        steps, batch, size = x.shape
        hidden = initial[0].shape[1]
        units = weights.inputs.shape[0]
        # X·Wᵀ + bias for every step as one GEMM (a batched one into [T, N, B] for a batch),
        # the bias from a column of ones after x: a copy of x costs less than a pass over
        # the product, which is gates·H/I times larger.
        extended = scratch((steps, batch, size + 1), weights.inputs.dtype)
        extended[..., size] = 1
        extended[..., :size] = x
        projected = scratch((steps, units, batch), weights.inputs.dtype)
        if batch == 1:
            flat = extended.reshape(steps, size + 1)
            xp.matmul(flat, weights.inputs.T, out=projected.reshape(steps, units))
        else:
            xp.matmul(weights.inputs, extended.transpose(0, 2, 1), out=projected)
        history = scratch((steps + 1, hidden + self.ones_row, batch), x.dtype)
        if self.ones_row:
            history[:, hidden] = 1
        first = steps if backward else 0
        history[first, :hidden] = initial[0].T
        walk = Walk.of(projected, history, hidden, backward)
        others = self.loop(xp, walk, weights.products, initial[1:], scratch)
        if y is not None:
            states = history[:-1] if backward else history[1:]
            y[...] = states[:, :hidden].transpose(0, 2, 1)
        return (history[steps - first, :hidden].T, *others)

    def loop(
        self,
        xp: Any,
        walk: Walk,
        products: tuple[Product, ...],
        others: Sequence[Any],
        scratch: Scratch,
    ) -> tuple[Any, ...]:
        """Every step of `walk`; `others` are the initial extra states ([B, H]); returns the
        final extra states ([B, H])."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Walk:
    """Per step, in the order the steps run, the views it reads and writes, made before the
    loop (by iterating over arrays: a third of the cost of indexing them step by step)."""

    projected: Any  # [T, N, B]
    backward: bool
    operands: list[Any]  # the state as the GEMM reads it: [K, B], or a [1, K] row (`rows`)
    previous: list[Any]  # the state [H, B]
    outputs: list[Any]  # where the new state goes [H, B]
    rows: bool  # one batch entry: the GEMM is row·R

    @classmethod
    def of(cls, projected: Any, history: Any, hidden: int, backward: bool) -> Walk:
        steps, size, batch = history.shape
        rows = batch == 1
        operands = list(history.reshape(steps, 1, size) if rows else history)
        states = list(history[:, :hidden])
        if backward:  # step t reads history[t + 1] and writes history[t]
            return cls(projected, True, operands[:0:-1], states[:0:-1], states[-2::-1], rows)
        return cls(projected, False, operands[:-1], states[:-1], states[1:], rows)

    def inputs(self, start: int = 0, stop: int | None = None) -> list[Any]:
        """Per step, rows start:stop of the projected input ([stop - start, B])."""
        parts = list(self.projected[:, start:stop])
        return parts[::-1] if self.backward else parts

    def gemm(self, product: Product, out: Any) -> tuple[list[Any], list[Any], Any]:
        """Per step, the operands of out ← state·R as `xp.matmul(left[k], right[k], target)`:
        Rᵀ·H for a batch, h·R (a gemv) for one entry; `target` views `out` [N, B]."""
        return self.gemm_of(product, self.operands, out)

    def gemm_of(
        self, product: Product, operands: list[Any], out: Any
    ) -> tuple[list[Any], list[Any], Any]:
        """`gemm` with other per-step operands (in the form `operands` has)."""
        if self.rows:
            return operands, [product.rows] * len(operands), out.reshape(1, -1)
        return [product.columns] * len(operands), operands, out


class LSTMCells(Cells):
    """Gates o, i, f (scaled), then g; c ← f·c + i·g, h ← o·tanh(c)."""

    gates = 4
    order = (1, 0, 2, 3)  # ONNX: i, o, f, c
    sigmoid_gates = 3
    states = 2

    def loop(self, xp, walk, products, others, scratch):
        batch, hidden = others[0].shape
        block = scratch((5 * hidden, batch), others[0].dtype)
        gates, sigmoids = block[: 4 * hidden], block[: 3 * hidden]
        o, i_f, g_c, c = (
            block[:hidden],
            block[hidden : 3 * hidden],
            block[3 * hidden :],
            block[4 * hidden :],
        )
        c[...] = others[0].T
        terms = scratch((2 * hidden, batch), block.dtype)
        i_g, f_c = terms[:hidden], terms[hidden:]
        left, right, target = walk.gemm(products[0], gates)
        half = xp.asarray(SIGMOID_SCALE, dtype=block.dtype)  # a 0-d array: 0.5 µs less a call
        matmul, tanh, multiply, add = xp.matmul, xp.tanh, xp.multiply, xp.add
        for a, b, projected, h in zip(left, right, walk.inputs(), walk.outputs, strict=True):
            matmul(a, b, target)
            add(gates, projected, gates)
            tanh(gates, gates)
            multiply(sigmoids, half, sigmoids)
            add(sigmoids, half, sigmoids)
            multiply(i_f, g_c, terms)
            add(i_g, f_c, c)
            tanh(c, h)
            multiply(h, o, h)
        return (c.T,)


class GRUCells(Cells):
    """Gates z, r (scaled), then the candidate n; h ← n + z·(h − n). With linear_before_reset
    n = tanh(xn + r·(h·Rnᵀ + Rbn)) from one GEMM of all three gates, else
    n = tanh(xn + (r·h)·Rnᵀ), a second GEMM after r."""

    gates = 3
    order = (0, 1, 2)
    sigmoid_gates = 2

    def __init__(self, linear_before_reset: bool) -> None:
        self.ones_row = linear_before_reset

    def _weights(self, xp, w, r, wb, rb):
        size = 2 * r.shape[1]
        if self.ones_row:  # Rbn rides on the state's row of ones
            r = xp.concatenate([r, xp.zeros_like(rb)[:, None]], axis=1)
            r[size:, -1] = rb[size:]
            bias = wb.copy()
            bias[:size] += rb[:size]
            return CellWeights(with_bias(xp, w, bias), (Product.of(xp, r),))
        products = (Product.of(xp, r[:size]), Product.of(xp, r[size:]))
        return CellWeights(with_bias(xp, w, wb + rb), products)

    def loop(self, xp, walk, products, others, scratch):
        if not walk.outputs:
            return ()
        hidden, batch = walk.outputs[0].shape
        dtype = walk.outputs[0].dtype
        block = scratch((3 * hidden, batch), dtype)
        zr, z, r, n = (
            block[: 2 * hidden],
            block[:hidden],
            block[hidden : 2 * hidden],
            block[2 * hidden :],
        )
        difference = scratch((hidden, batch), dtype)
        half = xp.asarray(SIGMOID_SCALE, dtype=dtype)  # a 0-d array: 0.5 µs less a call
        matmul, tanh, multiply, add, subtract = xp.matmul, xp.tanh, xp.multiply, xp.add, xp.subtract
        steps = zip(
            walk.inputs(0, 2 * hidden), walk.inputs(2 * hidden), walk.previous, walk.outputs,
            strict=True,
        )  # fmt: skip
        if self.ones_row:
            left, right, target = walk.gemm(products[0], block)
            for a, b, (x_zr, x_n, h_in, h) in zip(left, right, steps, strict=True):
                matmul(a, b, target)
                add(zr, x_zr, zr)
                tanh(zr, zr)
                multiply(zr, half, zr)
                add(zr, half, zr)
                multiply(n, r, n)
                add(n, x_n, n)
                tanh(n, n)
                subtract(h_in, n, difference)
                multiply(difference, z, difference)
                add(n, difference, h)
            return ()
        reset = scratch((hidden, batch), dtype)
        operand = reset.reshape(1, -1) if walk.rows else reset
        left, right, target = walk.gemm(products[0], zr)
        left_n, right_n, target_n = walk.gemm_of(products[1], [operand] * len(left), n)
        for a, b, a_n, b_n, (x_zr, x_n, h_in, h) in zip(
            left, right, left_n, right_n, steps, strict=True
        ):
            matmul(a, b, target)
            add(zr, x_zr, zr)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(r, h_in, reset)
            matmul(a_n, b_n, target_n)
            add(n, x_n, n)
            tanh(n, n)
            subtract(h_in, n, difference)
            multiply(difference, z, difference)
            add(n, difference, h)
        return ()


class RNNCells(Cells):
    """h ← tanh(x·Wᵀ + h·Rᵀ + Wb + Rb)."""

    gates = 1
    order = (0,)

    def loop(self, xp, walk, products, others, scratch):
        if not walk.outputs:
            return ()
        total = scratch(walk.outputs[0].shape, walk.outputs[0].dtype)
        left, right, target = walk.gemm(products[0], total)
        matmul, add, tanh = xp.matmul, xp.add, xp.tanh
        for a, b, projected, h in zip(left, right, walk.inputs(), walk.outputs, strict=True):
            matmul(a, b, target)
            add(total, projected, total)
            tanh(total, h)
        return ()
