"""Views as differentiable operations: reshape and permute (their gradients move back)."""

from __future__ import annotations

from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor


def reshape(x: Tensor, *shape: int | tuple[int, ...]) -> Tensor:
    """A view when the strides allow, else a copy (seed 002 §4); −1 infers one extent."""
    result = x.reshape(*shape)
    if recording(x):
        attach(result, OpKind.RESHAPE, (x,))
    return result


def permute(x: Tensor, *axes: int | tuple[int, ...]) -> Tensor:
    """A view with the dimensions reordered; Ints keep the order for the backward pass."""
    result = x.permute(*axes)
    if recording(x):
        order = axes[0] if len(axes) == 1 and isinstance(axes[0], tuple | list) else axes
        attach(result, OpKind.PERMUTE, (x,), ints=order)
    return result


def _reshape_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    return (g.reshape(record.input_shape(0)),)


def _permute_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    inverse = [0] * len(record.ints)
    for position, axis in enumerate(record.ints):
        inverse[axis] = position
    return (g.permute(inverse),)


BACKWARD = {OpKind.RESHAPE: _reshape_backward, OpKind.PERMUTE: _permute_backward}
