"""Concat and Split: joining tensors along an axis, and cutting one into parts along it."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from onemodel.graph.operators.axes import INT64_ONLY, host_ints, normalize_axis
from onemodel.graph.operators.base import (
    Array,
    BoundCall,
    BoundStep,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import onnx_name


def joined(shapes: Sequence[tuple[int, ...]]) -> list[int]:
    """The inputs Concat joins: every one with elements, or all of them when none has any.

    An empty input is skipped unchecked when another has elements, as onnxruntime does (its
    Concat, after GitHub issue 8020): a Loop of no iterations writes an empty scan output whose
    other extents shape inference guessed, and tf2onnx and paddle2onnx graphs concatenate such
    values (a slice to an end folded to 0). An empty input that does match the others is empty
    along the axis, so skipping it changes no valid model's result."""
    full = [i for i, shape in enumerate(shapes) if math.prod(shape) > 0]
    return full or list(range(len(shapes)))


class ConcatOp(Operator):
    """Concat (axis required from opset 4, 1 by default before; negative from 11).

    Empty inputs beside non-empty ones are skipped (`joined`)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 1) if node.opset < 4 else node.attr("axis"))

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        shapes = [ctx.shape(i) for i in range(len(ctx))]
        dtypes = {ctx.dtype(i) for i in range(len(ctx))}
        if len(dtypes) != 1:
            names = sorted(onnx_name(d) for d in dtypes)
            raise self.node.invalid(f"Concat inputs have different element types {names}")
        kept = joined(shapes)
        first = shapes[kept[0]]
        if len(first) == 0:
            raise self.node.bad_input("Concat cannot join scalars", self.node.inputs[kept[0]])
        axis = normalize_axis(self.node, self.axis, len(first))
        for index in kept:
            shape = shapes[index]
            if len(shape) != len(first) or any(
                a != b for d, (a, b) in enumerate(zip(shape, first, strict=True)) if d != axis
            ):
                raise self.node.bad_input(
                    f"Concat along axis {axis} needs equal extents on the other axes, got "
                    f"shapes {[list(s) for s in shapes]}",
                    self.node.inputs[index],
                )
        extent = sum(shapes[index][axis] for index in kept)
        return [ctx.output(dtypes.pop(), (*first[:axis], extent, *first[axis + 1 :]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        out = outputs[0]
        axis = normalize_axis(self.node, self.axis, out.ndim)
        kept = joined([x.shape for x in inputs])
        ctx.xp.concatenate([inputs[i] for i in kept], axis=axis, out=out)

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall:
        """The axis, and the inputs joined, worked out once."""
        axis = normalize_axis(self.node, self.axis, len(step.outputs[0].shape))
        concatenate = ctx.xp.concatenate
        kept = joined([spec.shape for spec in step.specs])
        if len(kept) == len(step.specs):

            def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
                concatenate(inputs, axis=axis, out=outputs[0])

            return call
        pick = operator.itemgetter(*kept)

        def call_kept(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            chosen = pick(inputs)
            concatenate(chosen if len(kept) > 1 else (chosen,), axis=axis, out=outputs[0])

        return call_kept


class SplitOp(Operator):
    """Split along `axis` into as many parts as the node has outputs.

    Part sizes come from the `split` attribute (before opset 13; opset 1 also takes an input),
    the `split` input (from 13), `num_outputs` (from 18: equal parts, a smaller last one), or
    else equal parts. `run` reads the part sizes off the preallocated outputs."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 0))
        self.parts = len(node.outputs)
        split = node.attr("split", None) if node.opset < 13 else None
        self.split_attribute = None if split is None else [int(s) for s in split]
        self.num_outputs = int(node.attr("num_outputs", 0)) if node.opset >= 18 else 0
        if self.num_outputs and self.num_outputs != self.parts:
            raise node.invalid(f"Split has num_outputs={self.num_outputs} but {self.parts} outputs")

    def sizes(self, ctx: InferContext, extent: int) -> list[int]:
        """The extent of each part along the axis."""
        split, value = self.split_attribute, None
        if ctx.has(1):  # opsets 1 and 13+ take the sizes as an input
            self.check_types(ctx, INT64_ONLY, 1)
            split, value = host_ints(ctx, 1), self.node.inputs[1]
        if split:
            if len(split) != self.parts or min(split) < 0 or sum(split) != extent:
                raise self.node.bad_input(
                    f"Split sizes {split} must be {self.parts} non-negative values summing to "
                    f"the extent {extent} of axis {self.axis}",
                    value,
                )
            return split
        if self.num_outputs:
            chunk = -(-extent // self.parts)
            last = extent - chunk * (self.parts - 1)
            if last < 0:
                raise self.node.bad_input(
                    f"an extent of {extent} cannot be split into {self.parts} chunks of {chunk}",
                    self.node.inputs[0],
                )
            return [chunk] * (self.parts - 1) + [last]
        if extent % self.parts:
            raise self.node.bad_input(
                f"an extent of {extent} cannot be split into {self.parts} equal parts",
                self.node.inputs[0],
            )
        return [extent // self.parts] * self.parts

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        shape = ctx.shape(0)
        axis = normalize_axis(self.node, self.axis, len(shape))
        return [
            ctx.output(ctx.dtype(0), (*shape[:axis], size, *shape[axis + 1 :]))
            for size in self.sizes(ctx, shape[axis])
        ]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data = inputs[0]
        axis = normalize_axis(self.node, self.axis, data.ndim)
        start = 0
        for out in outputs:
            stop = start + out.shape[axis]
            ctx.xp.copyto(out, data[(slice(None),) * axis + (slice(start, stop),)])
            start = stop

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall:
        """Each part's slice of the data worked out once."""
        axis = normalize_axis(self.node, self.axis, len(step.specs[0].shape))
        parts, start = [], 0
        for spec in step.outputs:
            stop = start + spec.shape[axis]
            parts.append((slice(None),) * axis + (slice(start, stop),))
            start = stop
        copyto = ctx.xp.copyto

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            data = inputs[0]
            for out, part in zip(outputs, parts, strict=True):
                copyto(out, data[part])

        return call


DEFS: tuple[OpDef, ...] = (
    OpDef("Concat", 1, ConcatOp),
    OpDef("Split", 1, SplitOp),
)
