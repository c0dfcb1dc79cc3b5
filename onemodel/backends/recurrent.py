"""The time loops of LSTM, GRU and RNN layers with their default activations, shared by NumPy
and CuPy (fast mode).

A step is one matrix product and a handful of ufunc calls on arrays of a few hundred
elements, so what costs is the number of calls and how NumPy iterates each one, not the
arithmetic:

- Weights are prepared once per plan (`Cells.prepare`): gates in the order the step wants, the
  sigmoid gates' rows pre-scaled by 1/2 (exact in binary floating point) so that one tanh call
  serves every gate (σ(x) = 1/2 + tanh(x/2)/2), every bias as one more column of a matrix
  whose operand has a 1 there.
- The states are feature-major, [H, B]: the GEMM of a step is M·H into a [gates·H, B] array,
  whose gate blocks are then contiguous row ranges, so every call takes NumPy's contiguous
  fast path (a [B, H] column block of a [B, gates·H] array costs a full iterator set-up per
  call: 3× the time of the same call on contiguous memory at B = 8).
- One batch entry (`Walk.rows`: [H, 1] is a row): X·Wᵀ + bias of every step is one GEMM
  before the loop, over x with a column of ones, and a step's product is h·R, a gemv by
  `dot` (0.4 µs less than `matmul`'s 2-D product of the same row).
- A batch (`Walk.stacked`): a step's operand is the column [h; x_t; 1] and its matrix
  [R | W | bias], so one GEMM per step gives the gates with the input projection and the bias
  in them. The projection as one GEMM before the loop would have to be laid out [T, N, B] for
  the step to add it on contiguous memory, which is T small GEMMs (7.8 µs each at
  N = 512, B = 8) or a transposed copy; inside the step's GEMM it costs its flops, at that
  GEMM's speed, and saves the step an addition.
- Each step writes its output state into a history [T + 1, rows, B] whose rows after the
  state hold the operand's other parts (a 1 for GRU's Rbn with one entry; x_t and the 1 for a
  batch), written before the loop; Y is one transposed copy of it after the loop, so no step
  writes strided memory. The views every step reads and writes are made before the loop
  (`Walk`), and scalars are 0-d arrays (a Python float costs a ufunc call 0.5 µs more).
- LSTM keeps c right after the cell candidate g and orders its gates o, i, f, g: [i, f]·[g, c]
  is one multiplication, c = i·g + f·c one addition. GRU with linear_before_reset gets its
  hidden gate's recurrence bias Rbn from the operand's 1 as well, so h·Rᵀ + Rbn is one GEMM.

Per step then: LSTM one product and 8 ufunc calls, GRU 1 and 10 (two products without
linear_before_reset), RNN 1 and 2; one ufunc call fewer each for a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

Scratch = Callable[[tuple[int, ...], Any], Any]

# The factor the sigmoid gates' pre-activations carry.
SIGMOID_SCALE = 0.5


@dataclass(frozen=True, slots=True)
class CellWeights:
    """One direction's weights in the cells' layout (`Cells.prepare`), rows in the cells'
    order, sigmoid rows scaled."""

    inputs: Any  # [N, I + 1]: W, then the bias outside the recurrence (one entry)
    rows: tuple[Any, ...]  # the step's products h·M for one entry, M [K, N]
    columns: tuple[Any, ...]  # for a batch, M·H with M [N, K]; the first over [h; x; 1]


def with_bias(xp: Any, w: Any, bias: Any) -> Any:
    """[W | bias]: the input weights [N, I] with the bias [N] as one more column."""
    return xp.ascontiguousarray(xp.concatenate([w, bias[:, None]], axis=1))


def stacked(xp: Any, r: Any, w: Any, bias: Any) -> Any:
    """[R | W | bias]: the matrix of a batch's step over the operand [h; x; 1]."""
    return xp.ascontiguousarray(xp.concatenate([r, w, bias[:, None]], axis=1))


