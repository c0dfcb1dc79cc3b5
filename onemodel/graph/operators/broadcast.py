"""Broadcasting shape rules shared by the element-wise operator families.

ONNX has two rules: multidirectional (NumPy's: every input may stretch its extent-1 axes) and
unidirectional (only one input stretches, to the other's shape, which must be the result). Both
refuse shapes that do not fit with an INVALID_INPUT error naming the shapes, so no NumPy
broadcasting error can escape from a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.graph.operators.base import InferContext
from onemodel.tensors import TensorShapeError
from onemodel.tensors.shapes import Shape, broadcast_shapes


def multidirectional(ctx: InferContext, indices: Sequence[int]) -> Shape:
    """The common shape of the inputs at `indices` (absent optional inputs are skipped).

    Inputs are added one at a time so that the error names the first that does not fit."""
    node = ctx.node
    present = [i for i in indices if ctx.has(i)]
    result: Shape = ()
    for count, index in enumerate(present, start=1):
        try:
            result = broadcast_shapes(result, ctx.shape(index))
        except TensorShapeError as error:
            shapes = ", ".join(str(ctx.shape(i)) for i in present[:count])
            raise node.bad_input(
                f"{node.op_type} inputs of shapes {shapes} do not broadcast together "
                f"(multidirectional rule): {error}",
                node.inputs[index],
            ) from None
    return result


def unidirectional(ctx: InferContext, index: int, target: Sequence[int]) -> None:
    """Check that input `index` broadcasts to `target` without changing it (PRelu's slope)."""
    node = ctx.node
    shape = ctx.shape(index)
    try:
        fits = broadcast_shapes(shape, target) == tuple(target)
    except TensorShapeError:
        fits = False
    if not fits:
        raise node.bad_input(
            f"{node.op_type} input {index} of shape {shape} does not broadcast to the shape "
            f"{tuple(target)} (unidirectional rule)",
            node.inputs[index],
        )
