"""Transpose: permute the axes (reversed by default) into the preallocated output."""

from __future__ import annotations

from collections.abc import Sequence

from onemodel.graph.operators.base import (
    Array,
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

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data = inputs[0]
        ctx.kernels.transpose_arrays(data, self.permutation(data.ndim), outputs[0])


DEFS: tuple[OpDef, ...] = (OpDef("Transpose", 1, TransposeOp),)
