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
- The input is projected (`Cells.projects`: one batch entry; a small batch of inputs wider
  than the state; GRU's narrow small batches): X·Wᵀ + bias of every step is one GEMM before
  the loop ([T, B, N], over x with a column of ones) that each step adds. With one entry a
  step's product is h·R, a gemv by `dot` (0.4 µs less than `matmul`'s 2-D product of the
  same row) and its slice of the projection is contiguous; a batch's is a transposed view
  (1.6-2.4 µs an addition at B = 8, N = 256-512; 96 µs at B = 64, N = 1024).
- Else a step's operand is the history column [x_t; 1; h] and its matrix [W | bias | R], so
  its GEMM gives the gates with the input projection and the bias in them: the projection
  before the loop laid out [T, N, B] for a contiguous add would be T small GEMMs (7.8 µs each
  at N = 512, B = 8) or a transposed copy; inside the step's GEMM it costs its flops, at that
  GEMM's speed, and saves the step an addition. That speed falls with K at a small batch
  (80 GF/s at [256, 577]·[577, 8], I512 H64, against 220 for the projection as one GEMM),
  hence the projection for wide inputs.
- Each step writes its output state into a history [T + 1, rows, B] whose other rows hold
  the operand's other parts (a 1 under the state for GRU's Rbn; x_t and a 1 above it),
  written before the loop; Y is one transposed copy of it after the loop, so no step writes
  strided memory. The views every step reads and writes are made before the loop (`Walk`),
  and scalars are 0-d arrays (a Python float costs a ufunc call 0.5 µs more).
- LSTM keeps c right after the cell candidate g and orders its gates o, i, f, g: [i, f]·[g, c]
  is one multiplication, c = i·g + f·c one addition. GRU with linear_before_reset gets its
  hidden gate's recurrence bias Rbn from the operand's 1 as well, so h·Rᵀ + Rbn is one GEMM.

Per step then, with the input projected: LSTM one product and 8 ufunc calls, GRU 1 and 10
(two products without linear_before_reset), RNN 1 and 2; else one ufunc call fewer each, and
GRU three GEMMs (`GRUCells`).

A bidirectional layer over one batch entry runs both directions in one loop
(`Cells.run_both`): its step s is the forward step s and the backward step T − 1 − s, its
arrays gate-major with the directions inside each gate ([gates, 2, H]), so that the same step
code makes the same calls on blocks twice as long. A call on 2H elements costs little more
than one on H (0.30 against 0.25 µs at H = 128), so this halves the layer's ufunc calls; the
two gemvs become one `matmul` of a stack of gates · 2 products [1, K]·[K, H] (0.5 µs more than
two `dot`s at H = 128). The projection is one GEMM per direction over the same x, copied into
the [T, gates, 2, H] layout with the backward direction's steps reversed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

Scratch = Callable[[tuple[int, ...], Any], Any]

# The factor the sigmoid gates' pre-activations carry.
SIGMOID_SCALE = 0.5
# A batch of at most this many entries with more inputs than hidden units takes the projected
# input (one GEMM before the loop) rather than x_t in the step's GEMM: OpenBLAS runs
# [N, K]·[K, B] at B = 8 at 80 GF/s for K = 577 (I512 H64) against 220 for the projection
# as one GEMM, while the step's transposed read of the projection costs 1.6-2.4 µs at B = 8
# and 96 µs at B = 64, N = 1024.
PROJECTED_BATCH = 16
# Both directions of one batch entry share a loop (`Cells.run_both`) while their recurrence
# matrices together fit this many bytes, a core's L2 cache here: beyond it each step reads
# both from L3 where a loop per direction keeps its own in L2 (T50 I128, bidirectional:
# joint/separate LSTM H128 0.91, H160 1.01, H224 1.04; GRU H192 0.86, H224 0.99).
JOINT_BYTES = 1 << 20


