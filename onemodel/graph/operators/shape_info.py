"""Shape and Size: int64 facts about the input's shape, known at plan time.

They never run: `infer` returns their values as constants, which the planner folds into the
nodes that use them (the usual source of Reshape's and Expand's shape inputs).
"""

from __future__ import annotations

import numpy as np

from onemodel.graph.operators.base import Constant, InferContext, NodeInfo, OpDef, Operator
from onemodel.tensors.shapes import element_count


class ShapeOp(Operator):
    """Shape, with start/end (opset 15) slicing the axes; both are clamped to [0, rank]."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.start = int(node.attr("start", 0)) if node.opset >= 15 else 0
        end = node.attr("end", None) if node.opset >= 15 else None
        self.end = None if end is None else int(end)

    def infer(self, ctx: InferContext) -> list[Constant]:
        shape = ctx.shape(0)
        rank = len(shape)

        def clamp(axis: int) -> int:
            return min(max(axis + rank if axis < 0 else axis, 0), rank)

        end = rank if self.end is None else clamp(self.end)
        return [Constant(np.array(shape[clamp(self.start) : end], dtype=np.int64))]


class SizeOp(Operator):
    """Size: the number of elements, as an int64 scalar."""

    supports_exact = True

    def infer(self, ctx: InferContext) -> list[Constant]:
        return [Constant(np.array(element_count(ctx.shape(0)), dtype=np.int64))]


DEFS: tuple[OpDef, ...] = (
    OpDef("Shape", 1, ShapeOp),
    OpDef("Size", 1, SizeOp),
)
