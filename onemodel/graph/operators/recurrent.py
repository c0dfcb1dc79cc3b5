"""Recurrent layers RNN, GRU and LSTM: one layer over a sequence, forward, reverse or both.

The three share everything but the cell equations (`Recurrent.step`): the input projection
X·Wᵀ + Wb of every time step is one matrix product per direction; the recurrence is a Python
loop over the time steps, vectorised over batch and hidden units. Work is in float32 (float64
for double inputs), float16 and bfloat16 rounded once into the outputs.

Exact mode computes everything in float64 (inputs widened exactly): every matrix product by
exact_matmul_arrays of its operands rounded to float32 (the state h rounds there; X, W and R
are float32 values already), each element rounded once into float32 and widened
(`float32_product`: order-free, so BLAS speed; float64 layers keep the ordered float64
product), the activations by their exact float64 formulas (exact_activations.py), the sums and
products of the cell equations as written below, each one correctly rounded float64 operation
in that order; Y, Y_h and Y_c are rounded once from the float64 states, which carry over from
step to step unrounded. With the default activations (LSTM: and no peepholes or input_forget)
the same bits come from a fused loop (`exact_loop`: backends/exact_recurrent.py), whose cost is
its number of array calls.

`sequence_lens` gives each batch entry its own length L ≤ seq_length: its steps from L on are
zero in Y and leave the state alone, so Y_h (and Y_c) hold the state after its last valid step
(the initial state when L = 0). A reverse direction runs from step L - 1 down to 0.

Outputs are Y [T, D, B, H], Y_h and Y_c [D, B, H] (layout 1, opset 14 on: X is [B, T, I], Y
[B, T, D, H], the states and initial states [B, D, H]). An output the node does not name is
stated as an empty array and never computed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from onemodel.backends import exact_activations
from onemodel.backends import recurrent as recurrent_cells
from onemodel.backends.exact_elementary import expm1_64, sigmoid_and_tanh64, tanh64
from onemodel.backends.exact_gemm import ExactOperand
from onemodel.backends.exact_recurrent import (
    GRU_BLOCKS,
    LSTM_BLOCKS,
    RNN_BLOCKS,
    ExactGRU,
    ExactLSTM,
    ExactRNN,
    loop_matrix,
)
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.exact_products import exact_product, float32_operand, float32_product
from onemodel.graph.operators.prepared import PreparesConstants
from onemodel.tensors import DType

_TYPES = frozenset({DType.FLOAT16, DType.FLOAT, DType.DOUBLE})
_TYPES_22 = _TYPES | {DType.BFLOAT16}
_LENGTH_TYPES = frozenset({DType.INT32})

# Input positions shared by the three operators (LSTM adds initial_c and P).
_X, _W, _R, _B, _LENGTHS, _INITIAL_H, _INITIAL_C, _P = range(8)

Formula = Callable[[Any, Array, float, float], Array]


def _sigmoid(xp: Any, x: Array, alpha: float, beta: float) -> Array:
    return 1.0 / (1.0 + xp.exp(-x))


# name (lower case) → (formula, default alpha or None when unused, default beta or None).
# Defaults are those of the ONNX operators of the same name, as the spec says (onnxruntime
# uses 0 where it has none of its own: models relying on that pass the values explicitly).
_ACTIVATIONS: dict[str, tuple[Formula, float | None, float | None]] = {
    "relu": (lambda xp, x, a, b: xp.maximum(x, 0.0), None, None),
    "tanh": (lambda xp, x, a, b: xp.tanh(x), None, None),
    "sigmoid": (_sigmoid, None, None),
    "affine": (lambda xp, x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda xp, x, a, b: xp.where(x > a, x, 0.0), 1.0, None),
    "scaledtanh": (lambda xp, x, a, b: a * xp.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda xp, x, a, b: xp.clip(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda xp, x, a, b: xp.where(x >= 0, x, a * xp.expm1(x)), 1.0, None),
    "softsign": (lambda xp, x, a, b: x / (1.0 + xp.absolute(x)), None, None),
    "softplus": (lambda xp, x, a, b: xp.logaddexp(x, 0.0), None, None),
}
# Exact mode's float64 formulas of the same functions.
_EXACT_ACTIVATIONS: dict[str, Formula] = {
    "relu": lambda xp, x, a, b: xp.maximum(x, 0.0),
    "tanh": lambda xp, x, a, b: tanh64(xp, x),
    "sigmoid": lambda xp, x, a, b: exact_activations.sigmoid(xp, x),
    "affine": lambda xp, x, a, b: x * a + b,
    "leakyrelu": lambda xp, x, a, b: exact_activations.leaky_relu(xp, x, a),
    "thresholdedrelu": lambda xp, x, a, b: exact_activations.thresholded_relu(xp, x, a),
    "scaledtanh": lambda xp, x, a, b: tanh64(xp, x * b) * a,
    "hardsigmoid": lambda xp, x, a, b: exact_activations.hard_sigmoid(xp, x, a, b),
    "elu": lambda xp, x, a, b: xp.where(x >= 0, x, expm1_64(xp, x) * a),
    "softsign": lambda xp, x, a, b: exact_activations.softsign(xp, x),
    "softplus": lambda xp, x, a, b: exact_activations.softplus(xp, x),
}


@dataclass(frozen=True, slots=True)
class Activation:
    """One activation function of a direction, with the alpha and beta it consumed."""

    formula: Formula
    alpha: float
    beta: float
    exact_formula: Formula

    def __call__(self, xp: Any, x: Array) -> Array:
        return self.formula(xp, x, self.alpha, self.beta)

    def exact(self) -> Activation:
        """The same function by its exact float64 formula."""
        return Activation(self.exact_formula, self.alpha, self.beta, self.exact_formula)


def _as_given(operand: Array) -> Array:
    """Fast mode's `prepare`: the operand as it is."""
    return operand


