"""Transpose: permute the axes (reversed by default) into the preallocated output."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.broadcasting import ROW_BUFFER_ABOVE
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


class TransposeOp(Operator):
    """A copy, so the result is the same bits on every backend."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        perm = node.attr("perm", None)
        self.perm = None if perm is None else tuple(int(p) for p in perm)
        if self.perm is not None and sorted(self.perm) != list(range(len(self.perm))):
            raise node.invalid(f"Transpose perm {list(self.perm)} is not a permutation")

    def permutation(self, rank: int) -> tuple[int, ...]:
        return tuple(reversed(range(rank))) if self.perm is None else self.perm

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        shape = ctx.shape(0)
        perm = self.permutation(len(shape))
        if len(perm) != len(shape):
            raise self.node.bad_input(
                f"Transpose perm {list(perm)} does not fit an input of shape {list(shape)}",
                self.node.inputs[0],
            )
        return [ctx.output(ctx.dtype(0), tuple(shape[p] for p in perm))]

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """On the host, where the blocked copy (numpy_cpu/movement.py) would make one pass or
        the array is small: that one copy, without the kernel's per-run decisions (a copy:
        the same bits whichever way it runs)."""
        shape = step.specs[0].shape
        perm = self.permutation(len(shape))
        keeps_rows = not perm or perm[-1] == len(shape) - 1
        if ctx.xp is not np or not (keeps_rows or math.prod(shape) <= ROW_BUFFER_ABOVE):
            return None
        copyto = np.copyto

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            copyto(outputs[0], inputs[0].transpose(perm))

        return call

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data = inputs[0]
        ctx.kernels.transpose_arrays(data, self.permutation(data.ndim), outputs[0])


DEFS: tuple[OpDef, ...] = (OpDef("Transpose", 1, TransposeOp),)
