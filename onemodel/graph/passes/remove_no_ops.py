"""Identity, inference-time Dropout and Casts to the type a value already has do nothing:
their readers read the input instead."""

from __future__ import annotations

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    attribute,
    remove_pass_through,
)
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode


class RemoveNoOps(GraphPass):
    name = "remove-no-ops"
    min_level = OptimizationLevel.BASIC
    preserves_bits = True

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for node in graph:
            if _passes_input_through(graph, node):
                remove_pass_through(graph, node)


def _passes_input_through(graph: PassGraph, node: PassNode) -> bool:
    if node.info.domain not in ("", "ai.onnx") or not node.inputs:
        return False
    op = node.info.op_type
    if op == "Identity":
        return True
    if op == "Dropout":
        extra_outputs_unused = all(
            v == ABSENT or not (graph.readers(v) or graph.is_output(v)) for v in node.outputs[1:]
        )
        return extra_outputs_unused and _not_training(graph, node)
    if op == "Cast":
        known = graph.elem_type(node.inputs[0])
        return known is not None and known == attribute(node, "to")
    if op == "CastLike":
        known = graph.elem_type(node.inputs[0])
        return known is not None and known == graph.elem_type(node.inputs[1])
    return False


def _not_training(graph: PassGraph, node: PassNode) -> bool:
    """Dropout only copies unless opset-12's training_mode input is given and true (the
    operator refuses the older is_test = 0 when the model is compiled)."""
    if len(node.inputs) < 3 or node.inputs[2] == ABSENT:
        return True
    training = graph.constant(node.inputs[2])
    return training is not None and not bool(training.reshape(-1)[0])
