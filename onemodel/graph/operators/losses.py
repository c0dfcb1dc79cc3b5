"""Classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

Both pick, for every sample n and position d1…dk, the log-probability of its target class
from an (N, C, d1, …, dk) input, weight it by the class's weight, and reduce: `none` keeps the
(N, d1, …, dk) losses, `sum` adds them, `mean` divides that sum by the summed weights (the
number of counted samples without weights). Samples whose target is `ignore_index` count for
nothing; any other target outside [0, C) is refused. SoftmaxCrossEntropyLoss first takes the
log-softmax of its scores along the class axis, which it may also return.

float16 and bfloat16 are computed in float32 and rounded once at the end.

Exact mode computes in float64 from exactly widened values: the log-softmax as LogSoftmax's
recipe (the exact max, exp64, the ordered sum, log64), each loss −(log-probability · weight),
the `sum` the ordered float64 sum over (N, d1, …) in row-major order, the `mean` that divided
once by the ordered sum of the weights; every output rounded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.exact_arrays import exp64, log64, ordered_extremum, ordered_sum
from onemodel.backends.ieee_float32 import store, widen
from onemodel.graph.operators.axes import INDEX_TYPES
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.unary import FLOATS, IEEE_FLOATS

_REDUCTIONS = ("none", "sum", "mean")


class ClassLikelihoodLoss(Operator):
    """The shared part: attributes, shape checks and the weighted, reduced pick of the target
    classes' log-probabilities. Subclasses say from which opset bfloat16 is accepted and how
    input 0 becomes log-probabilities."""

    bfloat16_since: int
    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        reduction = node.attr("reduction", "mean")
        self.reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
        if self.reduction not in _REDUCTIONS:
            raise node.invalid(f"{node.op_type}: reduction must be one of {_REDUCTIONS}")
        ignore_index = node.attr("ignore_index", None)
        self.ignore_index = None if ignore_index is None else int(ignore_index)

    def loss_spec(self, ctx: InferContext) -> TensorSpec:
        """The loss output's spec, after checking the types and shapes of the inputs."""
        allowed = FLOATS if self.node.opset >= self.bfloat16_since else IEEE_FLOATS
        self.check_types(ctx, frozenset(allowed), 0, 2)
        self.check_types(ctx, INDEX_TYPES, 1)
        if ctx.has(2) and ctx.dtype(2) != ctx.dtype(0):
            raise self.node.invalid(
                f"{self.node.op_type} needs the weights of the input's type", self.node.inputs[2]
            )
        x, target = ctx.shape(0), ctx.shape(1)
        if len(x) < 2 or target != (x[0], *x[2:]):
            raise self.node.bad_input(
                f"{self.node.op_type}: input of shape {x} needs (N, C, d1, …) and a target of "
                f"shape (N, d1, …), not {target}",
                self.node.inputs[1],
            )
        if ctx.has(2) and ctx.shape(2) != (x[1],):
            raise self.node.bad_input(
                f"{self.node.op_type}: weights of shape {ctx.shape(2)} must be ({x[1]},), one "
                f"per class of the input of shape {x}",
                self.node.inputs[2],
            )
        return ctx.output(ctx.dtype(0), target if self.reduction == "none" else ())

    def reduce_loss(
        self, ctx: RunContext, log_prob: Array, target: Array, weight: Array | None, out: Array
    ) -> None:
        """Writes the (reduced) loss of `log_prob` (N, C, …) in the compute type into `out`
        (exact mode: log_prob is float64)."""
        xp = ctx.kernels.xp if ctx.exact else ctx.xp
        counted = xp.ones(target.shape, dtype=bool)
        if self.ignore_index is not None:
            counted = target != self.ignore_index
        classes = log_prob.shape[1]
        outside = counted & ((target < 0) | (target >= classes))
        if bool(outside.any()):  # one device-to-host sync per run, the price of the check
            first = int(ctx.kernels.memory.to_host(target[outside][:1])[0])
            raise self.node.bad_input(
                f"{self.node.op_type}: target class {first} is outside [0, {classes})",
                self.node.inputs[1],
            )
        safe = xp.where(counted, target, 0).astype(xp.int64)
        picked = xp.take_along_axis(log_prob, xp.expand_dims(safe, 1), axis=1)[:, 0]
        zero = log_prob.dtype.type(0)
        factor = counted.astype(log_prob.dtype)
        if weight is not None:
            weight = widen(xp, weight) if ctx.exact else weight.astype(log_prob.dtype)
            factor = xp.where(counted, weight[safe], zero)
        with np.errstate(all="ignore"):  # −inf log-probabilities and all-ignored means
            loss = xp.where(counted, -picked * factor, zero)
            if ctx.exact:
                self._reduce_exact(xp, loss, factor, out)
            elif self.reduction == "none":
                out[...] = loss
            elif self.reduction == "sum":
                out[...] = loss.sum()
            else:
                out[...] = loss.sum() / factor.sum()

    def _reduce_exact(self, xp: Any, loss: Array, factor: Array, out: Array) -> None:
        if self.reduction != "none":
            axes = tuple(range(loss.ndim))
            total = ordered_sum(xp, loss, axes)
            loss = total if self.reduction == "sum" else total / ordered_sum(xp, factor, axes)
        store(xp, out, loss)