class CellWeights:
    """One direction's weights in the cells' layout (`Cells.prepare`), rows in the cells'
    order, sigmoid rows scaled. `columns` is made on first use: a layer that only ever runs
    with its input projected (one batch entry) would hold a second copy of its weights for
    nothing (3.7 MB for a two-layer LSTM of 256 units)."""

    def __init__(self, xp: Any, cells: Cells, inputs: Any, rows: tuple[Any, ...]) -> None:
        self.xp, self.cells = xp, cells
        # [I + 1, N]: Wᵀ, then the bias outside the recurrence as a last row, laid out for
        # the projection's GEMM: OpenBLAS runs X·Wᵀ at [64, 129]·[129, 1024] in 236 µs from
        # this layout and 696 µs from a transposed view of [N, I + 1] (AMD EPYC; 110
        # against 170 at [32, 257]·[257, 512]).
        self.inputs = xp.ascontiguousarray(inputs.T)
        self.rows = rows  # the products h·M with the input projected, M [K, N]
        self.last_walk: Walk | None = None  # `held_walk`

    @functools.cached_property
    def columns(self) -> tuple[Any, ...]:
        """The products M·H, M [N, K], over (parts of) the column [x_t; 1; h]."""
        return self.cells.columns(self.xp, self.inputs.T, self.rows)

    @functools.cached_property
    def compiled_rows(self) -> tuple[Any, ...]:
        """The recurrence matrices as a backend's compiled loop takes them (made on first
        use: `Cells.compiled_rows`)."""
        return self.cells.compiled_rows(self.xp, self.rows)


def with_bias(xp: Any, w: Any, bias: Any) -> Any:
    """[W | bias]: the input weights [N, I] with the bias [N] as one more column."""
    return xp.ascontiguousarray(xp.concatenate([w, bias[:, None]], axis=1))


class JointWeights:
    """Both directions' weights for `Cells.run_both`: their projections' matrices, and each
    product's matrices as one stack [gates, 2, K, H] (gate, direction), the forward one's
    row of the 1 of GRU's operand (`Cells.ones_row`) moved first: the joint history holds
    [1; h_forward; h_backward; 1], so that both operands and both states are contiguous."""

    def __init__(self, xp: Any, cells: Cells, forward: CellWeights, backward: CellWeights) -> None:
        self.inputs = (forward.inputs, backward.inputs)
        hidden = forward.rows[0].shape[0] - cells.ones_row

        def stack(matrix: Any, ones_first: bool) -> Any:
            size = matrix.shape[0]
            parts = matrix.reshape(size, -1, hidden).transpose(1, 0, 2)
            if ones_first and size > hidden:
                parts = xp.concatenate([parts[:, hidden:], parts[:, :hidden]], axis=1)
            return parts

        self.rows = tuple(
            xp.ascontiguousarray(xp.stack([stack(f, True), stack(b, False)], axis=1))
            for f, b in zip(forward.rows, backward.rows, strict=True)
        )
        self.last_walk: Walk | None = None  # `held_walk`


def held_walk(
    weights: CellWeights | JointWeights, make: Callable[[], Walk], projected: Any, history: Any
) -> Walk:
    """The walk of the weights' last run when this run's scratch arrays are that run's (a run
    state hands a warm run the same ones), else a new one, kept: its per-step views are a
    list a step long each, 5 µs to make at T = 32 and 15 at T = 100, a direction a run. It
    keeps the last run's history and projection alive, as the run state does."""
    walk = weights.last_walk
    if walk is None or walk.history is not history or walk.projected is not projected:
        walk = weights.last_walk = make()
    return walk


@dataclass
class LayerWeights:
    """Every direction's weights of a layer (`Cells.prepare` each); the joint form of a
    bidirectional layer is made on first use (a copy of R that only one batch entry needs)."""

    cells: Cells
    directions: tuple[CellWeights, ...]

    @functools.cached_property
    def joint(self) -> JointWeights:
        xp = self.directions[0].xp
        return JointWeights(xp, self.cells, *self.directions)


