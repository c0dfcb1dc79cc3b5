"""Sums and means over axes; the gradient spreads back as a stride-0 broadcast."""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.eager import calls
from onemodel.eager.elementwise import div
from onemodel.eager.record import BackwardRecord, OpKind, attach, recording
from onemodel.tensors import Tensor, TensorShapeError


def sum(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """Σ over `axes` (all when None); exact mode sums in float64 in row-major order."""
    reduced = _axes(x, axes)
    kept = tuple(1 if axis in reduced else extent for axis, extent in enumerate(x.shape))
    result = calls.reduce_sum(x, kept)
    if not keepdims:
        result = result.reshape([e for a, e in enumerate(x.shape) if a not in reduced])
    if recording(x):
        attach(result, OpKind.SUM, (x,), ints=reduced)
    return result


def mean(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """The sum divided once by the element count (two recorded operations)."""
    reduced = _axes(x, axes)
    count = 1
    for axis in reduced:
        count *= x.shape[axis]
    return div(sum(x, reduced, keepdims), count)


def _axes(x: Tensor, axes: int | Sequence[int] | None) -> tuple[int, ...]:
    """Sorted, non-negative, distinct axes of x."""
    if axes is None:
        return tuple(range(x.rank))
    listed = [axes] if isinstance(axes, int) else list(axes)
    if any(not -x.rank <= axis < x.rank for axis in listed):
        raise TensorShapeError(f"axes {tuple(listed)} out of range for shape {x.shape}")
    normal = sorted({axis % x.rank for axis in listed})
    if len(normal) != len(listed):
        raise TensorShapeError(f"axes {tuple(listed)} name an axis twice")
    return tuple(normal)


def _sum_backward(record: BackwardRecord, g: Tensor) -> tuple[Tensor]:
    shape = record.input_shape(0)
    kept = tuple(1 if axis in record.ints else extent for axis, extent in enumerate(shape))
    return (g.reshape(kept).broadcast_to(shape),)


BACKWARD = {OpKind.SUM: _sum_backward}
