"""Common subexpressions: a node computing what an earlier node computes (the same operator
and attributes on the same inputs) is dropped and its readers read the earlier result, as
onnxruntime's CommonSubexpressionElimination does. A balanced tree of x + x sums becomes one
node per level. The kept node computes exactly what the dropped one would, so bits are kept.

It runs on the imported nodes, before operators are made for them, so that a graph with many
duplicates costs their construction, passes and planning once. Nodes whose result is not a pure
function of their inputs are left alone (`pure` says which: random generators and data-dependent
operators are not), as are nodes with subgraphs or an attribute too large or unusual to compare
cheaply, and duplicates whose results a graph output or a subgraph reads by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onemodel.graph import ir

_LARGEST_COMPARED_TENSOR = 4096  # bytes of a tensor attribute worth hashing
_UNCOMPARABLE = object()


def without_common_subexpressions(
    nodes: Sequence[ir.Node], graph: ir.Graph, pure: Callable[[ir.Node], bool]
) -> list[ir.Node]:
    """`nodes` (in dependency order) with each duplicate dropped and its readers rewired."""
    protected = {info.name for info in graph.outputs}
    for node in nodes:
        if node.attributes:
            protected.update(name for body in node.subgraphs() for name in body.outer_names)
    renamed: dict[str, str] = {}
    seen: dict[tuple, ir.Node] = {}
    kept = []
    for node in nodes:
        if renamed and not renamed.keys().isdisjoint(node.inputs):
            inputs = tuple([renamed.get(name, name) for name in node.inputs])
            node = ir.Node(
                node.name, node.op_type, node.domain, inputs, node.outputs, node.attributes
            )
        key = _key(node) if pure(node) else None
        original = None if key is None else seen.get(key)
        if original is None or not protected.isdisjoint(node.outputs):
            if key is not None:
                seen.setdefault(key, node)
            kept.append(node)
            continue
        for duplicate, name in zip(node.outputs, original.outputs, strict=True):
            if duplicate:
                renamed[duplicate] = name
    return kept


def _key(node: ir.Node) -> tuple | None:
    """What makes two nodes compute the same values, or None when that is not known."""
    attributes = []
    for name, value in sorted(node.attributes.items()) if node.attributes else ():
        frozen = _frozen(value)
        if frozen is _UNCOMPARABLE:
            return None
        attributes.append((name, frozen))
    present = tuple(bool(name) for name in node.outputs)
    return (node.domain, node.op_type, tuple(attributes), node.inputs, present)


def _frozen(value: Any) -> Any:
    """A hashable form of an attribute value, tagged by kind (1 and 1.0 differ as attributes),
    or _UNCOMPARABLE (graphs among them)."""
    if isinstance(value, bool | int):
        return ("i", int(value))
    if isinstance(value, float):
        return ("f", "nan" if math.isnan(value) else value.hex())
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list | tuple):
        items = tuple(_frozen(item) for item in value)
        return _UNCOMPARABLE if any(item is _UNCOMPARABLE for item in items) else ("l", items)
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O" or value.nbytes > _LARGEST_COMPARED_TENSOR:
            return _UNCOMPARABLE
        return ("t", value.dtype.str, value.shape, value.tobytes())
    return _UNCOMPARABLE
