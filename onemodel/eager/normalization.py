"""Layer normalisation over the last axis, and its gradient (seed 002 §8's convention).

The record keeps the normalised rows x̂ and the inverse standard deviation 1/σ as owned slots
plus the scale γ, and ε in Floats. Every step is a correctly rounded operation or an ordered
sum, so it is exact in exact mode.
"""

from __future__ import annotations

from onemodel.backends import BinaryOp, UnaryOp
from onemodel.eager import calls
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor, TensorShapeError


def layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
    """(x − mean) / √(var + ε) · weight + bias per row of the last axis (biased variance)."""
    width = x.shape[-1] if x.rank else 0
    if not width or weight.shape != (width,) or bias.shape != (width,):
        raise TensorShapeError(
            f"layer_norm needs rows of width D ≥ 1 with weight and bias of shape (D,): x "
            f"{x.shape}, weight {weight.shape}, bias {bias.shape}"
        )
    rows = calls.keep_axis(x.shape, x.rank - 1)
    mean = _row_mean(x, rows)
    centered = calls.binary(BinaryOp.SUB, x, mean)
    variance = _row_mean(_mul(centered, centered), rows)
    shifted = calls.binary(BinaryOp.ADD, variance, calls.constant(eps, x))
    inv_std = calls.binary(BinaryOp.DIV, calls.constant(1, x), calls.unary(UnaryOp.SQRT, shifted))
    normalized = _mul(centered, inv_std)
    result = calls.binary(BinaryOp.ADD, _mul(normalized, weight), bias)
    if recording(x, weight, bias):
        attach(
            result,
            OpKind.LAYER_NORM,
            (x, weight, bias),
            saved=(normalized, inv_std, weight),
            owned=(0, 1),
            floats=(eps,),
        )
    return result


def _mul(a: Tensor, b: Tensor) -> Tensor:
    return calls.binary(BinaryOp.MUL, a, b)


def _row_mean(t: Tensor, rows: tuple[int, ...]) -> Tensor:
    return calls.binary(BinaryOp.DIV, calls.reduce_sum(t, rows), calls.constant(t.shape[-1], t))


def _layer_norm_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor | None, ...]:
    """dx = (dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)) / σ with dx̂ = g·γ; dγ = Σ g·x̂; dβ = Σ g."""
    normalized = record.saved(0)
    grad_x = grad_weight = grad_bias = None
    if record.needs_grad(0):
        inv_std, weight = record.saved(1), record.saved(2)
        rows = calls.keep_axis(g.shape, g.rank - 1)
        grad_normalized = _mul(g, weight)
        spread = _mul(normalized, _row_mean(_mul(grad_normalized, normalized), rows))
        centered = calls.binary(BinaryOp.SUB, grad_normalized, _row_mean(grad_normalized, rows))
        grad_x = _mul(calls.binary(BinaryOp.SUB, centered, spread), inv_std)
    if record.needs_grad(1):
        grad_weight = calls.sum_to(_mul(g, normalized), record.input_shape(1))
    if record.needs_grad(2):
        grad_bias = calls.sum_to(g, record.input_shape(2))
    return grad_x, grad_weight, grad_bias


BACKWARD = {OpKind.LAYER_NORM: _layer_norm_backward}