@dataclass(frozen=True, slots=True)
class DirectionWeights:
    """What one direction's steps read: Rᵀ, the recurrence bias Rb and the peepholes P, and
    the matrix product to use (exact mode's, or the library's)."""

    recurrence: Array  # [H, gates·H], or its prepared exact operand (exact mode)
    bias: Array  # [gates·H]
    peepholes: Array | None  # [3·H] (LSTM only)
    activations: tuple[Activation, ...]
    matmul: Callable[[Array, Array], Array]
    # Exact mode with the default activations and no clip (`fusable`): a step may evaluate
    # several of them in one call of the same bits (sigmoid_and_tanh64).
    exact_defaults: bool = False
    # A constant right operand of `matmul` made ready once (exact mode's prepared form).
    prepare: Callable[[Array], Any] = _as_given
    # Exact mode with constant weights, prepared once per plan (`ExactWeights`): Wᵀ as
    # `matmul`'s operand, and R as the fused loop's (`Recurrent.exact_loop_matrix`).
    inputs: Any = None
    loop: Any = None


@dataclass(frozen=True, slots=True)
class ExactWeights:
    """One direction's constant weights in exact mode, prepared once per plan: Wᵀ and Rᵀ as
    `float32_product`'s operands, and Rᵀ as the fused loop's (None where it has none)."""

    inputs: Any
    recurrence: Any
    loop: Any