class Cells:
    """One layer kind's fused time loop; subclasses give the gate order and the step."""

    gates: ClassVar[int]
    order: ClassVar[tuple[int, ...]]  # the ONNX gate blocks (W, R, B order) in the cells' order
    sigmoid_gates: ClassVar[int] = 0  # leading blocks (cells' order) a sigmoid activates
    states: ClassVar[int] = 1
    ones_row: ClassVar[bool] = False  # one entry: the history has a row of ones under the state

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
        return CellWeights(
            with_bias(xp, w, wb + rb),
            (xp.ascontiguousarray(r.T),),
            (stacked(xp, r, w, wb + rb),),
        )

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
        if batch == 1:
            projected = self._projected(xp, x, weights, scratch)
            below = int(self.ones_row)
        else:
            projected, below = None, size + 1
        history = scratch((steps + 1, hidden + below, batch), x.dtype)
        if below:
            history[:, -1] = 1
        if projected is None:  # x_t beside the state the step reads
            reads = history[1:] if backward else history[:-1]
            reads[:, hidden : hidden + size] = x.transpose(0, 2, 1)
        first = steps if backward else 0
        history[first, :hidden] = initial[0].T
        walk = Walk.of(projected, history, hidden, backward)
        others = self.loop(xp, walk, weights, initial[1:], scratch)
        if y is not None:
            states = history[:-1] if backward else history[1:]
            y[...] = states[:, :hidden].transpose(0, 2, 1)
        return (history[steps - first, :hidden].T, *others)

    @staticmethod
    def _projected(xp: Any, x: Any, weights: CellWeights, scratch: Scratch) -> Any:
        """X·Wᵀ + bias of every step of one entry ([T, N, 1]) as one GEMM, the bias from a
        column of ones after x: a copy of x costs less than a pass over the product, which
        is gates·H/I times larger."""
        steps, _, size = x.shape
        extended = scratch((steps, size + 1), weights.inputs.dtype)
        extended[:, size] = 1
        extended[:, :size] = x[:, 0]
        units = weights.inputs.shape[0]
        projected = scratch((steps, units, 1), weights.inputs.dtype)
        xp.matmul(extended, weights.inputs.T, out=projected.reshape(steps, units))
        return projected

    def loop(
        self, xp: Any, walk: Walk, weights: CellWeights, others: Sequence[Any], scratch: Scratch
    ) -> tuple[Any, ...]:
        """Every step of `walk`; `others` are the initial extra states ([B, H]); returns the
        final extra states ([B, H])."""
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Walk:
    """Per step, in the order the steps run, the views it reads and writes, made before the
    loop (by iterating over arrays: a third of the cost of indexing them step by step)."""

    projected: Any  # [T, N, 1], or None: a batch, whose step's GEMM reads x_t (`stacked`)
    backward: bool
    operands: list[Any]  # what the step's first GEMM reads: [K, B], or a [1, K] row (`rows`)
    previous: list[Any]  # the state [H, B]
    outputs: list[Any]  # where the new state goes [H, B]

    @classmethod
    def of(cls, projected: Any, history: Any, hidden: int, backward: bool) -> Walk:
        steps, size, batch = history.shape
        operands = list(history.reshape(steps, 1, size) if batch == 1 else history)
        states = list(history[:, :hidden])
        if backward:  # step t reads history[t + 1] and writes history[t]
            return cls(projected, True, operands[:0:-1], states[:0:-1], states[-2::-1])
        return cls(projected, False, operands[:-1], states[:-1], states[1:])

    @property
    def rows(self) -> bool:
        """One batch entry: the products are row·M, gemvs."""
        return self.projected is not None

    def inputs(self, start: int = 0, stop: int | None = None) -> list[Any]:
        """Per step, rows start:stop of the projected input ([stop - start, 1]); None for a
        batch (the step's GEMM adds them)."""
        if self.projected is None:
            return [None] * len(self.outputs)
        parts = list(self.projected[:, start:stop])
        return parts[::-1] if self.backward else parts

    def gemm(
        self, xp: Any, weights: CellWeights, index: int, out: Any, operands: list[Any] | None = None
    ) -> tuple[Callable[..., Any], list[Any], list[Any], Any]:
        """Per step, product `index` of `weights` into `out` [N, B] as `call(left[k],
        right[k], target)`, over `operands` (in the form the walk's have; its own by
        default): h·M by `dot` for one entry, M·H by `matmul` for a batch."""
        operands = self.operands if operands is None else operands
        if self.rows:
            return xp.dot, operands, [weights.rows[index]] * len(operands), out.reshape(1, -1)
        return xp.matmul, [weights.columns[index]] * len(operands), operands, out


