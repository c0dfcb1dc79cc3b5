"""The pass contract (seed 000 §6): a name, the lowest optimization level that runs it, whether
it preserves bits, and a run over a PassGraph.

A pass never looks at input shapes (shape-dependent choices belong to plans), so what it
decides holds for every plan of the session. A pass that changes how a result is computed
(BatchNormalization folded into weights, a pattern replaced by one kernel) says
`preserves_bits = False` and is skipped in exact mode.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode


class OptimizationLevel(enum.IntEnum):
    """NONE runs no pass; BASIC the node eliminations and foldings; ALL also the fusions."""

    NONE = 0
    BASIC = 1
    ALL = 2


@dataclass(frozen=True, slots=True)
class PassContext:
    """What a pass may use besides the graph: the session's kernels (constant folding
    computes with them, so folded values have the bits a run would give), whether the
    session is exact, and the creation's cancellation check."""

    kernels: Any
    exact: bool
    check: Any = None


class GraphPass:
    """Base of every pass; subclasses set the class attributes and implement `run`."""

    name: ClassVar[str]
    min_level: ClassVar[OptimizationLevel]
    preserves_bits: ClassVar[bool]

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        raise NotImplementedError


def remove_pass_through(graph: PassGraph, node: PassNode) -> bool:
    """Drop a node whose output 0 equals its input 0, rewiring its readers to the input.

    When the output is a graph output, the input's producer takes over the output's id
    instead, unless the input is itself a graph input, output or constant (then the node
    stays and False is returned)."""
    source, target = node.inputs[0], node.outputs[0]
    if source == ABSENT:
        return False
    if not graph.is_output(target):
        graph.remove(node)
        graph.redirect(target, source)
        return True
    producer = graph.producer(source)
    if (
        producer is None
        or graph.is_output(source)
        or graph.constant(source) is not None
        or graph.readers(source) != [node]
    ):
        return False
    graph.remove(node)
    graph.rename_output(producer, source, target)
    return True


def is_onnx(node: PassNode | None, *op_types: str) -> bool:
    """Whether the node is one of these operators of the default ONNX domain."""
    return (
        node is not None and node.info.domain in ("", "ai.onnx") and node.info.op_type in op_types
    )


def attribute(node: PassNode, name: str, default: Any = None) -> Any:
    """An attribute of the node as the model wrote it (passes read only plain values)."""
    return node.info.attributes.get(name, default)