def _optional(inputs: Sequence[Array | None], index: int) -> Array | None:
    """An optional input: None when absent or left off the end of the node's inputs."""
    return inputs[index] if index < len(inputs) else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Recurrent(PreparesConstants):
    """The shared layer: attributes, shapes, the projection and the loop over time steps.

    With the default activations and no clip in fast mode (`fusable`), constant weights are
    prepared once per plan into the layout of the fused cells (backends/recurrent.py)."""

    supports_exact = True

    def bias_outside(self, size: int) -> int:
        """How many leading columns of Rb join X·Wᵀ + Wb once before the time loop (`step`
        then leaves them out): those that sit in a plain sum with it."""
        return size

    gates: ClassVar[int]  # blocks of H rows in W and R
    default_activations: ClassVar[tuple[str, ...]]  # one direction's
    states: ClassVar[int] = 1  # state tensors carried from step to step (h, and c for LSTM)
    cells: recurrent_cells.Cells  # the fused time loop (`fusable`, fast mode)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        direction = _text(node.attr("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            raise node.invalid(
                f"{node.op_type} direction '{direction}' is not one of forward, reverse, "
                "bidirectional"
            )
        self.directions = 2 if direction == "bidirectional" else 1
        self.reverse = direction == "reverse"
        self.hidden_size: int | None = node.attr("hidden_size", None)
        if self.hidden_size is not None and self.hidden_size <= 0:
            raise node.invalid(
                f"{node.op_type} hidden_size must be positive, got {self.hidden_size}"
            )
        clip = node.attr("clip", None)
        if clip is not None and not clip > 0:
            raise node.invalid(f"{node.op_type} clip must be positive, got {clip}")
        self.clip: float | None = None if clip is None else float(clip)
        self.layout = int(node.attr("layout", 0)) if node.opset >= 14 else 0
        if self.layout not in (0, 1):
            raise node.invalid(f"{node.op_type} layout must be 0 or 1, got {self.layout}")
        self.activations = self._activations(node)
        self.wanted = tuple(bool(name) for name in node.outputs)
        # The default activations without clip run through the fused cells of
        # backends/recurrent.py in fast mode.
        names = [_text(n).lower() for n in node.attr("activations", ())]
        defaults = [a.lower() for a in self.default_activations]
        self.fusable = self.clip is None and all(
            names[k : k + len(defaults)] == defaults for k in range(0, len(names), len(defaults))
        )

    def _activations(self, node: NodeInfo) -> tuple[tuple[Activation, ...], ...]:
        """Per direction; alphas and betas are consumed in order by the functions that use
        them. A two-direction list given to a one-direction layer keeps its forward half (the
        RNN schema's own default lists two)."""
        per_direction = len(self.default_activations)
        names = [_text(n) for n in node.attr("activations", ())]
        names = names or list(self.default_activations) * self.directions
        if self.directions == 1 and len(names) == 2 * per_direction:
            names = names[:per_direction]
        if len(names) != per_direction * self.directions:
            raise node.invalid(
                f"{node.op_type} needs {per_direction * self.directions} activations for "
                f"{self.directions} direction(s), got {len(names)}"
            )
        alphas = iter(float(a) for a in node.attr("activation_alpha", ()))
        betas = iter(float(b) for b in node.attr("activation_beta", ()))
        functions = []
        for name in names:
            entry = _ACTIVATIONS.get(name.lower())
            if entry is None:
                raise node.invalid(f"{node.op_type} has an unknown activation '{name}'")
            formula, alpha, beta = entry
            alpha = 0.0 if alpha is None else next(alphas, alpha)
            beta = 0.0 if beta is None else next(betas, beta)
            functions.append(Activation(formula, alpha, beta, _EXACT_ACTIVATIONS[name.lower()]))
        return tuple(
            tuple(functions[d * per_direction : (d + 1) * per_direction])
            for d in range(self.directions)
        )

    # -- shapes ---------------------------------------------------------------------------------

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        types = _TYPES_22 if self.node.opset >= 22 else _TYPES
        tensors = [i for i in (_X, _W, _R, _B, _INITIAL_H, _INITIAL_C, _P) if i < len(ctx)]
        self.check_types(ctx, types, *tensors)
        check_same_type(ctx, tensors)
        self.check_types(ctx, _LENGTH_TYPES, _LENGTHS)
        x = ctx.shape(_X)
        if len(x) != 3:
            raise self.node.bad_input(
                f"{self.node.op_type} input X must have rank 3, got shape {x}", self.node.inputs[_X]
            )
        steps, batch = (x[0], x[1]) if self.layout == 0 else (x[1], x[0])
        r = ctx.shape(_R)
        hidden = self.hidden_size if self.hidden_size is not None else (r[-1] if r else 0)
        d, g = self.directions, self.gates
        self._expect(ctx, _W, (d, g * hidden, x[2]))
        self._expect(ctx, _R, (d, g * hidden, hidden))
        self._expect(ctx, _B, (d, 2 * g * hidden))
        self._expect(ctx, _LENGTHS, (batch,))
        self._expect(ctx, _P, (d, 3 * hidden))
        state = (d, batch, hidden) if self.layout == 0 else (batch, d, hidden)
        for index in (_INITIAL_H, _INITIAL_C)[: self.states]:
            self._expect(ctx, index, state)
        y = (steps, d, batch, hidden) if self.layout == 0 else (batch, steps, d, hidden)
        dtype = ctx.dtype(_X)
        shapes = (y, *([state] * self.states))
        return [
            ctx.output(dtype, shape if wanted else (0,))
            for shape, wanted in zip(shapes, self.wanted, strict=False)
        ]

    def _expect(self, ctx: InferContext, index: int, shape: tuple[int, ...]) -> None:
        if ctx.has(index) and ctx.shape(index) != shape:
            name = self.node.inputs[index]
            raise self.node.bad_input(
                f"{self.node.op_type} input '{name}' must have shape {shape}, got "
                f"{ctx.shape(index)}",
                name,
            )

    # -- running --------------------------------------------------------------------------------

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """The fused cells' weights of every direction, when W, R and B (if named) are
        constants and the fused cells can run: fast mode, `fusable`, no peepholes."""
        needed = [_W, _R] + ([_B] if self._named(_B) else [])
        if ctx.exact:
            return self._exact_weights(ctx, constants)
        if (
            not self.fusable
            or self._named(_P)
            or any(_optional(constants, i) is None for i in needed)
        ):
            return None
        cast = _Cast(ctx.xp.float64 if constants[_W].dtype == ctx.xp.float64 else ctx.xp.float32)
        return self._layer_weights(ctx.xp, constants, cast)

    def _exact_weights(
        self, ctx: RunContext, constants: Sequence[Array | None]
    ) -> tuple[ExactWeights, ...] | None:
        """Exact mode's operands of constant W and R (float32 products: not float64)."""
        w, r = _optional(constants, _W), _optional(constants, _R)
        if w is None or r is None or w.dtype == ctx.kernels.xp.float64:
            return None
        xp = ctx.kernels.xp
        prepared = []
        for d in range(self.directions):
            inputs = float32_operand(ctx.kernels, widen(xp, w[d]).T)
            recurrence = float32_operand(ctx.kernels, widen(xp, r[d]).T)
            loop = self.exact_loop_matrix(xp, recurrence)
            prepared.append(ExactWeights(inputs, recurrence, loop))
        return tuple(prepared)

    def exact_loop_matrix(self, xp: Any, recurrence: ExactOperand) -> Any:
        """Rᵀ prepared as `exact_loop` multiplies it (once per plan), or None where the fused
        loop cannot run: not `fusable`, peepholes, a non-finite R."""
        if not self.fusable or self._named(_P) or recurrence.values is not None:
            return None
        return self.loop_matrices(xp, recurrence)

    def loop_matrices(self, xp: Any, recurrence: ExactOperand) -> Any:
        """A finite prepared Rᵀ as the fused loop multiplies it (`loop_matrix`)."""
        raise NotImplementedError

    def loop_cells(self, xp: Any, matrices: Any, batch: int, weights: DirectionWeights) -> Any:
        """The fused loop of one direction and run (backends/exact_recurrent.py)."""
        raise NotImplementedError

    def _named(self, index: int) -> bool:
        """Whether the node names input `index` (an optional input may be left out)."""
        return index < len(self.node.inputs) and bool(self.node.inputs[index])

    def _layer_weights(
        self, xp: Any, inputs: Sequence[Array | None], cast: Callable[[Array], Array]
    ) -> recurrent_cells.LayerWeights:
        directions = tuple(self._cell_weights(xp, inputs, d, cast) for d in range(self.directions))
        return recurrent_cells.LayerWeights(self.cells, directions)

    def _cell_weights(
        self, xp: Any, inputs: Sequence[Array | None], d: int, cast: Callable[[Array], Array]
    ) -> recurrent_cells.CellWeights:
        w, r = cast(inputs[_W][d]), cast(inputs[_R][d])
        bias = _optional(inputs, _B)
        size = r.shape[0]
        wb, rb = (
            (xp.zeros(size, dtype=w.dtype),) * 2
            if bias is None
            else (cast(bias[d, :size]), cast(bias[d, size:]))
        )
        return self.cells.prepare(xp, w, r, wb, rb)

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        x = inputs[_X]
        work = xp.float64 if x.dtype == xp.float64 or ctx.exact else xp.float32
        cast = _ExactCast(xp) if ctx.exact else _Cast(work)
        x = cast(x if self.layout == 0 else x.transpose(1, 0, 2))
        lengths = self._lengths(_optional(inputs, _LENGTHS), x.shape[0])
        y = self._time_major(outputs, 0, (1, 2, 0, 3))
        finals = [self._time_major(outputs, k, (1, 0, 2)) for k in range(1, 1 + self.states)]
        matmul, prepare = xp.matmul, None
        if ctx.exact and inputs[_X].dtype == xp.float64:  # products not exact in float64
            matmul = functools.partial(exact_product, ctx.kernels)
        elif ctx.exact:
            matmul = functools.partial(float32_product, ctx.kernels)
            prepare = functools.partial(float32_operand, ctx.kernels)
        fused = (
            not ctx.exact
            and self.fusable
            and _optional(inputs, _P) is None
            and (lengths is None or not lengths.size or int(lengths.min()) == x.shape[0])
        )
        with quiet():
            # Both directions of one batch entry in one loop (`Cells.run_both`).
            joint = (
                fused
                and self.directions == 2
                and x.shape[1] == 1
                and self.cells.joins(inputs[_R].shape[2], x.dtype.itemsize)
                and not self.cells.compiles(ctx.kernels, x.dtype)
            )
            both = self._run_fused_both(ctx, prepared, inputs, x, y, cast) if joint else None
            for d in range(self.directions):
                if both is not None:
                    state = both[d]
                elif fused:
                    state = self._run_fused(ctx, prepared, inputs, x, d, y, cast)
                else:
                    exact = prepared[d] if ctx.exact and prepared is not None else None
                    weights = self._direction(
                        xp, inputs, d, cast, matmul, ctx.exact, prepare, exact
                    )
                    state = self._run_direction(ctx, inputs, x, d, lengths, y, weights, cast)
                for final, value in zip(finals, state, strict=True):
                    if final is not None:
                        store(xp, final[d], value)

    def _run_direction(
        self,
        ctx: RunContext,
        inputs: Sequence[Array | None],
        x: Array,
        d: int,
        lengths: Array | None,
        y: Array | None,
        weights: DirectionWeights,
        cast: Callable[[Array], Array],
    ) -> tuple[Array, ...]:
        """Direction d over time-major x ([T, B, I], working type), writing y[:, d] when wanted;
        returns the final state."""
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        steps, batch, hidden = x.shape[0], x.shape[1], inputs[_R].shape[2]
        size = self.gates * hidden
        if ctx.exact:  # one product of every step's rows, as a 2-D product
            rows = x.reshape(steps * batch, x.shape[2])
            operand = weights.inputs
            if operand is None:
                operand = weights.prepare(cast(inputs[_W][d]).T)
            projected = weights.matmul(rows, operand)
            projected = projected.reshape(steps, batch, size)
        else:
            # One GEMM over every time step (a [T, B, I] operand would make T products), into
            # the run's scratch: a fresh array of this size (1.6 MB for 100 steps of 8 × 4·128)
            # costs its page faults in every run.
            projected = ctx.scratch((steps, batch, size), x.dtype)
            xp.matmul(
                x.reshape(steps * batch, x.shape[2]),
                cast(inputs[_W][d]).T,
                out=projected.reshape(-1, size),
            )
        bias = _optional(inputs, _B)
        if bias is not None:
            projected += cast(bias[d, :size])
        outside = self.bias_outside(size)
        projected[..., :outside] += weights.bias[:outside]  # once, not once per step
        state = tuple(
            self._initial(xp, _optional(inputs, index), d, batch, hidden, cast, x.dtype)
            for index in (_INITIAL_H, _INITIAL_C)[: self.states]
        )
        backward = self.reverse or d == 1
        if ctx.exact and (lengths is None or not lengths.size or int(lengths.min()) == steps):
            target = None if y is None else y[:, d]
            fused = self.exact_loop(xp, projected, state, weights, backward, target)
            if fused is not None:
                return fused
        for t in range(steps - 1, -1, -1) if backward else range(steps):
            new = self.step(xp, projected[t], state, weights)
            if lengths is None:
                state, emitted = new, new[0]
            else:
                valid = lengths > t
                state = tuple(xp.where(valid, n, s) for n, s in zip(new, state, strict=True))
                emitted = xp.where(valid, new[0], 0.0)
            if y is not None:
                store(xp, y[t, d], emitted)
        return state

    def exact_loop(
        self,
        xp: Any,
        projected: Array,
        state: tuple[Array, ...],
        weights: DirectionWeights,
        backward: bool,
        y: Array | None,
    ) -> tuple[Array, ...] | None:
        """Exact mode's fused time loop, the same bits as `step` step by step in fewer array
        calls (backends/exact_recurrent.py), or None: run `step` instead. It runs with the
        default activations, no clip, no peepholes and float32 products of a finite R."""
        recurrence = weights.recurrence
        if (
            not weights.exact_defaults
            or weights.peepholes is not None
            or not isinstance(recurrence, ExactOperand)
            or recurrence.values is not None
        ):
            return None
        matrices = weights.loop if weights.loop is not None else self.loop_matrices(xp, recurrence)
        cells = self.loop_cells(xp, matrices, state[0].shape[0], weights)
        return cells.run(projected, state, backward, y)

    def _run_fused(
        self,
        ctx: RunContext,
        prepared: Any,
        inputs: Sequence[Array | None],
        x: Array,
        d: int,
        y: Array | None,
        cast: Callable[[Array], Array],
    ) -> tuple[Array, ...]:
        """Direction d by the fused cells, from the prepared weights (or weights prepared now
        when they are not constants)."""
        xp = ctx.xp
        weights = (
            prepared.directions[d]
            if prepared is not None
            else self._cell_weights(xp, inputs, d, cast)
        )
        batch, hidden = x.shape[1], inputs[_R].shape[2]
        initial = [
            self._initial(xp, _optional(inputs, index), d, batch, hidden, cast, x.dtype)
            for index in (_INITIAL_H, _INITIAL_C)[: self.states]
        ]
        backward = self.reverse or d == 1
        target = None if y is None else y[:, d]
        return self.cells.run(
            xp, x, weights, initial, target, backward, ctx.scratch, kernels=ctx.kernels
        )

    def _run_fused_both(
        self,
        ctx: RunContext,
        prepared: Any,
        inputs: Sequence[Array | None],
        x: Array,
        y: Array | None,
        cast: Callable[[Array], Array],
    ) -> tuple[tuple[Array, ...], ...]:
        """Both directions over one batch entry in one loop (`Cells.run_both`), writing y
        [T, 2, 1, H] when wanted; returns each direction's final states."""
        xp = ctx.xp
        layer = prepared if prepared is not None else self._layer_weights(xp, inputs, cast)
        hidden = inputs[_R].shape[2]
        initial = [
            [
                self._initial(xp, _optional(inputs, index), d, 1, hidden, cast, x.dtype)
                for index in (_INITIAL_H, _INITIAL_C)[: self.states]
            ]
            for d in range(2)
        ]
        return self.cells.run_both(xp, x, layer.joint, initial, y, ctx.scratch)

    def _lengths(self, lengths: Array | None, steps: int) -> Array | None:
        """Per batch entry as a [B, 1] column; refused outside [0, seq_length]."""
        if lengths is None:
            return None
        if lengths.size and (int(lengths.min()) < 0 or int(lengths.max()) > steps):
            raise self.node.bad_input(
                f"{self.node.op_type} sequence_lens must lie in [0, {steps}]",
                self.node.inputs[_LENGTHS],
            )
        return lengths.reshape(-1, 1)

    def _time_major(self, outputs: Any, index: int, axes: tuple[int, ...]) -> Array | None:
        """A wanted output as a view with the direction (and time) axes first."""
        if index >= len(self.wanted) or not self.wanted[index]:
            return None
        return outputs[index] if self.layout == 0 else outputs[index].transpose(axes)

    def _initial(
        self,
        xp: Any,
        given: Array | None,
        d: int,
        batch: int,
        hidden: int,
        cast: Callable[[Array], Array],
        work: Any,
    ) -> Array:
        if given is None:
            return xp.zeros((batch, hidden), dtype=work)
        return cast(given[d] if self.layout == 0 else given[:, d])

    def _direction(
        self,
        xp: Any,
        inputs: Sequence[Array | None],
        d: int,
        cast: Callable[[Array], Array],
        matmul: Callable[[Array, Array], Array],
        exact: bool,
        prepare: Callable[[Array], Any] | None = None,
        prepared: ExactWeights | None = None,
    ) -> DirectionWeights:
        """What direction d's steps read; `prepare` makes Rᵀ a constant exact operand once
        (`prepared`: once per plan)."""
        size = self.gates * inputs[_R].shape[2]
        bias = _optional(inputs, _B)
        peepholes = _optional(inputs, _P)
        activations = self.activations[d]
        if prepared is not None:  # exact mode's constant R, prepared once per plan
            operand, work = prepared.recurrence, xp.float64
        else:
            recurrence = cast(inputs[_R][d])
            operand = recurrence.T if prepare is None else prepare(recurrence.T)
            work = recurrence.dtype
        return DirectionWeights(
            operand,
            xp.zeros(size, dtype=work) if bias is None else cast(bias[d, size:]),
            None if peepholes is None else cast(peepholes[d]),
            tuple(a.exact() for a in activations) if exact else activations,
            matmul,
            exact and self.fusable,
            prepare or _as_given,
            None if prepared is None else prepared.inputs,
            None if prepared is None else prepared.loop,
        )

    def clipped(self, xp: Any, x: Array) -> Array:
        """The `clip` attribute bounds every activation's input."""
        return x if self.clip is None else xp.clip(x, -self.clip, self.clip)

    def step(
        self, xp: Any, projected: Array, state: tuple[Array, ...], weights: DirectionWeights
    ) -> tuple[Array, ...]:
        """The new state from the state and this step's X·Wᵀ + Wb ([B, gates·H])."""
        raise NotImplementedError