class LSTMCells(Cells):
    """Gates o, i, f (scaled), then g; c ← f·c + i·g, h ← o·tanh(c)."""

    gates = 4
    order = (1, 0, 2, 3)  # ONNX: i, o, f, c
    sigmoid_gates = 3
    states = 2

    def loop(self, xp, walk, weights, others, scratch):
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
        product, left, right, target = walk.gemm(xp, weights, 0, gates)
        half = xp.asarray(SIGMOID_SCALE, dtype=block.dtype)  # a 0-d array: 0.5 µs less a call
        tanh, multiply, add = xp.tanh, xp.multiply, xp.add
        for a, b, projected, h in zip(left, right, walk.inputs(), walk.outputs, strict=True):
            product(a, b, target)
            if projected is not None:
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
    n = tanh(xn + (r·h)·Rnᵀ), a second GEMM after r.

    The step's block is [xn, z, r, n]: a batch's first GEMM writes xn (its rows of
    [R | W | bias] have no R part) with z, r and, with linear_before_reset, n's recurrence; one
    entry's writes z, r (and n's recurrence) and reads xn from the projection."""

    gates = 3
    order = (0, 1, 2)
    sigmoid_gates = 2

    def __init__(self, linear_before_reset: bool) -> None:
        self.ones_row = linear_before_reset

    def _weights(self, xp, w, r, wb, rb):
        hidden = r.shape[1]
        size = 2 * hidden
        gates = wb + rb
        zeros = xp.zeros((hidden, hidden), dtype=r.dtype)
        xn = stacked(xp, zeros, w[size:], wb[size:])
        if self.ones_row:  # Rbn rides on the operand's 1
            gates[size:] = wb[size:]
            with_rbn = xp.concatenate([r, rb[:, None]], axis=1)
            with_rbn[:size, -1] = 0
            inputs = with_bias(xp, w, gates)
            rn = stacked(xp, r[size:], xp.zeros_like(w[size:]), rb[size:])
            columns = xp.concatenate([xn, stacked(xp, r[:size], w[:size], gates[:size]), rn])
            return CellWeights(inputs, (xp.ascontiguousarray(with_rbn.T),), (columns,))
        first = xp.concatenate([xn, stacked(xp, r[:size], w[:size], gates[:size])])
        first[:hidden, -1] += rb[size:]
        return CellWeights(
            with_bias(xp, w, gates),
            (xp.ascontiguousarray(r[:size].T), xp.ascontiguousarray(r[size:].T)),
            (first, xp.ascontiguousarray(r[size:])),
        )

    def loop(self, xp, walk, weights, others, scratch):
        if not walk.outputs:
            return ()
        hidden, batch = walk.outputs[0].shape
        dtype = walk.outputs[0].dtype
        block = scratch((4 * hidden, batch), dtype)
        zr, z, r, n = (
            block[hidden : 3 * hidden],
            block[hidden : 2 * hidden],
            block[2 * hidden : 3 * hidden],
            block[3 * hidden :],
        )
        difference = scratch((hidden, batch), dtype)
        half = xp.asarray(SIGMOID_SCALE, dtype=dtype)  # a 0-d array: 0.5 µs less a call
        tanh, multiply, add, subtract = xp.tanh, xp.multiply, xp.add, xp.subtract
        xn = walk.inputs(2 * hidden) if walk.rows else [block[:hidden]] * len(walk.outputs)
        steps = zip(walk.inputs(0, 2 * hidden), xn, walk.previous, walk.outputs, strict=True)
        start = hidden if walk.rows else 0
        if self.ones_row:
            product, left, right, target = walk.gemm(xp, weights, 0, block[start:])
            for a, b, (x_zr, x_n, h_in, h) in zip(left, right, steps, strict=True):
                product(a, b, target)
                if x_zr is not None:
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
        product, left, right, target = walk.gemm(xp, weights, 0, block[start : 3 * hidden])
        _, left_n, right_n, target_n = walk.gemm(xp, weights, 1, n, [operand] * len(left))
        for a, b, a_n, b_n, (x_zr, x_n, h_in, h) in zip(
            left, right, left_n, right_n, steps, strict=True
        ):
            product(a, b, target)
            if x_zr is not None:
                add(zr, x_zr, zr)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(r, h_in, reset)
            product(a_n, b_n, target_n)
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

    def loop(self, xp, walk, weights, others, scratch):
        if not walk.outputs:
            return ()
        total = scratch(walk.outputs[0].shape, walk.outputs[0].dtype)
        product, left, right, target = walk.gemm(xp, weights, 0, total)
        add, tanh = xp.add, xp.tanh
        for a, b, projected, h in zip(left, right, walk.inputs(), walk.outputs, strict=True):
            product(a, b, target)
            if projected is not None:
                add(total, projected, total)
            tanh(total, h)
        return ()
