"""Indexing: Gather, GatherElements, GatherND, and their inverses ScatterElements (and the
older Scatter) and ScatterND.

Index values are data, so they are checked while running: an index outside [-n, n-1] is the
caller's input error and is reported naming the index, never as a backend IndexError (or, on a
GPU, as a silent wrap). Negative indices count back from the end of their axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onemodel.graph.operators.axes import INDEX_TYPES, INT64_ONLY, normalize_axis
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
from onemodel.tensors.shapes import contiguous_strides, element_count

# At most this many output elements, a bound Gather lets the backend's take check its indices
# (NumPy's mode "raise" copies through a buffer, which costs more on large outputs).
SMALL = 1 << 14


class IndexingOperator(Operator):
    """Shared checks: index values within their axes (one device-to-host sync per run, the
    price of reporting a bad index), and refusals that name every input shape."""

    supports_exact = True

    def checked_indices(self, ctx: RunContext, indices: Array, extent: Any, where: str) -> Array:
        """`indices` with negative values made positive, after refusing any out of range.

        `extent` is an int, or an array broadcasting against `indices` (GatherND's tuples)."""
        xp = ctx.xp
        outside = (indices < -extent) | (indices >= extent)
        if bool(outside.any()):
            first = int(ctx.kernels.memory.to_host(indices[outside][:1])[0])
            raise self.node.bad_input(
                f"{self.node.op_type} index {first} is out of range for {where}",
                self.node.inputs[1],
            )
        return xp.where(indices < 0, indices + extent, indices)

    def check_same_type(self, ctx: InferContext, first: int, second: int) -> None:
        if ctx.dtype(first) != ctx.dtype(second):
            raise self.node.invalid(
                f"{self.node.op_type} inputs {first} and {second} have different element types "
                f"{onnx_name(ctx.dtype(first))} and {onnx_name(ctx.dtype(second))}",
                self.node.inputs[second],
            )

    def refuse_shapes(self, ctx: InferContext, why: str) -> Exception:
        shapes = [list(ctx.shape(i)) for i in range(len(ctx))]
        return self.node.bad_input(
            f"{self.node.op_type} {why} (input shapes {shapes})", self.node.inputs[1]
        )


class AxisIndexingOperator(IndexingOperator):
    """An operator indexing along one `axis` attribute (default 0)."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.axis = int(node.attr("axis", 0))

    def data_axis(self, rank: int) -> int:
        return normalize_axis(self.node, self.axis, rank, value=self.node.inputs[0])

    def where(self, shape: tuple[int, ...], axis: int) -> str:
        return f"axis {axis} of extent {shape[axis]} (data shape {list(shape)})"


class GatherOp(AxisIndexingOperator):
    """Gather: pick whole slices along `axis`; the output takes the indices' shape there."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INDEX_TYPES, 1)
        shape, indices = ctx.shape(0), ctx.shape(1)
        if not shape:
            raise self.refuse_shapes(ctx, "needs data of rank 1 or more")
        axis = self.data_axis(len(shape))
        return [ctx.output(ctx.dtype(0), (*shape[:axis], *indices, *shape[axis + 1 :]))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data, indices = inputs[0], inputs[1]
        axis = self.data_axis(data.ndim)
        if indices.ndim == 0:
            # One index (a row of a table, a state's slot): checked as a Python int, without
            # the four whole-array passes a tensor of indices takes.
            position, extent = int(indices), data.shape[axis]
            if not -extent <= position < extent:
                raise self.node.bad_input(
                    f"Gather index {position} is out of range for {self.where(data.shape, axis)}",
                    self.node.inputs[1],
                )
            ctx.kernels.take_arrays(data, position % extent, axis, outputs[0])
            return
        positions = self.checked_indices(
            ctx, indices, data.shape[axis], self.where(data.shape, axis)
        )
        ctx.kernels.take_arrays(data, positions, axis, outputs[0])

    def bind(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        """A constant scalar index in range (a state's slot): the slice it picks, copied. A
        small output (embedding rows) on a backend whose take checks bounds: that take, whose
        refusal `run` then explains (the checks here take four passes and ~15 µs)."""
        indices = step.constants[1]
        if indices is None:
            return self._bind_checked_take(ctx, step)
        if indices.ndim != 0:
            return None
        shape = step.specs[0].shape
        axis = self.data_axis(len(shape))
        position, extent = int(indices), shape[axis]
        if not -extent <= position < extent:
            return None  # `run` says why
        where = (slice(None),) * axis + (position % extent,)
        copyto = ctx.xp.copyto

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            copyto(outputs[0], inputs[0][where])

        return call

    def _bind_checked_take(self, ctx: RunContext, step: BoundStep) -> BoundCall | None:
        if not ctx.kernels.take_checks_bounds or element_count(step.outputs[0].shape) > SMALL:
            return None
        axis, run = self.data_axis(len(step.specs[0].shape)), self.run

        def call(ctx: RunContext, inputs: Sequence[Array | None], outputs: Any) -> None:
            try:
                inputs[0].take(inputs[1], axis=axis, out=outputs[0])
            except IndexError:
                run(ctx, inputs, outputs)  # raises the SessionError naming the index

        return call


class ElementwiseIndexingOperator(AxisIndexingOperator):
    """GatherElements and ScatterElements: indices of data's rank, one per element, with
    extents no larger than data's off the axis."""

    def check_element_indices(self, ctx: InferContext) -> int:
        shape, indices = ctx.shape(0), ctx.shape(1)
        if not shape or len(indices) != len(shape):
            raise self.refuse_shapes(ctx, "needs data and indices of one rank, 1 or more")
        axis = self.data_axis(len(shape))
        if any(i > d for a, (i, d) in enumerate(zip(indices, shape, strict=True)) if a != axis):
            raise self.refuse_shapes(ctx, f"indices exceed the data's extents off axis {axis}")
        return axis

    def element_positions(self, ctx: RunContext, data: Array, indices: Array) -> tuple[Array, ...]:
        """For every index element its full position in data (broadcasting index arrays)."""
        xp = ctx.xp
        axis = self.data_axis(data.ndim)
        checked = self.checked_indices(ctx, indices, data.shape[axis], self.where(data.shape, axis))
        rank = indices.ndim
        return tuple(
            checked if a == axis else xp.arange(n).reshape((1,) * a + (n,) + (1,) * (rank - a - 1))
            for a, n in enumerate(indices.shape)
        )


class GatherElementsOp(ElementwiseIndexingOperator):
    """GatherElements: out[i][j] = data[indices[i][j]][j] (for axis 0)."""

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INDEX_TYPES, 1)
        self.check_element_indices(ctx)
        return [ctx.output(ctx.dtype(0), ctx.shape(1))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        position = self.element_positions(ctx, inputs[0], inputs[1])
        ctx.xp.copyto(outputs[0], inputs[0][position])


class TupleIndexingOperator(IndexingOperator):
    """GatherND and ScatterND: the last axis of `indices` holds tuples of length k addressing
    data after `batch_dims` leading axes that data and indices share."""

    batch_dims = 0

    def check_tuples(self, ctx: InferContext) -> int:
        """The tuple length k, after checking ranks, batch extents and k."""
        shape, indices = ctx.shape(0), ctx.shape(1)
        batch = self.batch_dims
        if not shape or not indices or batch >= min(len(shape), len(indices)):
            raise self.refuse_shapes(ctx, f"needs ranks above batch_dims {batch}")
        if indices[:batch] != shape[:batch]:
            raise self.refuse_shapes(ctx, f"needs equal extents on the {batch} batch axes")
        k = indices[-1]
        if not 1 <= k <= len(shape) - batch:
            raise self.refuse_shapes(ctx, f"index tuples of length {k} do not address the data")
        return k

    def checked_tuples(self, ctx: RunContext, data: Array, indices: Array) -> Array:
        b, k = self.batch_dims, indices.shape[-1]
        extents = ctx.xp.asarray(data.shape[b : b + k], dtype=indices.dtype)
        return self.checked_indices(ctx, indices, extents, f"data shape {list(data.shape)}")


class GatherNDOp(TupleIndexingOperator):
    """GatherND: each tuple picks an element or a slice; batch_dims from opset 12."""

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.batch_dims = int(node.attr("batch_dims", 0)) if node.opset >= 12 else 0
        if self.batch_dims < 0:
            raise node.invalid(f"GatherND batch_dims {self.batch_dims} is negative")

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        k = self.check_tuples(ctx)
        out_shape = (*ctx.shape(1)[:-1], *ctx.shape(0)[self.batch_dims + k :])
        return [ctx.output(ctx.dtype(0), out_shape)]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        """Tuples become row offsets into data seen as (batch, addressed elements, rest)."""
        xp = ctx.xp
        data, indices = inputs[0], inputs[1]
        b, k = self.batch_dims, indices.shape[-1]
        addressed = data.shape[b : b + k]
        checked = self.checked_tuples(ctx, data, indices)
        strides = xp.asarray(contiguous_strides(addressed), dtype=xp.int64)
        batch = element_count(data.shape[:b])
        per_batch = element_count(indices.shape[b:-1])
        offsets = (checked.astype(xp.int64) * strides).sum(axis=-1).reshape(batch, per_batch)
        rows = data.reshape(batch, element_count(addressed), element_count(data.shape[b + k :]))
        picked = rows[xp.arange(batch).reshape(batch, 1), offsets]
        xp.copyto(outputs[0], picked.reshape(outputs[0].shape))


class ScatterReduction:
    """How an update combines with the element it lands on: reduction "none" (replace; of
    repeated positions one update wins, which ONNX leaves undefined), add/mul (opset 16),
    max/min (opset 18). Reductions use ufunc.at, which applies every repeated update.

    Exact mode defines the order: the updates landing on one place apply in their index order
    (so with "none" the last one wins). NumPy's ufunc.at happens to do that, CuPy's scatters
    with atomics in no fixed order, so exact mode applies the updates in rounds instead
    (`_apply_in_order`), the same code on every backend."""

    _UFUNCS: ClassVar[dict[str, str]] = {
        "add": "add",
        "mul": "multiply",
        "max": "maximum",
        "min": "minimum",
    }

    def __init__(self, node: NodeInfo) -> None:
        self.name = str(node.attr("reduction", "none")) if node.opset >= 16 else "none"
        allowed = {"none", "add", "mul"} | ({"max", "min"} if node.opset >= 18 else set())
        if self.name not in allowed:
            raise node.invalid(
                f"{node.op_type} reduction '{self.name}' is not one of {sorted(allowed)}"
            )

    def apply(self, ctx: RunContext, out: Array, position: tuple, updates: Array) -> None:
        if ctx.exact:
            self._apply_in_order(ctx, out, position, updates)
            return
        if self.name == "none":
            out[position] = updates
            return
        ufunc = self._UFUNCS[self.name]
        try:
            getattr(ctx.xp, ufunc).at(out, position, updates)
        except NotImplementedError:  # CuPy has no multiply.at: combine on the host instead
            to_host = ctx.kernels.memory.to_host
            host = to_host(out)
            getattr(np, ufunc).at(host, tuple(to_host(p) for p in position), to_host(updates))
            ctx.xp.copyto(out, ctx.xp.asarray(host))

    def _apply_in_order(self, ctx: RunContext, out: Array, position: tuple, updates: Array) -> None:
        """Round r applies the r-th update of every place: within a round no place repeats,
        so a gather, combine and scatter is exact, and places see their updates in index
        order. Ranks come from a stable sort of the places (one host read: the round count)."""
        xp = ctx.xp
        places = xp.broadcast_arrays(*position)
        count = element_count(places[0].shape)
        if count == 0:
            return
        strides = contiguous_strides(out.shape[: len(places)])
        flat = sum(
            p.reshape(-1).astype(xp.int64) * stride
            for p, stride in zip(places, strides, strict=True)
        )
        order = xp.argsort(flat, kind="stable")
        ordered = flat[order]
        rank = xp.empty_like(ordered)
        rank[order] = xp.arange(count, dtype=xp.int64) - xp.searchsorted(ordered, ordered)
        values = updates.reshape(count, *out.shape[len(places) :])
        combine = None if self.name == "none" else getattr(xp, self._UFUNCS[self.name])
        for round_ in range(int(rank.max()) + 1):
            chosen = xp.nonzero(rank == round_)[0]
            where = tuple(p.reshape(-1)[chosen] for p in places)
            update = values[chosen]
            out[where] = update if combine is None else combine(out[where], update)


class ScatterElementsOp(ElementwiseIndexingOperator):
    """ScatterElements (and Scatter, its name in opsets 9-10): the inverse of GatherElements.

    The output may be data's own memory: data is copied first, which is then a no-op."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.reduction = ScatterReduction(node)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INDEX_TYPES, 1)
        self.check_same_type(ctx, 0, 2)
        self.check_element_indices(ctx)
        if ctx.shape(2) != ctx.shape(1):
            raise self.refuse_shapes(ctx, "needs updates of the indices' shape")
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data, indices, updates = inputs[0], inputs[1], inputs[2]
        position = self.element_positions(ctx, data, indices)
        ctx.xp.copyto(outputs[0], data)
        self.reduction.apply(ctx, outputs[0], position, updates)


class ScatterNDOp(TupleIndexingOperator):
    """ScatterND: the inverse of GatherND (no batch axes); may write into data's memory."""

    in_place_input = 0

    def __init__(self, node: NodeInfo) -> None:
        super().__init__(node)
        self.reduction = ScatterReduction(node)

    def infer(self, ctx: InferContext) -> list[TensorSpec]:
        self.check_types(ctx, INT64_ONLY, 1)
        self.check_same_type(ctx, 0, 2)
        k = self.check_tuples(ctx)
        expected = (*ctx.shape(1)[:-1], *ctx.shape(0)[k:])
        if ctx.shape(2) != expected:
            raise self.refuse_shapes(ctx, f"needs updates of shape {list(expected)}")
        return [ctx.output(ctx.dtype(0), ctx.shape(0))]

    def run(self, ctx: RunContext, inputs: Sequence[Array | None], outputs: list[Array]) -> None:
        data, indices, updates = inputs[0], inputs[1], inputs[2]
        checked = self.checked_tuples(ctx, data, indices)
        ctx.xp.copyto(outputs[0], data)
        position = tuple(checked[..., j] for j in range(indices.shape[-1]))
        self.reduction.apply(ctx, outputs[0], position, updates)


DEFS: tuple[OpDef, ...] = (
    OpDef("Gather", 1, GatherOp),
    OpDef("GatherElements", 11, GatherElementsOp),
    OpDef("GatherND", 11, GatherNDOp),
    OpDef("Scatter", 9, ScatterElementsOp, until=10),
    OpDef("ScatterElements", 11, ScatterElementsOp),
    OpDef("ScatterND", 11, ScatterNDOp),
)
