"""Transpose after Transpose becomes one Transpose (or nothing, when the two cancel), and
Reshape after Reshape becomes one Reshape. Both only move data, so bits are preserved."""

from __future__ import annotations

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    attribute,
    remove_pass_through,
)
from onemodel.graph.passes.pass_graph import PassGraph, PassNode


class CollapseTransposeReshape(GraphPass):
    name = "collapse-transpose-reshape"
    min_level = OptimizationLevel.BASIC
    preserves_bits = True

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for node in graph:
            if node.removed or node.info.domain not in ("", "ai.onnx"):
                continue
            if node.info.op_type == "Transpose":
                _merge_transposes(graph, node)
            elif node.info.op_type == "Reshape":
                _merge_reshapes(graph, node)


def _inner(graph: PassGraph, node: PassNode, op_type: str) -> PassNode | None:
    """The node of type `op_type` producing `node`'s input 0, when `node` is its only reader."""
    producer = graph.producer(node.inputs[0])
    if producer is None or producer.info.op_type != op_type:
        return None
    if producer.info.domain not in ("", "ai.onnx") or graph.only_reader(node.inputs[0]) is None:
        return None
    return producer


def _merge_transposes(graph: PassGraph, outer: PassNode) -> None:
    """Transpose(Transpose(x, p), q) = Transpose(x, r) with r[i] = p[q[i]]. Without a perm
    the rank (unknown here) would decide it, so such pairs are left alone."""
    inner = _inner(graph, outer, "Transpose")
    p, q = attribute(inner, "perm") if inner else None, attribute(outer, "perm")
    if inner is None or p is None or q is None or len(p) != len(q):
        return
    composed = [int(p[int(i)]) for i in q]
    merged = graph.make_node(
        outer.info, "Transpose", [inner.inputs[0]], outer.outputs, {"perm": composed},
        opset=outer.info.opset,
    )  # fmt: skip
    graph.replace([inner, outer], [merged])
    if composed == list(range(len(composed))):
        remove_pass_through(graph, merged)


def _merge_reshapes(graph: PassGraph, outer: PassNode) -> None:
    """Reshape(Reshape(x, a), b) = Reshape(x, b) when b is a constant whose zeros cannot
    mean "copy this extent from the input" (no zeros, or allowzero = 1)."""
    inner = _inner(graph, outer, "Reshape")
    shape = graph.constant(outer.inputs[1]) if len(outer.inputs) > 1 else None
    if inner is None or shape is None:
        return
    if (shape == 0).any() and not attribute(outer, "allowzero", 0):
        return
    merged = graph.make_node(
        outer.info, "Reshape", [inner.inputs[0], outer.inputs[1]], outer.outputs,
        dict(outer.info.attributes), opset=outer.info.opset,
    )  # fmt: skip
    graph.replace([inner, outer], [merged])
