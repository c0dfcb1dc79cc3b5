"""Expand and Tile: outputs that repeat their input, by broadcasting or by whole copies."""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.graph.operators.axes import INT64_ONLY, host_ints
from onemodel.graph.operators.base import (
    Array,
    InferContext,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)


def bidirectional_broadcast(first: Sequence[int], second: Sequence[int]) -> tuple[int, ...] | None:
    """The multidirectional (NumPy) broadcast of two shapes, or None when they do not broadcast.

    Unlike numpy.broadcast_to, either side may be the larger: Expand's shape input may have
    extents of 1, or fewer axes, than its data."""
    rank = max(len(first), len(second))
    a = (1,) * (rank - len(first)) + tuple(first)
    b = (1,) * (rank - len(second)) + tuple(second)
    result = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        result.append(y if x == 1 else x)
    return tuple(result)


class ExpandOp(Operator):
    """Expand: broadcast the input against the shape given as an int64 input."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        requested = host_ints(ctx, 1)
        shape = bidirectional_broadcast(ctx.shape(0), requested)
        if shape is None or min(requested, default=0) < 0:
            raise self.node.bad_input(
                f"Expand cannot broadcast an input of shape {list(ctx.shape(0))} to {requested}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        ctx.xp.copyto(outputs[0], inputs[0])


class TileOp(Operator):
    """Tile: repeat the whole input `repeats[i]` times along each axis i (opset 6 form)."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        shape, repeats = ctx.shape(0), host_ints(ctx, 1)
        if len(repeats) != len(shape) or min(repeats, default=0) < 0:
            raise self.node.bad_input(
                f"Tile needs one non-negative repeat count per axis of the input shape "
                f"{list(shape)}, got {repeats}",
                self.node.inputs[1],
            )
        return [ctx.output(ctx.dtype(0), tuple(d * r for d, r in zip(shape, repeats, strict=True)))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        """Seen as (r0, d0, r1, d1, ...), the output is the input broadcast over the r axes:
        one copy, no temporary. Where an extent d is 0 the output is empty whatever r is."""
        data, out = inputs[0], outputs[0]
        repeats = [o // d if d else 1 for o, d in zip(out.shape, data.shape, strict=True)]
        interleaved = [n for pair in zip(repeats, data.shape, strict=True) for n in pair]
        spread = [n for d in data.shape for n in (1, d)]
        ctx.xp.copyto(out.reshape(interleaved), data.reshape(spread))


DEFS: tuple[OpDef, ...] = (
    OpDef("Expand", 8, ExpandOp),
    OpDef("Tile", 6, TileOp),
)
