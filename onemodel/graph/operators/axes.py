"""Axis arithmetic and small inputs (axes, starts, pads, shapes, scalars) that many operator
families share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from onemodel.graph.onnx_proto import TensorProto
from onemodel.graph.operators.base import Array, InferContext, NodeInfo, RunContext

INDEX_TYPES = frozenset({TensorProto.INT32, TensorProto.INT64})
INT64_ONLY = frozenset({TensorProto.INT64})


def normalize_axis(node: NodeInfo, axis: int, rank: int, *, value: str | None = None) -> int:
    """`axis` in [0, rank), counting back from the end when negative.

    Negative axes are accepted at every opset, as onnxruntime does, although the spec only
    names them from opset 11 on: exporters of older opsets emit them."""
    low = -rank
    if not low <= axis < rank:
        raise node.bad_input(
            f"{node.op_type} axis {axis} is out of range [{low}, {rank - 1}] for an input of "
            f"rank {rank}",
            value,
        )
    return axis + rank if axis < 0 else axis


def normalize_axes(
    node: NodeInfo,
    axes: Iterable[int],
    rank: int,
    *,
    value: str | None = None,
) -> tuple[int, ...]:
    """Each axis normalized; a repeated axis is refused."""
    result = tuple(normalize_axis(node, int(a), rank, value=value) for a in axes)
    if len(set(result)) != len(result):
        raise node.bad_input(f"{node.op_type} axes {list(result)} repeat an axis", value)
    return result


# Reads small integer input `i` (starts, pads, axes...) as ints, or None when it is absent.
IntsReader = Callable[[int], list[int] | None]


def plan_reader(ctx: InferContext) -> IntsReader:
    """Optional integer inputs as `infer` sees them (NeedsRunTimeValues when not known)."""
    return lambda index: host_ints(ctx, index) if ctx.has(index) else None


def run_reader(ctx: RunContext, inputs: Sequence[Array | None]) -> IntsReader:
    """Optional integer inputs as `run` sees them: copied to the host (operators keep no
    per-plan state, so `run` reads again what `infer` read)."""

    def read(index: int) -> list[int] | None:
        if index >= len(inputs) or inputs[index] is None:
            return None
        return [int(v) for v in ctx.kernels.memory.to_host(inputs[index]).reshape(-1)]

    return read


def host_ints(ctx: InferContext, index: int, *, rank: int = 1) -> list[int]:
    """A small integer input (shape, axes, pads...) as Python ints, read at plan or run time."""
    value = ctx.value(index)
    if value.ndim != rank and not (rank == 1 and value.ndim == 0):
        raise ctx.node.bad_input(
            f"{ctx.node.op_type} input {index} must be a {rank}-D tensor, got shape {value.shape}",
            ctx.node.inputs[index],
        )
    return [int(v) for v in np.asarray(value).reshape(-1)]


def host_scalar(ctx: InferContext, index: int) -> Any:
    """A scalar input (a 0-D or 1-element tensor) as a NumPy scalar, read at plan or run time."""
    value = ctx.value(index)
    if value.size != 1:
        raise ctx.node.bad_input(
            f"{ctx.node.op_type} input {index} must be a scalar, got shape {list(value.shape)}",
            ctx.node.inputs[index],
        )
    return value.reshape(-1)[0]
