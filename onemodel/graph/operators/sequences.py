"""Sequences and optionals as values (seed 000 §8, Python form): a sequence is a Python list of
arrays, an empty optional is None and a full one is its value. Their sizes are values, so every
operator here is data-dependent and runs in each run; SequenceMap runs a body per element.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.graph.operators.base import Array, NodeInfo, OpDef, Operator, RunContext
from onemodel.graph.operators.control_flow import ControlFlow


class SequenceOperator(Operator):
    """Exact: sequences and optionals only move tensors."""

    outputs_data_dependent = True
    supports_exact = True

    def position(self, ctx: RunContext, sequence: list, value: Array | None, *, end: int) -> int:
        """A position argument (negative counts from the back), `end` when absent, checked."""
        if value is None:
            return end
        index = int(np.asarray(ctx.kernels.memory.to_host(value)).reshape(-1)[0])
        limit = len(sequence) + (1 if end == len(sequence) else 0)
        if not -len(sequence) <= index < limit:
            raise self.node.bad_input(
                f"{self.node.op_type} position {index} is outside a sequence of {len(sequence)}",
                self.node.inputs[1],
            )
        return index + len(sequence) if index < 0 else index


class SequenceEmptyOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        return [[]]


class SequenceConstructOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        if len({x.dtype for x in inputs}) > 1:
            raise self.node.bad_input("SequenceConstruct needs tensors of one element type")
        return [[ctx.xp.array(x) for x in inputs]]


class SequenceInsertOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        sequence, tensor = list(inputs[0]), inputs[1]
        at = self.position(ctx, sequence, inputs[2] if len(inputs) > 2 else None, end=len(sequence))
        sequence.insert(at, ctx.xp.array(tensor))
        return [sequence]


class SequenceAtOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        sequence = inputs[0]
        return [ctx.xp.array(sequence[self.position(ctx, sequence, inputs[1], end=-1)])]


class SequenceEraseOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        sequence = list(inputs[0])
        at = self.position(ctx, sequence, inputs[1] if len(inputs) > 1 else None, end=-1)
        del sequence[at if at >= 0 else len(sequence) - 1]
        return [sequence]


class SequenceLengthOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        return [ctx.xp.asarray(np.int64(len(inputs[0])))]


class SplitToSequenceOp(SequenceOperator):
    """Split into equal parts of `split` (a scalar), the given sizes, or ones (keepdims)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 0))
        self.keepdims = bool(node.attr("keepdims", 1))

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        x = inputs[0]
        axis = self.axis % x.ndim
        extent = x.shape[axis]
        split = inputs[1] if len(inputs) > 1 else None
        if split is None:
            parts = [ctx.xp.take(x, i, axis=axis) for i in range(extent)]
            if self.keepdims:
                parts = [ctx.xp.expand_dims(p, axis) for p in parts]
            return [parts]
        sizes = np.asarray(ctx.kernels.memory.to_host(split)).reshape(-1).tolist()
        if np.ndim(ctx.kernels.memory.to_host(split)) == 0:
            step = int(sizes[0])
            sizes = [step] * (extent // step) + ([extent % step] if extent % step else [])
        if sum(sizes) != extent or any(s < 0 for s in sizes):
            raise self.node.bad_input(
                f"SplitToSequence sizes {sizes} do not add up to the extent {extent}",
                self.node.inputs[1],
            )
        bounds = np.cumsum([0, *sizes]).tolist()
        index = [slice(None)] * x.ndim
        parts = []
        for start, stop in itertools.pairwise(bounds):
            index[axis] = slice(start, stop)
            parts.append(ctx.xp.array(x[tuple(index)]))
        return [parts]


class ConcatFromSequenceOp(SequenceOperator):
    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis"))
        self.new_axis = bool(node.attr("new_axis", 0))

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        sequence = inputs[0]
        if not sequence:
            raise self.node.bad_input("ConcatFromSequence needs a non-empty sequence")
        rank = sequence[0].ndim + (1 if self.new_axis else 0)
        axis = self.axis % rank
        if self.new_axis:
            return [ctx.xp.stack(sequence, axis=axis)]
        return [ctx.xp.concatenate(sequence, axis=axis)]


class OptionalOp(SequenceOperator):
    """An optional holding (a copy of) the input, or an empty one of the `type` attribute.

    A copy, as SequenceConstruct makes: the input may live in the run's slab, whose block goes
    to another value after its last planned reader, while the optional lives on."""

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        if not inputs or inputs[0] is None:
            return [None]
        value = inputs[0]
        return [list(value) if isinstance(value, list) else ctx.xp.array(value)]


class OptionalHasElementOp(SequenceOperator):
    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        present = bool(inputs) and inputs[0] is not None
        return [ctx.xp.asarray(np.bool_(present))]


class OptionalGetElementOp(SequenceOperator):
    """The optional's value, copied as SequenceAt copies: it may be the caller's array, which
    later steps (exact mode's NaN rewriting, in-place kernels) must never write."""

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        value = inputs[0]
        if value is None:
            raise self.node.bad_input(
                "OptionalGetElement of an empty optional", self.node.inputs[0]
            )
        return [list(value) if isinstance(value, list) else ctx.xp.array(value)]


class SequenceMapOp(ControlFlow):
    """Runs the body once per position of the sequence inputs (tensor inputs are passed whole)
    and collects each body output into a sequence."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.map_body = self.body("body")
        self.outer = self.outer_positions(self.map_body)

    def run(self, ctx: RunContext, inputs: Sequence[Any], outputs: Any) -> list:
        declared = list(inputs[: len(self.node.inputs)])
        lengths = {len(x) for x in declared if isinstance(x, list)}
        if len(lengths) != 1:
            raise self.node.bad_input(f"SequenceMap sequences differ in length: {lengths}")
        count = lengths.pop()
        collected: list[list[Array]] = [[] for _ in self.map_body.graph.outputs]
        for i in range(count):
            ctx.check(self.node.name)
            positional = [x[i] if isinstance(x, list) else x for x in declared]
            values = self.body_values(self.map_body, positional, inputs, self.outer)
            results = self.map_body.run_body(values, ctx)
            for bucket, result in zip(collected, results, strict=True):
                bucket.append(result)
        return collected


DEFS: tuple[OpDef, ...] = (
    OpDef("SequenceEmpty", 11, SequenceEmptyOp),
    OpDef("SequenceConstruct", 11, SequenceConstructOp),
    OpDef("SequenceInsert", 11, SequenceInsertOp),
    OpDef("SequenceAt", 11, SequenceAtOp),
    OpDef("SequenceErase", 11, SequenceEraseOp),
    OpDef("SequenceLength", 11, SequenceLengthOp),
    OpDef("SplitToSequence", 11, SplitToSequenceOp),
    OpDef("ConcatFromSequence", 11, ConcatFromSequenceOp),
    OpDef("Optional", 15, OptionalOp),
    OpDef("OptionalHasElement", 15, OptionalHasElementOp),
    OpDef("OptionalGetElement", 15, OptionalGetElementOp),
    OpDef("SequenceMap", 17, SequenceMapOp),
)