def _compute_type(xp: Any, x: Array) -> Any:
    return xp.float64 if x.dtype == xp.float64 else xp.float32


class NegativeLogLikelihoodLossOp(ClassLikelihoodLoss):
    """The input already holds log-probabilities."""

    bfloat16_since = 22

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [self.loss_spec(ctx)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        x, target = inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else None
        if ctx.exact:
            log_prob = widen(ctx.kernels.xp, x)
        else:
            log_prob = x.astype(_compute_type(ctx.xp, x), copy=False)
        self.reduce_loss(ctx, log_prob, target, weight, outputs[0])


class SoftmaxCrossEntropyLossOp(ClassLikelihoodLoss):
    """Log-probabilities are the log-softmax of the scores along the class axis, computed as
    (x − max) − log Σ exp(x − max); the optional second output returns them."""

    bfloat16_since = 13

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        specs = [self.loss_spec(ctx)]
        if len(self.node.outputs) > 1:
            specs.append(ctx.output(ctx.dtype(0), ctx.shape(0)))
        return specs

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        xp, scores, target = ctx.xp, inputs[0], inputs[1]
        weight = inputs[2] if len(inputs) > 2 else None
        if ctx.exact:
            log_prob = self._exact_log_softmax(ctx.kernels.xp, scores)
            self.reduce_loss(ctx, log_prob, target, weight, outputs[0])
            if len(outputs) > 1:
                store(ctx.kernels.xp, outputs[1], log_prob)
            return
        log_prob = scores.astype(_compute_type(xp, scores))
        with np.errstate(all="ignore"):
            if log_prob.size:
                log_prob -= xp.max(log_prob, axis=1, keepdims=True)
                log_prob -= xp.log(xp.sum(xp.exp(log_prob), axis=1, keepdims=True))
        self.reduce_loss(ctx, log_prob, target, weight, outputs[0])
        if len(outputs) > 1:
            outputs[1][...] = log_prob

    @staticmethod
    def _exact_log_softmax(xp: Any, scores: Array) -> Array:
        """d − log64(ordered Σ exp64(d)) along axis 1, d = x − the exact max, in float64."""
        values = widen(xp, scores)
        if not values.size:
            return values
        with np.errstate(all="ignore"):
            values -= xp.expand_dims(ordered_extremum(xp, values, (1,), True), 1)
            total = xp.expand_dims(ordered_sum(xp, exp64(xp, values), (1,)), 1)
            values -= log64(xp, total)
        return values


DEFS: tuple[OpDef, ...] = (
    OpDef("NegativeLogLikelihoodLoss", 12, NegativeLogLikelihoodLossOp),
    OpDef("SoftmaxCrossEntropyLoss", 12, SoftmaxCrossEntropyLossOp),
)
