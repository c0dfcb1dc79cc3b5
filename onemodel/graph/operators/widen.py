"""Widen: a weight kept at reduced precision (SessionOptions.weight_storage) made float32 again
where it is read, with seed 002 §10's exact conversions, so every backend widens to the same bits.

Weight storage inserts one Widen before the first reader of each reduced weight, so the float32
copy lives in the run's slab only while its readers need it. It is not `foldable`: computed
ahead, it would become a float32 constant again and undo the saving.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onemodel.graph.operators.base import (
    INTERNAL_DOMAIN,
    Array,
    InferContext,
    NodeInfo,
    OpDef,
    Operator,
    RunContext,
    TensorSpec,
)
from onemodel.tensors import DType
from onemodel.tensors.conversions import bfloat16_bits_to_float32, float16_bits_to_float32

_WIDENERS = {"float16": float16_bits_to_float32, "bfloat16": bfloat16_bits_to_float32}


class WidenOp(Operator):
    """uint16 bits of float16 or bfloat16 (attribute `from`) to float32."""

    supports_exact = True
    foldable = False

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        source = node.attr("from")
        if source not in _WIDENERS:
            raise node.invalid(f"Widen needs 'from' = float16 or bfloat16, got {source!r}")
        self.widen = _WIDENERS[source]

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, frozenset({DType.UINT16.value}))
        return [ctx.output(DType.FLOAT.value, ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
        outputs[0][...] = self.widen(inputs[0])


DEFS = (OpDef("Widen", 1, WidenOp, domain=INTERNAL_DOMAIN),)
