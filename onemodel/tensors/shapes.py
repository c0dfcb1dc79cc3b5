"""Shapes, strides and their limits (seed 002 §3 and §4).

Every function here works on plain tuples of Python ints so that it can be used for plan-time
shape arithmetic without touching memory. Strides count elements, not bytes.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from onemodel.tensors.errors import TensorShapeError

MAX_RANK = 8
MAX_ELEMENTS = 2**31 - 1
MAX_BYTES = 2**31 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

Shape = tuple[int, ...]


def check_shape(shape: Sequence[int], itemsize: int = 1) -> Shape:
    """Validate rank, extents, every prefix product and the byte size; return the shape.

    The prefix-product rule is why [100000, 100000, 0] is refused although it has no elements:
    code that computes sizes left to right must never overflow 32 bits.
    """
    dims = tuple(_as_extent(extent) for extent in shape)
    if len(dims) > MAX_RANK:
        raise TensorShapeError(f"rank {len(dims)} exceeds the maximum rank {MAX_RANK}: {dims}")
    product = 1
    for extent in dims:
        if extent < 0 or extent > _INT32_MAX:
            raise TensorShapeError(f"extent {extent} is not a non-negative 32-bit int: {dims}")
        product *= extent
        if product > MAX_ELEMENTS:
            raise TensorShapeError(
                f"shape {dims} has a prefix product above {MAX_ELEMENTS} elements"
            )
    if product * itemsize > MAX_BYTES:
        raise TensorShapeError(
            f"shape {dims} needs {product * itemsize} bytes, more than the {MAX_BYTES} a buffer "
            "may hold"
        )
    return dims


def _as_extent(extent: object) -> int:
    """Python and NumPy integers (shapes often come from int64 tensors); never bools."""
    if isinstance(extent, (bool, np.bool_)):
        raise TensorShapeError(f"extent {extent!r} is a boolean, not an integer")
    try:
        return operator.index(extent)
    except TypeError:
        raise TensorShapeError(f"extent {extent!r} is not an integer") from None


def element_count(shape: Sequence[int]) -> int:
    count = 1
    for extent in shape:
        count *= extent
    return count


def contiguous_strides(shape: Sequence[int]) -> Shape:
    """Row-major strides in elements."""
    strides = [0] * len(shape)
    step = 1
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return tuple(strides)


def check_strides(strides: Sequence[int], rank: int) -> Shape:
    values = tuple(strides)
    if len(values) != rank:
        raise TensorShapeError(f"{len(values)} strides given for a rank-{rank} shape")
    for stride in values:
        if not _INT32_MIN <= stride <= _INT32_MAX:
            raise TensorShapeError(f"stride {stride} is not a signed 32-bit integer")
    return values


def check_view(shape: Shape, strides: Shape, offset: int, capacity: int) -> None:
    """A view must only reach elements 0 .. capacity-1 of its buffer (empty views reach none)."""
    if offset < 0:
        raise TensorShapeError(f"view offset {offset} is negative")
    if element_count(shape) == 0:
        return
    low = high = offset
    for extent, stride in zip(shape, strides, strict=True):
        reach = (extent - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    if low < 0 or high >= capacity:
        raise TensorShapeError(
            f"view of shape {shape}, strides {strides}, offset {offset} reaches elements "
            f"{low}..{high} of a buffer of {capacity}"
        )


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Row-major order; strides of extent-1 dimensions are ignored, empty tensors qualify."""
    if element_count(shape) == 0:
        return True
    expected = 1
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def broadcast_shapes(*shapes: Sequence[int]) -> Shape:
    """NumPy's multidirectional rule; the result must also satisfy the size limits."""
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for axis, extent in enumerate(shape, start=rank - len(shape)):
            if extent == result[axis] or extent == 1:
                continue
            if result[axis] != 1:
                raise TensorShapeError(
                    "shapes " + ", ".join(str(tuple(s)) for s in shapes) + " do not broadcast"
                )
            result[axis] = extent
    return check_shape(result)


def broadcast_strides(shape: Shape, strides: Shape, target: Shape) -> Shape:
    """Strides that present `shape` as `target`, with 0 on every broadcast axis."""
    lead = len(target) - len(shape)
    if lead < 0:
        raise TensorShapeError(f"cannot broadcast shape {shape} to the lower rank of {target}")
    result = [0] * len(target)
    for axis, (extent, stride) in enumerate(zip(shape, strides, strict=True)):
        want = target[lead + axis]
        if extent == want:
            result[lead + axis] = stride if extent != 1 else 0
        elif extent != 1:
            raise TensorShapeError(f"cannot broadcast shape {shape} to {target}")
    return tuple(result)


def resolve_reshape(new_shape: Sequence[int], count: int) -> Shape:
    """Replace a single -1 by the extent that keeps the element count."""
    dims = list(new_shape)
    unknown = [axis for axis, extent in enumerate(dims) if extent == -1]
    if len(unknown) > 1:
        raise TensorShapeError(f"reshape to {tuple(dims)} has more than one -1")
    if unknown:
        known = element_count(d for i, d in enumerate(dims) if i != unknown[0])
        if known == 0 or count % known:
            raise TensorShapeError(f"cannot infer -1 in {tuple(dims)} for {count} elements")
        dims[unknown[0]] = count // known
    if element_count(dims) != count:
        raise TensorShapeError(f"cannot reshape {count} elements to {tuple(dims)}")
    return check_shape(dims)


def try_reshape(shape: Shape, strides: Shape, new_shape: Shape) -> Shape | None:
    """Strides that view the same elements as `new_shape` without moving data, or None.

    Source dimensions of extent 1 are dropped and neighbours merged into runs while
    stride[i] == stride[i+1] * extent[i+1]; the new dimensions must group, left to right, into
    products equal to the run lengths, with only extent-1 dimensions after the last group.
    """
    if element_count(shape) == 0:
        return contiguous_strides(new_shape)
    runs: list[list[int]] = []  # [length, inner stride]
    previous_stride = None
    for extent, stride in zip(shape, strides, strict=True):
        if extent == 1:
            continue
        if runs and previous_stride == stride * extent:
            runs[-1][0] *= extent
            runs[-1][1] = stride
        else:
            runs.append([extent, stride])
        previous_stride = stride
    result = [0] * len(new_shape)
    axis = 0
    for length, inner_stride in runs:
        group_end = axis
        product = 1
        while product < length and group_end < len(new_shape):
            product *= new_shape[group_end]
            group_end += 1
        if product != length:
            return None
        step = inner_stride
        for new_axis in range(group_end - 1, axis - 1, -1):
            result[new_axis] = step
            step *= new_shape[new_axis]
        axis = group_end
    for new_axis in range(axis, len(new_shape)):
        if new_shape[new_axis] != 1:
            return None
        result[new_axis] = 1
    return tuple(result)