class Cells:
    """One layer kind's fused time loop; subclasses give the gate order and the step."""

    gates: ClassVar[int]
    order: ClassVar[tuple[int, ...]]  # the ONNX gate blocks (W, R, B order) in the cells' order
    sigmoid_gates: ClassVar[int] = 0  # leading blocks (cells' order) a sigmoid activates
    states: ClassVar[int] = 1
    ones_row: ClassVar[bool] = False  # projected input: a row of ones under the state
    has_compiled_loop: ClassVar[bool] = False  # `compiled_loop` asks the backend for one

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
        return CellWeights(xp, self, with_bias(xp, w, wb + rb), (xp.ascontiguousarray(r.T),))

    def columns(self, xp: Any, inputs: Any, rows: tuple[Any, ...]) -> tuple[Any, ...]:
        """The GEMMs' matrices over the column [x_t; 1; h] (`CellWeights.columns`), from the
        projected input's: [W | bias | R]."""
        return (xp.ascontiguousarray(xp.concatenate([inputs, rows[0].T], axis=1)),)

    def run(
        self,
        xp: Any,
        x: Any,
        weights: CellWeights,
        initial: Sequence[Any],
        y: Any | None,
        backward: bool,
        scratch: Scratch,
        kernels: Any = None,
    ) -> tuple[Any, ...]:
        """The layer over x [T, B, I] from the initial states ([B, H] each), writing y
        [T, B, H] when given; returns the final states ([B, H] each). With `kernels`, the
        backend's compiled time loop runs where it has one (`compiled_loop`)."""
        steps, batch, size = x.shape
        hidden = initial[0].shape[1]
        compiled = kernels is not None and self.compiles(kernels, x.dtype)
        if compiled or self.projects(batch, size, hidden):  # the state, then GRU's 1
            projected, offset = self._projected(xp, x, weights, scratch), 0
            history = scratch((steps + 1, hidden + self.ones_row, batch), x.dtype)
            if self.ones_row:
                history[:, hidden] = 1
        else:  # x_t and a 1 before the state the step reads
            projected, offset = None, size + 1
            history = scratch((steps + 1, offset + hidden, batch), x.dtype)
            history[:, size] = 1
            reads = history[1:] if backward else history[:-1]
            reads[:, :size] = x.transpose(0, 2, 1)
        states = history[:, offset : offset + hidden]
        first = steps if backward else 0
        states[first] = initial[0].T
        others = None
        if compiled:  # every batch projects: the compiled loops read the projection
            others = self.compiled_loop(
                xp, kernels, projected, weights, states, initial[1:], backward
            )
        if others is None:
            walk = held_walk(
                weights, lambda: Walk.of(projected, history, states, backward), projected, history
            )
            others = self.loop(xp, walk, weights, initial[1:], scratch)
        if y is not None:
            y[...] = (states[:-1] if backward else states[1:]).transpose(0, 2, 1)
        return (states[steps - first].T, *others)

    def compiles(self, kernels: Any, dtype: Any) -> bool:
        """Whether `kernels` has a compiled time loop for these cells in `dtype` (float32,
        cells with a `compiled_loop`); such a layer runs a direction at a time, never
        `run_both`."""
        return (
            self.has_compiled_loop and dtype.name == "float32" and kernels.compiles_recurrent_loops
        )

    def compiled_loop(
        self,
        xp: Any,
        kernels: Any,
        projected: Any,
        weights: CellWeights,
        states: Any,
        others: Sequence[Any],
        backward: bool,
    ) -> tuple[Any, ...] | None:
        """Every step by the backend's compiled loop over the projection [T, B, N] and the
        states [T + 1, H, B] (`loop`'s arguments otherwise), returning the final extra states;
        None, having written nothing, where it has none."""
        return None

    def compiled_rows(self, xp: Any, rows: tuple[Any, ...]) -> tuple[Any, ...]:
        """`rows` as `compiled_loop` passes them on."""
        return rows

    def projects(self, batch: int, size: int, hidden: int) -> bool:
        """Whether X·Wᵀ + bias is one GEMM before the loop (else x_t is in the step's)."""
        return batch == 1 or (size > hidden and batch <= PROJECTED_BATCH)

    def joins(self, hidden: int, itemsize: int) -> bool:
        """Whether a bidirectional layer over one batch entry runs both directions in one
        loop (`run_both`): while both recurrence matrices fit `JOINT_BYTES`."""
        return 2 * self.gates * hidden * (hidden + self.ones_row) * itemsize <= JOINT_BYTES

    @staticmethod
    def _projected(xp: Any, x: Any, weights: CellWeights, scratch: Scratch) -> Any:
        """X·Wᵀ + bias of every step ([T, B, N]) as one GEMM, the bias from a column of ones
        after x: a copy of x costs less than a pass over the product, which is gates·H/I
        times larger."""
        steps, batch, size = x.shape
        extended = scratch((steps * batch, size + 1), weights.inputs.dtype)
        extended[:, size] = 1
        extended[:, :size] = x.reshape(steps * batch, size)
        units = weights.inputs.shape[1]
        projected = scratch((steps, batch, units), weights.inputs.dtype)
        xp.matmul(extended, weights.inputs, out=projected.reshape(steps * batch, units))
        return projected

    def run_both(
        self,
        xp: Any,
        x: Any,
        weights: JointWeights,
        initial: Sequence[Sequence[Any]],
        y: Any | None,
        scratch: Scratch,
    ) -> tuple[tuple[Any, ...], ...]:
        """Both directions of a layer over one batch entry x [T, 1, I] in one loop, from each
        direction's initial states ([1, H] each), writing y [T, 2, 1, H] when given; returns
        each direction's final states ([1, H] each)."""
        steps = x.shape[0]
        hidden = initial[0][0].shape[1]
        ones = int(self.ones_row)
        history = scratch((steps + 1, 2 * (hidden + ones), 1), x.dtype)
        if ones:
            history[:, 0] = history[:, -1] = 1
        states = history[:, ones : ones + 2 * hidden]
        states[0, :hidden, 0] = initial[0][0][0]
        states[0, hidden:, 0] = initial[1][0][0]
        projected = self._projected_both(xp, x, weights, hidden, scratch)
        walk = held_walk(
            weights, lambda: JointWalk.of(projected, history, states), projected, history
        )
        others = [
            xp.concatenate([f, b], axis=1)
            for f, b in zip(initial[0][1:], initial[1][1:], strict=True)
        ]
        extra = self.loop(xp, walk, weights, others, scratch)
        if y is not None:
            y[:, 0, 0] = states[1:, :hidden, 0]
            y[:, 1, 0] = states[steps:0:-1, hidden:, 0]
        last = states[steps, :, 0]
        return tuple(
            (
                last[None, d * hidden : (d + 1) * hidden],
                *(e[:, d * hidden : (d + 1) * hidden] for e in extra),
            )
            for d in range(2)
        )

    def _projected_both(
        self, xp: Any, x: Any, weights: JointWeights, hidden: int, scratch: Scratch
    ) -> Any:
        """X·Wᵀ + bias of both directions ([T, 1, gates·2·H]: step s's gates [gates, 2, H]
        hold the forward step s and the backward step T − 1 − s): one GEMM per direction
        over x with a column of ones, then a copy of each into that layout."""
        steps, _, size = x.shape
        extended = scratch((steps, size + 1), x.dtype)
        extended[:, size] = 1
        extended[:, :size] = x.reshape(steps, size)
        units = weights.inputs[0].shape[1]
        each = scratch((2, steps, units), x.dtype)
        for d in range(2):
            xp.matmul(extended, weights.inputs[d], out=each[d])
        projected = scratch((steps, 1, 2 * units), x.dtype)
        grid = projected.reshape(steps, self.gates, 2, hidden)
        grid[:, :, 0] = each[0].reshape(steps, self.gates, hidden)
        grid[:, :, 1] = each[1, ::-1].reshape(steps, self.gates, hidden)
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

    projected: Any  # [T, B, N], or None: a step's GEMMs read x_t (`stacked`)
    backward: bool
    rows: bool  # one batch entry: the products are row·M, gemvs
    operands: list[Any]  # the history column a step reads: [K, B], or a [1, K] row (`rows`)
    previous: list[Any]  # the state [H, B]
    outputs: list[Any]  # where the new state goes [H, B]
    history: Any = None  # the array the views are of (`held_walk`)
    parts: dict[tuple[int, int | None], list[Any]] = field(default_factory=dict)  # `inputs`

    @classmethod
    def of(cls, projected: Any, history: Any, states: Any, backward: bool) -> Walk:
        """From the history [T + 1, K, B] and its state rows `states` [T + 1, H, B]."""
        steps, size, batch = history.shape
        rows = batch == 1
        operands = list(history.reshape(steps, 1, size) if rows else history)
        states = list(states)
        if backward:  # step t reads history[t + 1] and writes history[t]
            return cls(
                projected, True, rows, operands[:0:-1], states[:0:-1], states[-2::-1], history
            )
        return cls(projected, False, rows, operands[:-1], states[:-1], states[1:], history)

    def inputs(self, start: int = 0, stop: int | None = None) -> list[Any]:
        """Per step, units start:stop of the projected input ([stop - start, B]: contiguous
        for one entry, a transposed view for a batch); None where the step's GEMMs add
        them."""
        if self.projected is None:
            return [None] * len(self.outputs)
        parts = self.parts.get((start, stop))
        if parts is None:
            parts = list(self.projected[:, :, start:stop].transpose(0, 2, 1))
            parts = self.parts[start, stop] = parts[::-1] if self.backward else parts
        return parts

    def columns(self, start: int, stop: int | None = None) -> list[Any]:
        """Per step, rows start:stop of the column it reads (the input not projected)."""
        return [operand[start:stop] for operand in self.operands]

    def operand(self, state: Any) -> Any:
        """A [K, B] array as a product's operand in the form of the walk's `operands`."""
        return state.reshape(1, -1) if self.rows else state

    def gemm(
        self, xp: Any, weights: CellWeights, index: int, out: Any, operands: list[Any] | None = None
    ) -> tuple[Callable[..., Any], list[Any], list[Any], Any]:
        """Per step, product `index` of `weights` into `out` [N, B] as `call(left[k],
        right[k], target)`, over `operands` (in the form the walk's have; its own by
        default): h·M by `dot` for one entry, M·H by `matmul` for a batch (M the row form
        transposed where the input is projected)."""
        operands = self.operands if operands is None else operands
        count = len(operands)
        if self.rows:
            return xp.dot, operands, [weights.rows[index]] * count, out.reshape(1, -1)
        if self.projected is not None:
            return xp.matmul, [weights.rows[index].T] * count, operands, out
        return xp.matmul, [weights.columns[index]] * count, operands, out