class RNNOp(Recurrent):
    """Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)."""

    gates = 1
    default_activations = ("Tanh",)
    cells = recurrent_cells.RNNCells()

    def step(
        self, xp: Any, projected: Array, state: tuple[Array, ...], weights: DirectionWeights
    ) -> tuple[Array, ...]:
        (h,) = state
        (f,) = weights.activations
        return (f(xp, self.clipped(xp, projected + weights.matmul(h, weights.recurrence))),)

    def loop_matrices(self, xp: Any, recurrence: ExactOperand) -> Any:
        return loop_matrix(xp, recurrence, RNN_BLOCKS)

    def loop_cells(self, xp: Any, matrices: Any, batch: int, weights: DirectionWeights) -> Any:
        return ExactRNN(xp, matrices, batch)


class GRUOp(Recurrent):
    """Gates z, r, h; `linear_before_reset` (opset 3 on) applies r after the recurrence."""

    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.linear_before_reset = node.opset >= 3 and bool(node.attr("linear_before_reset", 0))
        self.cells = recurrent_cells.GRUCells(self.linear_before_reset)

    def bias_outside(self, size: int) -> int:
        """All of Rb but, with linear_before_reset, the hidden gate's, which r multiplies."""
        return 2 * size // 3 if self.linear_before_reset else size

    def step(
        self, xp: Any, projected: Array, state: tuple[Array, ...], weights: DirectionWeights
    ) -> tuple[Array, ...]:
        (h,) = state
        f, g = weights.activations
        size = h.shape[1]
        recurrence = weights.recurrence
        if self.linear_before_reset:
            products = weights.matmul(h, recurrence)  # the three gates' H·Rᵀ in one product
            zr = f(xp, self.clipped(xp, projected[:, : 2 * size] + products[:, : 2 * size]))
            z, r = zr[:, :size], zr[:, size:]
            hidden = r * (products[:, 2 * size :] + weights.bias[2 * size :])
        else:
            gates = projected[:, : 2 * size] + weights.matmul(h, recurrence[:, : 2 * size])
            zr = f(xp, self.clipped(xp, gates))
            z, r = zr[:, :size], zr[:, size:]
            hidden = weights.matmul(r * h, recurrence[:, 2 * size :])
        candidate = g(xp, self.clipped(xp, projected[:, 2 * size :] + hidden))
        return (candidate + z * (h - candidate),)  # (1 − z)·candidate + z·h

    def loop_matrices(self, xp: Any, recurrence: ExactOperand) -> Any:
        """One Rᵀ with linear_before_reset; else R_zrᵀ and R_hᵀ, the two products' operands."""
        if self.linear_before_reset:
            return (loop_matrix(xp, recurrence, GRU_BLOCKS),)
        return tuple(loop_matrix(xp, recurrence, part) for part in (GRU_BLOCKS[:2], GRU_BLOCKS[2:]))

    def loop_cells(self, xp: Any, matrices: Any, batch: int, weights: DirectionWeights) -> Any:
        hidden = weights.bias.shape[0] // 3
        bias = weights.bias[2 * hidden :] if self.linear_before_reset else None
        return ExactGRU(xp, matrices, batch, bias)


