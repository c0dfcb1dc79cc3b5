"""Dropout for inference: the output is the input, the optional mask keeps everything.

Training (is_test = 0 before opset 7, a true training_mode input from opset 12) draws a random
mask, which this runtime does not do; it is refused unless the ratio is 0, where training is
the identity too. The mask is of the data's type (ones) before opset 10 and BOOL after.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onemodel.graph.operators.base import (
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.unary import IEEE_FLOATS
from onemodel.tensors import DType

# FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ (ONNX codes): Dropout only copies.
_FLOAT8 = frozenset({17, 18, 19, 20})


class Dropout(Operator):
    """Checks shared by both forms; `infer` refuses training that would drop anything.
    Exact: a copy (or view) and a mask of ones."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.wants_mask = len(node.outputs) > 1 and bool(node.outputs[1])
        if node.opset < 7 and not node.attr("is_test", 0) and node.attr("ratio", 0.5) != 0.0:
            raise node.unsupported(
                "Dropout with is_test = 0 draws a random mask, which is not supported; export "
                "the model for inference (is_test = 1)"
            )

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        opset = self.node.opset
        allowed = IEEE_FLOATS | ({DType.BFLOAT16} if opset >= 13 else set())
        self.check_types(ctx, frozenset(allowed | (_FLOAT8 if opset >= 22 else set())), 0)
        if opset >= 12 and ctx.has(2):
            self.check_types(ctx, frozenset({DType.BOOL}), 2)
            if bool(ctx.value(2).reshape(-1)[0]) and self._ratio(ctx) != 0.0:
                raise self.node.unsupported(
                    "Dropout with training_mode true draws a random mask, which is not "
                    "supported; pass training_mode false",
                    self.node.inputs[2],
                )
        shape = ctx.shape(0)
        specs = [ctx.output(ctx.dtype(0), shape)]
        if self.wants_mask:
            specs.append(ctx.output(DType.BOOL if opset >= 10 else ctx.dtype(0), shape))
        return specs

    def _ratio(self, ctx: InferContext) -> float:
        """The ratio input (0.5 when absent), known at plan time or read when running."""
        if not ctx.has(1):
            return 0.5
        return float(ctx.value(1).reshape(-1)[0])


class DropoutOp(Dropout):
    """Without a mask the output is the input itself: no copy."""

    view_of_input = 0


class DropoutWithMaskOp(Dropout):
    """With a mask the node runs: the input (copied unless the output may take its memory)
    and a mask of ones."""

    in_place_input = 0

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        ctx.xp.copyto(outputs[0], inputs[0])
        outputs[1][...] = True


def dropout(node: NodeInfo) -> Operator:
    """The view form unless a mask output is wanted."""
    operator = DropoutOp(node)
    return DropoutWithMaskOp(node) if operator.wants_mask else operator


dropout.supports_exact = True  # type: ignore[attr-defined]  # both classes': for the tables

DEFS: tuple[OpDef, ...] = (OpDef("Dropout", 1, dropout),)
