"""Matching helpers the pattern recognisers share: scalar constants compared with a tolerance
their element type allows, the other operand of a binary node, and the single reader of an
intermediate value (which a pattern may then swallow)."""

from __future__ import annotations

import numpy as np

from onemodel.graph.passes.base import is_onnx
from onemodel.graph.passes.pass_graph import PassGraph, PassNode


def scalar(graph: PassGraph, value_id: int) -> tuple[float, np.dtype] | None:
    """A one-element floating-point constant as (value, element type); its shape must not
    widen what it is broadcast with, so callers check `graph.constant(value_id).ndim` where
    the rank matters."""
    array = graph.constant(value_id)
    if array is None or array.size != 1 or not _is_float(array.dtype):
        return None
    return float(array.reshape(-1)[0].astype(np.float64)), array.dtype


def near(graph: PassGraph, value_id: int, target: float) -> bool:
    """Whether the value is a scalar constant equal to `target` up to the rounding of its type
    (never tighter than float32's: exporters often write float32 roundings into doubles)."""
    found = scalar(graph, value_id)
    if found is None:
        return False
    value, dtype = found
    tolerance = 4 * max(_epsilon(dtype), float(np.finfo(np.float32).eps))
    return abs(value - target) <= tolerance * abs(target)


def other_input(node: PassNode, value_id: int) -> int | None:
    """The operand of a two-input node that is not `value_id` (itself when both are)."""
    if len(node.inputs) != 2 or value_id not in node.inputs:
        return None
    first, second = node.inputs
    return second if first == value_id else first


def scaled_operand(graph: PassGraph, node: PassNode, factor: float) -> int | None:
    """x when the two-input node is (x, c) or (c, x) with c a constant `near` factor."""
    return next((v for v in node.inputs if near(graph, other_input(node, v), factor)), None)


def sole_reader(graph: PassGraph, value_id: int, *op_types: str) -> PassNode | None:
    """The only node reading a value that is no graph output, when it is one of `op_types`."""
    reader = graph.only_reader(value_id)
    return reader if is_onnx(reader, *op_types) else None


def opset_at_least(graph: PassGraph, version: int) -> int | None:
    """The opset for a default-domain node the pass adds: the model's own when it is recent
    enough (None: make_node's default), else the first that defines the operator."""
    return None if graph.opsets.get("", 0) >= version else version


def _epsilon(dtype: np.dtype) -> float:
    if dtype.kind == "f":
        return float(np.finfo(dtype).eps)
    import ml_dtypes  # NumPy's finfo does not know bfloat16 (loaded already: the constant is one)

    return float(ml_dtypes.finfo(dtype).eps)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"
