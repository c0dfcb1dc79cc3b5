"""GELU (tanh form) and softmax, and their gradients (seed 002 §8's conventions).

Both call the array library's tanh or exp, so neither has an exact-mode definition yet.
"""

from __future__ import annotations

import math

from onemodel.backends import BinaryOp, UnaryOp
from onemodel.eager import calls
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor, TensorShapeError

_GELU_SCALE = math.sqrt(2 / math.pi)
_GELU_CUBIC = 0.044715


def gelu(x: Tensor) -> Tensor:
    """½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); the record keeps x and that tanh (owned)."""
    calls.inexact("gelu", x)
    cube = _mul(_mul(x, x), x)
    inner = _mul(_add(x, _mul(cube, _const(_GELU_CUBIC, x))), _const(_GELU_SCALE, x))
    tanh = calls.unary(UnaryOp.TANH, inner)
    result = _mul(_mul(x, _const(0.5, x)), _add(tanh, _const(1, x)))
    if recording(x):
        attach(result, OpKind.GELU, (x,), saved=(x, tanh), owned=(1,))
    return result


def softmax(x: Tensor, axis: int = -1, scale: float = 1.0) -> Tensor:
    """softmax(scale·x) along `axis`, shifted by the maximum; the record keeps the output,
    the axis in Ints and the scale in Floats."""
    calls.inexact("softmax", x)
    if not -x.rank <= axis < x.rank:
        raise TensorShapeError(f"softmax axis {axis} out of range for shape {x.shape}")
    axis %= x.rank
    scaled = x if scale == 1 else _mul(x, _const(scale, x))
    kept = calls.keep_axis(x.shape, axis)
    shifted = calls.binary(BinaryOp.SUB, scaled, calls.reduce_max(scaled, kept))
    exps = calls.unary(UnaryOp.EXP, shifted)
    result = calls.binary(BinaryOp.DIV, exps, calls.reduce_sum(exps, kept))
    if recording(x):
        attach(result, OpKind.SOFTMAX, (x,), saved=(result,), ints=(axis,), floats=(scale,))
    return result


def _mul(a: Tensor, b: Tensor) -> Tensor:
    return calls.binary(BinaryOp.MUL, a, b)


def _add(a: Tensor, b: Tensor) -> Tensor:
    return calls.binary(BinaryOp.ADD, a, b)


def _const(value: float, like: Tensor) -> Tensor:
    return calls.constant(value, like)


def _gelu_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    """d/dx = ½(1 + t) + ½·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²)."""
    x, tanh = record.saved(0), record.saved(1)
    half = _const(0.5, g)
    sech2 = calls.binary(BinaryOp.SUB, _const(1, g), _mul(tanh, tanh))
    slope = _add(_const(1, g), _mul(_mul(x, x), _const(3 * _GELU_CUBIC, g)))
    inner = _mul(_mul(_mul(half, x), sech2), _mul(slope, _const(_GELU_SCALE, g)))
    local = _add(_mul(half, _add(tanh, _const(1, g))), inner)
    return (_mul(g, local),)


def _softmax_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    """d/dx = scale · y·(g − Σ g·y) along the axis."""
    y = record.saved(0)
    (axis,), (scale,) = record.ints, record.floats
    total = calls.reduce_sum(_mul(g, y), calls.keep_axis(y.shape, axis))
    grad = _mul(y, calls.binary(BinaryOp.SUB, g, total))
    return (grad if scale == 1 else _mul(grad, _const(scale, g)),)


BACKWARD = {OpKind.GELU: _gelu_backward, OpKind.SOFTMAX: _softmax_backward}
