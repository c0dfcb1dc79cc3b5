"""Optimizer steps of the ai.onnx.preview.training domain: Adagrad, Adam and Momentum.

Each node updates one or more tensors at once. Its inputs are the learning rate R and the update
count T (scalars), then the tensors grouped by role: every X, then every gradient G, then every
tensor of each optimizer state (Adagrad: H; Adam: V, H; Momentum: V). Its outputs follow the
same grouping: every new X, then every new state tensor. The update is element-wise and the
same for each tensor; it is computed in the tensors' own type (float or double), one rounded
operation at a time, each an `xp` call (so exact mode's namespace keeps float32 subnormals on a
flushing library): a fixed sequence of correctly rounded operations, exact mode's definition
too, but for Adam's powers αᵀ and βᵀ, which exact mode takes as pow64 rounded once into the
type. G and the state tensors must have their X's shape (the spec's broadcasting would let a
state outgrow X).

Gradient, the domain's other operator, differentiates the graph around its node; it is
expanded into ordinary nodes before compiling (onemodel/graph/gradient.py), with the two internal
operators defined at the end of this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from onemodel.backends.exact_elementary import pow64
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.base import (
    INTERNAL_DOMAIN,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import DType

TRAINING_DOMAIN = "ai.onnx.preview.training"
_FLOATS = frozenset({DType.FLOAT, DType.DOUBLE})
_COUNT = frozenset({DType.INT64})


class TensorUpdate(NamedTuple):
    """One optimized tensor's share of a step, as `OptimizerStep.update` gets it: the array
    module, R and T (0-D, R in X's type), X, its gradient with norm_coefficient · X already
    added, its state tensors, and the arrays X_new and the new states are written into."""

    xp: Any
    rate: Array
    step: Array
    x: Array
    gradient: Array
    states: list[Array]
    outputs: list[Array]
    exact: bool = False

    def scalar(self, value: float) -> Any:
        """A number as a scalar of X's type, so that arithmetic stays in that type."""
        return self.x.dtype.type(value)


class OptimizerStep(Operator):
    """The shared part: grouping of the variadic inputs and outputs, their checks, and the
    scalar learning rate and update count. Subclasses name their state tensors and implement
    `update` for one optimized tensor."""

    supports_exact = True

    state_names: ClassVar[tuple[str, ...]]
    norm_coefficient_required: ClassVar[bool] = False  # else it defaults to 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if self.norm_coefficient_required:
            self.norm_coefficient = float(node.attr("norm_coefficient"))
        else:
            self.norm_coefficient = float(node.attr("norm_coefficient", 0.0))
        roles = 2 + len(self.state_names)  # X, G and the states
        tensors = len(node.inputs) - 2
        self.count = tensors // roles
        if tensors < roles or tensors % roles or len(node.outputs) != self.count * (roles - 1):
            states = ", ".join(self.state_names)
            raise node.invalid(
                f"{node.op_type} takes R, T and, for each of n tensors, X, G, {states} "
                f"(2 + {roles}·n inputs) and gives X_new, {states} updated ({roles - 1}·n "
                f"outputs), not {len(node.inputs)} inputs and {len(node.outputs)} outputs"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, _FLOATS, 0)
        self.check_types(ctx, _COUNT, 1)
        tensors = range(2, len(ctx.specs))
        self.check_types(ctx, _FLOATS, *tensors)
        dtype = ctx.dtype(2)
        for i in tensors:
            if ctx.dtype(i) != dtype:
                raise self.node.invalid(
                    f"{self.node.op_type} needs every optimized tensor, gradient and state of "
                    "one element type",
                    self.node.inputs[i],
                )
        for i in (0, 1):
            if int(np.prod(ctx.shape(i))) != 1:
                raise self.node.bad_input(
                    f"{self.node.op_type}: input {'RT'[i]} must be a scalar, not shape "
                    f"{ctx.shape(i)}",
                    self.node.inputs[i],
                )
        shapes = [ctx.shape(2 + k) for k in range(self.count)]
        for i in tensors:
            expected = shapes[(i - 2) % self.count]
            if ctx.shape(i) != expected:
                raise self.node.bad_input(
                    f"{self.node.op_type}: input {i} has shape {ctx.shape(i)}, not the shape "
                    f"{expected} of the tensor it belongs to",
                    self.node.inputs[i],
                )
        roles = 1 + len(self.state_names)
        return [ctx.output(dtype, shape) for _ in range(roles) for shape in shapes]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp = ctx.xp
        dtype = inputs[2].dtype
        rate = inputs[0].reshape(()).astype(dtype)
        step = inputs[1].reshape(())
        for k in range(self.count):
            x, gradient, *states = inputs[2 + k :: self.count]
            regularized = xp.add(gradient, xp.multiply(dtype.type(self.norm_coefficient), x))
            self.update(
                TensorUpdate(
                    xp, rate, step, x, regularized, states, outputs[k :: self.count], ctx.exact
                )
            )

    def update(self, t: TensorUpdate) -> None:
        """Writes X_new and the new states into `t.outputs`."""
        raise NotImplementedError


class AdagradOp(OptimizerStep):
    """X_new = X − r·G / (√H_new + ε) with H_new = H + G², r = R / (1 + T·decay_factor)."""

    state_names = ("H",)

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.decay_factor = float(node.attr("decay_factor", 0.0))
        self.epsilon = float(node.attr("epsilon", 1e-6))

    def update(self, t: TensorUpdate) -> None:
        xp, x, gradient, scalar = t.xp, t.x, t.gradient, t.scalar
        (h,) = t.states
        x_new, h_new = t.outputs
        xp.add(h, xp.multiply(gradient, gradient), out=h_new)
        decay = xp.multiply(t.step.astype(x.dtype), scalar(self.decay_factor))
        rate = xp.divide(t.rate, xp.add(scalar(1), decay))
        denominator = xp.add(xp.sqrt(h_new), scalar(self.epsilon))
        xp.subtract(x, xp.divide(xp.multiply(rate, gradient), denominator), out=x_new)


class AdamOp(OptimizerStep):
    """V and H are moving averages (weights alpha, beta) of G and G²; X moves by
    R·√(1 − betaᵀ)/(1 − alphaᵀ) · V_new / (√H_new + ε) (the bias correction only when T > 0),
    then shrinks by (1 − norm_coefficient_post)."""

    state_names = ("V", "H")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha", 0.9))
        self.beta = float(node.attr("beta", 0.999))
        self.epsilon = float(node.attr("epsilon", 1e-6))
        self.norm_coefficient_post = float(node.attr("norm_coefficient_post", 0.0))

    def update(self, t: TensorUpdate) -> None:
        xp, x, gradient, scalar = t.xp, t.x, t.gradient, t.scalar
        v, h = t.states
        x_new, v_new, h_new = t.outputs
        alpha, beta = scalar(self.alpha), scalar(self.beta)
        one = scalar(1)
        xp.add(xp.multiply(alpha, v), xp.multiply(one - alpha, gradient), out=v_new)
        squares = xp.multiply(gradient, gradient)
        xp.add(xp.multiply(beta, h), xp.multiply(one - beta, squares), out=h_new)
        counted = xp.maximum(t.step, 1).astype(x.dtype)  # T ≤ 0 takes R as it is
        with np.errstate(divide="ignore", invalid="ignore"):
            root = xp.sqrt(xp.subtract(one, self._power(t, self.beta, counted)))
            correction = xp.divide(root, xp.subtract(one, self._power(t, self.alpha, counted)))
        rate = xp.where(t.step > 0, xp.multiply(t.rate, correction), t.rate)
        step = xp.divide(v_new, xp.add(xp.sqrt(h_new), scalar(self.epsilon)))
        xp.subtract(x, xp.multiply(rate, step), out=x_new)
        xp.multiply(x_new, one - scalar(self.norm_coefficient_post), out=x_new)

    @staticmethod
    def _power(t: TensorUpdate, base: float, exponent: Array) -> Array:
        """baseᵀ in X's type: the library's power, or (exact mode) pow64 rounded once."""
        if not t.exact:
            return t.scalar(base) ** exponent
        xp = t.xp
        wide = pow64(xp, xp.asarray(float(t.scalar(base)), dtype=xp.float64), widen(xp, exponent))
        target = xp.empty(wide.shape, dtype=t.x.dtype)
        store(xp, target, wide)
        return target


class MomentumOp(OptimizerStep):
    """V_new = alpha·V + beta'·G (beta' = 1 at T = 0, else beta); standard mode moves X by
    −R·V_new, Nesterov's by −R·(G + alpha·V_new)."""

    state_names = ("V",)
    norm_coefficient_required = True
    _MODES = ("standard", "nesterov")

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.alpha = float(node.attr("alpha"))
        self.beta = float(node.attr("beta"))
        mode = node.attr("mode")
        self.mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if self.mode not in self._MODES:
            raise node.invalid(f"Momentum: mode must be one of {self._MODES}, not {self.mode!r}")

    def update(self, t: TensorUpdate) -> None:
        xp, x, gradient, scalar = t.xp, t.x, t.gradient, t.scalar
        (v,) = t.states
        x_new, v_new = t.outputs
        alpha = scalar(self.alpha)
        beta = xp.where(t.step > 0, scalar(self.beta), scalar(1)).astype(x.dtype)
        xp.add(xp.multiply(alpha, v), xp.multiply(beta, gradient), out=v_new)
        direction = v_new
        if self.mode == "nesterov":
            direction = xp.add(gradient, xp.multiply(alpha, v_new))
        xp.subtract(x, xp.multiply(t.rate, direction), out=x_new)


class OnesLikeOp(Operator):
    """Internal (Gradient's seed): ones of the input's type and shape."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        outputs[0][...] = 1


class SumToShapeOp(Operator):
    """Internal (Gradient): input 0 summed over the axes on which it broadcast from input 1's
    shape, giving input 1's shape; undoes NumPy broadcasting in a backward pass."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        grown, like = ctx.shape(0), ctx.shape(1)
        lead = len(grown) - len(like)
        if lead < 0 or any(n not in (1, g) for n, g in zip(like, grown[lead:], strict=True)):
            raise self.node.bad_input(f"cannot sum shape {grown} back to {like}")
        return [ctx.output(ctx.dtype(0), like)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        grown, out = inputs[0], outputs[0]
        lead = grown.ndim - out.ndim
        axes = tuple(range(lead)) + tuple(
            lead + i for i, n in enumerate(out.shape) if n == 1 and grown.shape[lead + i] != 1
        )
        out[...] = ctx.xp.sum(grown, axis=axes).reshape(out.shape) if axes else grown


DEFS: tuple[OpDef, ...] = (
    OpDef("Adagrad", 1, AdagradOp, domain=TRAINING_DOMAIN),
    OpDef("Adam", 1, AdamOp, domain=TRAINING_DOMAIN),
    OpDef("Momentum", 1, MomentumOp, domain=TRAINING_DOMAIN),
    OpDef("OnesLike", 1, OnesLikeOp, domain=INTERNAL_DOMAIN),
    OpDef("SumToShape", 1, SumToShapeOp, domain=INTERNAL_DOMAIN),
)