class JointWalk(Walk):
    """`Cells.run_both`'s walk: step s of the forward and the backward direction at once,
    over one batch entry; a state is [2·H, 1] (forward, then backward), each product the
    stack of its gates and the two directions, [1, 2, 1, K]·[gates, 2, K, H] by `matmul`."""

    @classmethod
    def of(cls, projected: Any, history: Any, states: Any, backward: bool = False) -> JointWalk:
        """From the history [T + 1, 2·K, 1] (the two directions' operands) and its state rows
        `states` [T + 1, 2·H, 1]."""
        steps, size, _ = history.shape
        operands = list(history.reshape(steps, 1, 2, 1, size // 2))
        states = list(states)
        return cls(projected, False, True, operands[:-1], states[:-1], states[1:], history)

    def operand(self, state: Any) -> Any:
        return state.reshape(1, 2, 1, -1)

    def gemm(self, xp, weights, index, out, operands=None):
        operands = self.operands if operands is None else operands
        matrices = weights.rows[index]
        target = out.reshape(matrices.shape[0], 2, 1, matrices.shape[3])
        return xp.matmul, operands, [matrices] * len(operands), target


class LSTMCells(Cells):
    """Gates o, i, f (scaled), then g; c ← f·c + i·g, h ← o·tanh(c)."""

    gates = 4
    order = (1, 0, 2, 3)  # ONNX: i, o, f, c
    sigmoid_gates = 3
    states = 2
    has_compiled_loop = True

    def compiled_loop(self, xp, kernels, projected, weights, states, others, backward):
        cell = others[0].T.copy()  # c is updated in place: never the caller's initial_c
        (rt,) = weights.compiled_rows
        if not kernels.compiled_lstm_steps(projected, rt, states, cell, backward):
            return None
        return (cell.T,)

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
    n = tanh(xn + r·(h·Rnᵀ + Rbn)), else n = tanh(xn + (r·h)·Rnᵀ), a product after r.

    The step's block is [xn, z, r, n]. With the input projected (`projects`): a step's first
    product writes z, r (and n's recurrence with linear_before_reset: Rbn from the 1 under
    the state) and xn is read from the projection. Else three GEMMs over parts of the column
    [x_t; 1; h] write their blocks, none multiplying a block of zeros: z and r over all of
    it, xn over [x_t; 1] and, with linear_before_reset, n's recurrence over [1; h] (one GEMM
    [W | bias | R] of the four blocks would do a third more flops, 1.3× the time at B = 8,
    2× at I = 512)."""

    gates = 3
    order = (0, 1, 2)
    sigmoid_gates = 2
    has_compiled_loop = True

    def __init__(self, linear_before_reset: bool) -> None:
        self.ones_row = linear_before_reset

    def projects(self, batch: int, size: int, hidden: int) -> bool:
        """Also for small batches of narrow layers (H·B ≤ 1024), whose three GEMMs a step
        cost more in calls than one and the projection's transposed read: 5-10% at
        B = 4-8, H = 64-128; 7% the other way at B = 8, H = 256."""
        return super().projects(batch, size, hidden) or batch * hidden <= 1024

    def _weights(self, xp, w, r, wb, rb):
        size = 2 * r.shape[1]
        bias = wb + rb  # xn's holds Rbn but with linear_before_reset, where r multiplies it
        if self.ones_row:
            bias[size:] = wb[size:]
        inputs = with_bias(xp, w, bias)
        if self.ones_row:
            with_rbn = xp.concatenate([r, rb[:, None]], axis=1)
            with_rbn[:size, -1] = 0
            return CellWeights(xp, self, inputs, (xp.ascontiguousarray(with_rbn.T),))
        rows = (xp.ascontiguousarray(r[:size].T), xp.ascontiguousarray(r[size:].T))
        return CellWeights(xp, self, inputs, rows)

    def compiled_rows(self, xp, rows):
        """z's and r's recurrence [H, 2H], n's [H, H] and its Rbn [H] (zeros without
        linear_before_reset, whose Rbn is in the projection's bias), each contiguous."""
        if not self.ones_row:
            return rows[0], rows[1], xp.zeros(rows[1].shape[0], dtype=rows[1].dtype)
        matrix = rows[0]  # [R | Rbn]ᵀ: [H + 1, 3H]
        hidden = matrix.shape[0] - 1
        return tuple(
            xp.ascontiguousarray(part)
            for part in (matrix[:hidden, : 2 * hidden], matrix[:hidden, 2 * hidden :],
                         matrix[hidden, 2 * hidden :])
        )  # fmt: skip

    def compiled_loop(self, xp, kernels, projected, weights, states, others, backward):
        rzr, rn, bias_n = weights.compiled_rows
        if not kernels.compiled_gru_steps(
            projected, rzr, rn, bias_n, states, backward, self.ones_row
        ):
            return None
        return ()

    def columns(self, xp, inputs, rows):
        """[W | bias | R] of z and r, xn's [W | bias], then n's recurrence [Rbn | Rn] (over
        [1; h]) with linear_before_reset, else Rn."""
        size = inputs.shape[0] // 3 * 2
        recurrence = rows[0].T  # [R | Rbn] with linear_before_reset, else R of z and r
        hidden = recurrence.shape[1] - self.ones_row
        gates = xp.concatenate([inputs[:size], recurrence[:size, :hidden]], axis=1)
        xn = xp.ascontiguousarray(inputs[size:])
        if self.ones_row:
            rn = xp.concatenate([recurrence[size:, hidden:], recurrence[size:, :hidden]], axis=1)
            return xp.ascontiguousarray(gates), xn, rn
        return xp.ascontiguousarray(gates), xn, xp.ascontiguousarray(rows[1].T)

    def loop(self, xp, walk, weights, others, scratch):
        if not walk.outputs:
            return ()
        hidden, batch = walk.outputs[0].shape
        dtype = walk.outputs[0].dtype
        block = scratch((4 * hidden, batch), dtype)
        x_n, zr, z, r, n = (
            block[:hidden],
            block[hidden : 3 * hidden],
            block[hidden : 2 * hidden],
            block[2 * hidden : 3 * hidden],
            block[3 * hidden :],
        )
        count = len(walk.outputs)
        if walk.projected is not None:
            products = [walk.gemm(xp, weights, 0, block[hidden:] if self.ones_row else zr)]
            inputs_n, candidate = walk.inputs(2 * hidden), 1
        else:
            size = walk.operands[0].shape[0] - hidden - 1
            products = [
                walk.gemm(xp, weights, 0, zr),
                walk.gemm(xp, weights, 1, x_n, walk.columns(0, size + 1)),
            ]
            if self.ones_row:
                products.append(walk.gemm(xp, weights, 2, n, walk.columns(size)))
            inputs_n, candidate = [x_n] * count, 2
        starts = _per_step(products)
        difference = scratch((hidden, batch), dtype)
        half = xp.asarray(SIGMOID_SCALE, dtype=dtype)  # a 0-d array: 0.5 µs less a call
        tanh, multiply, add, subtract = xp.tanh, xp.multiply, xp.add, xp.subtract
        steps = zip(
            starts, walk.inputs(0, 2 * hidden), inputs_n, walk.previous, walk.outputs,
            strict=True,
        )  # fmt: skip
        if self.ones_row:
            for start, x_zr, xn, h_in, h in steps:
                for product, a, b, target in start:
                    product(a, b, target)
                if x_zr is not None:
                    add(zr, x_zr, zr)
                tanh(zr, zr)
                multiply(zr, half, zr)
                add(zr, half, zr)
                multiply(n, r, n)
                add(n, xn, n)
                tanh(n, n)
                subtract(h_in, n, difference)
                multiply(difference, z, difference)
                add(n, difference, h)
            return ()
        reset = scratch((hidden, batch), dtype)
        operand = walk.operand(reset)
        product_n, left_n, right_n, target_n = walk.gemm(
            xp, weights, candidate, n, [operand] * count
        )
        for (start, x_zr, xn, h_in, h), a_n, b_n in zip(steps, left_n, right_n, strict=True):
            for product, a, b, target in start:
                product(a, b, target)
            if x_zr is not None:
                add(zr, x_zr, zr)
            tanh(zr, zr)
            multiply(zr, half, zr)
            add(zr, half, zr)
            multiply(r, h_in, reset)
            product_n(a_n, b_n, target_n)
            add(n, xn, n)
            tanh(n, n)
            subtract(h_in, n, difference)
            multiply(difference, z, difference)
            add(n, difference, h)
        return ()


def _per_step(products: list[tuple[Callable[..., Any], list, list, Any]]) -> list[tuple]:
    """Per step, the products that start it as (call, left, right, target) tuples, from
    `Walk.gemm`'s per-step operand lists of each."""
    each = [
        [(call, a, b, target) for a, b in zip(lefts, rights, strict=True)]
        for call, lefts, rights, target in products
    ]
    return list(zip(*each, strict=True))


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
