"""Slice: strided sub-tensors, with the ONNX rules for negative and out-of-range bounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.graph.operators.axes import (
    INDEX_TYPES,
    IntsReader,
    normalize_axes,
    plan_reader,
    run_reader,
)
from onemodel.graph.operators.base import (
    Array,
    BoundCall,
    BoundStep,
    InferContext,
    NodeInfo,
    OpDef,
    RunContext,
    TensorSpec,
)
from onemodel.graph.operators.prepared import PreparesConstants


@dataclass(frozen=True, slots=True)
class PlannedSlices:
    """A Slice step's bounds settled once per plan: the data shape they hold for, its Python
    slices, and the constant bound inputs (host ints; empty with attributes) for a run of
    another shape."""

    shape: tuple[int, ...]
    slices: tuple[slice, ...]
    read: dict[int, Any]


class SliceOp(PreparesConstants):
    """Slice with starts/ends/axes attributes (opsets 1-9) or inputs with steps (10+).

    Constant bounds (the usual case) are read to the host once per plan (`prepare`); computed
    ones in every run (an operator holds no per-plan state)."""

    supports_exact = True

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.attributes: tuple[list[int], list[int], list[int] | None] | None = None
        if node.opset < 10:
            axes = node.attr("axes", None)
            self.attributes = (
                [int(v) for v in node.attr("starts")],
                [int(v) for v in node.attr("ends")],
                None if axes is None else [int(v) for v in axes],
            )

    def bounds(self, shape: tuple[int, ...], read: IntsReader) -> tuple[slice, ...]:
        """One Python slice per axis, with the effective start, end and step the spec defines."""
        value = None if self.attributes is not None else self.node.inputs[1]
        if self.attributes is not None:
            starts, ends, axes = self.attributes
            steps = None
        else:
            starts, ends, axes, steps = read(1), read(2), read(3), read(4)
            if starts is None or ends is None:
                raise self.node.invalid("Slice needs the inputs starts and ends")
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise self.node.bad_input(
                f"Slice starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in "
                "length",
                value,
            )
        if 0 in steps:
            raise self.node.bad_input(f"Slice steps {steps} contain 0", self.node.inputs[4])
        normalized = normalize_axes(self.node, axes, len(shape), value=value)
        result = [slice(None)] * len(shape)
        for axis, start, end, step in zip(normalized, starts, ends, steps, strict=True):
            result[axis] = effective_slice(shape[axis], start, end, step)
        return tuple(result)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INDEX_TYPES, 1, 2, 3, 4)
        shape = ctx.shape(0)
        bounds = self.bounds(shape, plan_reader(ctx))
        out_shape = tuple(len(range(*s.indices(d))) for s, d in zip(bounds, shape, strict=True))
        return [ctx.output(ctx.dtype(0), out_shape)]

    def prepare(self, ctx: RunContext, constants: Sequence[Array | None]) -> Any:
        """The bound inputs as host ints when every one present is a constant, else None."""
        present = [i for i in range(1, len(self.node.inputs)) if self.node.inputs[i]]
        if self.attributes is not None or any(constants[i] is None for i in present):
            return None
        read = run_reader(ctx, constants)
        return {i: read(i) for i in present}

    def prepare_for_plan(
        self,
        ctx: RunContext,
        constants: Sequence[Array | None],
        specs: Sequence[TensorSpec | None],
    ) -> Any:
        """With constant bounds and the data's plan shape, the slices themselves: a run then
        only indexes (working them out took ~10 µs, a small Slice's whole time)."""
        read = self.prepare(ctx, constants)
        if read is None and self.attributes is None:
            return None
        read = {} if read is None else read
        shape = specs[0].shape
        return PlannedSlices(shape, self.bounds(shape, read.get), read)

    def run_prepared(
        self, ctx: RunContext, prepared: Any, inputs: Sequence[Array | None], outputs: Any
    ) -> None:
        data = inputs[0]
        if isinstance(prepared, PlannedSlices):
            if data.shape == prepared.shape:
                ctx.xp.copyto(outputs[0], data[prepared.slices])
                return
            prepared = prepared.read or None
        read = run_reader(ctx, inputs) if prepared is None else prepared.get
        ctx.xp.copyto(outputs[0], data[self.bounds(data.shape, read)])

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """Slices settled by the plan (the data always has their shape): the copy alone."""
        prepared = step.prepared
        if not isinstance(prepared, PlannedSlices):
            return None
        slices, copyto = prepared.slices, ctx.xp.copyto

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            copyto(outputs[0], inputs[0][slices])

        return call


def effective_slice(extent: int, start: int, end: int, step: int) -> slice:
    """Negative bounds count back from `extent`; then both are clamped, differently by the
    direction of the step, so that INT_MAX and INT_MIN mean "to the end"."""
    if start < 0:
        start += extent
    if end < 0:
        end += extent
    if step > 0:
        start, end = min(max(start, 0), extent), min(max(end, 0), extent)
        count = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), extent - 1), min(max(end, -1), extent - 1)
        count = max(0, -(-(start - end) // -step))
    if count == 0:
        return slice(0, 0)
    return slice(start, None if end < 0 else end, step)


DEFS: tuple[OpDef, ...] = (OpDef("Slice", 1, SliceOp),)