class LSTMOp(Recurrent):
    """Gates i, o, f, c with optional peepholes P (i, o, f); `input_forget` couples f = 1 - i."""

    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    states = 2
    cells = recurrent_cells.LSTMCells()

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.input_forget = bool(node.attr("input_forget", 0))
        self.fusable = self.fusable and not self.input_forget

    def loop_matrices(self, xp: Any, recurrence: ExactOperand) -> Any:
        return loop_matrix(xp, recurrence, LSTM_BLOCKS)

    def loop_cells(self, xp: Any, matrices: Any, batch: int, weights: DirectionWeights) -> Any:
        return ExactLSTM(xp, matrices, batch)

    def step(
        self, xp: Any, projected: Array, state: tuple[Array, ...], weights: DirectionWeights
    ) -> tuple[Array, ...]:
        h, c = state
        f, g, activation_h = weights.activations
        size = h.shape[1]
        gates = projected + weights.matmul(h, weights.recurrence)
        p = weights.peepholes
        if p is None and not self.input_forget:
            # i, o and f are adjacent and take the same function: one call for the three.
            if weights.exact_defaults:
                iof, cell = sigmoid_and_tanh64(xp, gates, 3 * size)
            else:
                iof = f(xp, self.clipped(xp, gates[:, : 3 * size]))
                cell = g(xp, self.clipped(xp, gates[:, 3 * size :]))
            i, o, forget = (iof[:, k * size : (k + 1) * size] for k in range(3))
            c = forget * c + i * cell
            return o * activation_h(xp, c), c
        i, o, forget, cell = (gates[:, k * size : (k + 1) * size] for k in range(4))
        if p is not None:
            i = i + p[:size] * c
            forget = forget + p[2 * size :] * c
        i = f(xp, self.clipped(xp, i))
        forget = 1.0 - i if self.input_forget else f(xp, self.clipped(xp, forget))
        c = forget * c + i * g(xp, self.clipped(xp, cell))
        if p is not None:
            o = o + p[size : 2 * size] * c
        o = f(xp, self.clipped(xp, o))
        return o * activation_h(xp, c), c


class _Cast:
    """Fast mode's conversion into the working type."""

    def __init__(self, work: Any) -> None:
        self.work = work

    def __call__(self, array: Array) -> Array:
        return array.astype(self.work, copy=False)


class _ExactCast:
    """Exact mode's: float64, float32 subnormals kept on a flushing backend."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp

    def __call__(self, array: Array) -> Array:
        return widen(self.xp, array)


DEFS: tuple[OpDef, ...] = (
    OpDef("RNN", 1, RNNOp),
    OpDef("GRU", 1, GRUOp),
    OpDef("LSTM", 1, LSTMOp),
)
