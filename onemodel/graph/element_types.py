"""The element types a model uses, each with a value or node that uses it.

A session asks before choosing its backend: CuPy has no bfloat16, float8, 4-bit or string
arrays, so a model that uses them runs on NumPy instead (or is refused when CuPy was forced),
rather than failing halfway through a run.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from onemodel.graph import ir
from onemodel.tensors import onnx_code_for_numpy

# Attributes whose value names an element type or holds a tensor whose type is used.
_TYPE_ATTRIBUTES = ("to", "dtype", "output_datatype")


def element_types(model: ir.Model) -> dict[int, str]:
    """ONNX element type code -> the name of the first value or node seen using it."""
    found: dict[int, str] = {}
    for code, where in _uses(model.graph):
        found.setdefault(code, where)
    return found


def _uses(graph: ir.Graph) -> Iterator[tuple[int, str]]:
    for info in (*graph.inputs, *graph.outputs, *graph.value_infos.values()):
        value_type = info.type
        while value_type.element is not None:
            value_type = value_type.element
        if value_type.elem_type:
            yield value_type.elem_type, info.name
    for name, array in graph.initializers.items():
        yield _code(array), name
    for node in graph.nodes:
        where = node.name or node.op_type
        for key, value in node.attributes.items():
            if key in _TYPE_ATTRIBUTES and isinstance(value, int) and value > 0:
                yield value, where
            elif isinstance(value, np.ndarray):
                yield _code(value), where
        for body in node.subgraphs():
            yield from _uses(body)


def _code(array: np.ndarray) -> int:
    try:
        return onnx_code_for_numpy(array.dtype)
    except Exception:  # a dtype with no ONNX code says nothing about the backend choice
        return 0
