"""Where: X where the condition holds, else Y, all three broadcast multidirectionally."""

from __future__ import annotations

from onemodel.graph.operators.base import (
    Array,
    InferContext,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.binary import check_same_type
from onemodel.graph.operators.broadcast import multidirectional
from onemodel.graph.operators.unary import BOOL, NUMERIC


class Where(Operator):
    """Exact: a selection. Strings and complex values (which the spec lists) are not tensors here.

    The output starts as X and takes Y where the condition fails, so it may share X's memory
    (`in_place_input = 1`): where it does, only Y is written."""

    supports_exact = True
    in_place_input = 1

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, BOOL, 0)
        self.check_types(ctx, NUMERIC | BOOL, 1, 2)
        check_same_type(ctx, (1, 2))
        return [ctx.output(ctx.dtype(1), multidirectional(ctx, (0, 1, 2)))]

    def run(self, ctx: RunContext, inputs: list[Array | None], outputs: list[Array]) -> None:
        xp, out = ctx.xp, outputs[0]
        condition, x, y = inputs
        xp.copyto(out, x)
        xp.copyto(out, y, where=xp.logical_not(condition))


DEFS: tuple[OpDef, ...] = (OpDef("Where", 9, Where),)
