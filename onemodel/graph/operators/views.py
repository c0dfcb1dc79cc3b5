"""Operators that only reinterpret their input's shape: Reshape, Flatten, Squeeze, Unsqueeze,
Identity.

No element changes, so `run` is never called: the runtime reshapes input 0 to the shape `infer`
states (`view_of_input = 0`), and the results are the same bits in exact mode too.
"""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.graph.operators.axes import INT64_ONLY, host_ints, normalize_axes
from onemodel.graph.operators.base import (
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    TensorSpec,
)
from onemodel.tensors.shapes import element_count


class ViewOperator(Operator):
    """Output 0 is input 0 with another shape; subclasses say which shape."""

    supports_exact = True
    view_of_input = 0

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        return [ctx.output(ctx.dtype(0), self.output_shape(ctx, ctx.shape(0)))]

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError


class ReshapeOp(ViewOperator):
    """Reshape: 0 copies the input's extent (unless allowzero, opset 14), -1 is inferred.

    Opsets 1-4 give the shape as an attribute, later ones as an int64 input."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.allowzero = node.opset >= 14 and bool(node.attr("allowzero", 0))
        self.shape_attribute = tuple(node.attr("shape")) if node.opset < 5 else None

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        if self.shape_attribute is None:
            self.check_types(ctx, INT64_ONLY, 1)
            requested = host_ints(ctx, 1)
        else:
            requested = list(self.shape_attribute)
        value = self.node.inputs[1] if self.shape_attribute is None else None

        def refuse(why: str) -> Exception:
            return self.node.bad_input(
                f"cannot reshape an input of shape {list(shape)} to {requested}: {why}", value
            )

        if self.allowzero and 0 in requested and -1 in requested:
            raise refuse("with allowzero, 0 and -1 cannot both appear")
        dims: list[int] = []
        for position, extent in enumerate(requested):
            if extent == 0 and not self.allowzero:
                if position >= len(shape):
                    raise refuse(f"0 at position {position} has no input extent to copy")
                dims.append(shape[position])
            elif extent < -1:
                raise refuse(f"extent {extent} is negative")
            else:
                dims.append(extent)
        if dims.count(-1) > 1:
            raise refuse("more than one extent is -1")
        total = element_count(shape)
        if -1 in dims:
            known = element_count(d for d in dims if d != -1)
            if known == 0 or total % known:
                raise refuse(f"{total} elements cannot fill the -1 extent")
            dims[dims.index(-1)] = total // known
        if element_count(dims) != total:
            raise refuse(f"{total} elements do not fill {element_count(dims)}")
        return tuple(dims)


class FlattenOp(ViewOperator):
    """Flatten to 2-D around `axis` (default 1; negative counts back from opset 11)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 1))

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        rank = len(shape)
        low = -rank if self.node.opset >= 11 else 0
        if not low <= self.axis <= rank:  # one more than a tensor axis: [-r, r]
            raise self.node.bad_input(
                f"Flatten axis {self.axis} is out of range [{low}, {rank}] for an input of "
                f"rank {rank}",
                self.node.inputs[0],
            )
        axis = self.axis + rank if self.axis < 0 else self.axis
        return (element_count(shape[:axis]), element_count(shape[axis:]))


class AxesFromAttributeOrInput(ViewOperator):
    """Squeeze and Unsqueeze: `axes` is an attribute before opset 13, input 1 from 13."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axes_attribute: tuple[int, ...] | None = None
        if node.opset < 13 and "axes" in node.attributes:
            self.axes_attribute = tuple(int(a) for a in node.attr("axes"))

    def requested_axes(self, ctx: InferContext) -> list[int] | None:
        """The axes given, or None when none are."""
        if self.node.opset < 13:
            return None if self.axes_attribute is None else list(self.axes_attribute)
        if not ctx.has(1):
            return None
        self.check_types(ctx, INT64_ONLY, 1)
        return host_ints(ctx, 1)

    def normalized(self, axes: Sequence[int], rank: int) -> tuple[int, ...]:
        value = self.node.inputs[1] if self.node.opset >= 13 else None
        return normalize_axes(self.node, axes, rank, value=value)


class SqueezeOp(AxesFromAttributeOrInput):
    """Squeeze the given extent-1 axes, or every extent-1 axis when none are given."""

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        axes = self.requested_axes(ctx)
        if axes is None:
            return tuple(d for d in shape if d != 1)
        dropped = self.normalized(axes, len(shape))
        for axis in dropped:
            if shape[axis] != 1:
                raise self.node.bad_input(
                    f"Squeeze axis {axis} of shape {list(shape)} has extent {shape[axis]}, not 1",
                    self.node.inputs[0],
                )
        return tuple(d for a, d in enumerate(shape) if a not in dropped)


class UnsqueezeOp(AxesFromAttributeOrInput):
    """Insert extent-1 axes at the given positions of the output."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        if node.opset < 13 and self.axes_attribute is None:
            raise node.invalid("Unsqueeze needs the attribute 'axes'")

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        axes = self.requested_axes(ctx)
        if axes is None:
            raise self.node.invalid("Unsqueeze needs input 1 (axes)")
        inserted = self.normalized(axes, len(shape) + len(axes))
        extents = iter(shape)
        return tuple(1 if a in inserted else next(extents) for a in range(len(shape) + len(axes)))


class IdentityOp(ViewOperator):
    """Identity of a tensor (sequence and optional inputs are not values this runtime holds)."""

    def output_shape(self, ctx: InferContext, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape


DEFS: tuple[OpDef, ...] = (
    OpDef("Reshape", 1, ReshapeOp),
    OpDef("Flatten", 1, FlattenOp),
    OpDef("Squeeze", 1, SqueezeOp),
    OpDef("Unsqueeze", 1, UnsqueezeOp),
    OpDef("Identity", 1, IdentityOp),
)
