"""Chains of element-wise operators, and an element-wise tail after a Conv, Gemm, MatMul or
normalisation (its bias Add, its activation), become one Fused step (seed 001's fused groups,
onnxruntime's activation and MatMul+Add fusions). A chain continues while the previous result
has exactly one reader, the next element-wise node, so no intermediate value is needed
elsewhere. Each member computes as it would alone, so bits are preserved.
"""

from __future__ import annotations

from onemodel.graph.ir import canonical_domain
from onemodel.graph.operators.base import INTERNAL_DOMAIN, NodeInfo
from onemodel.graph.operators.fused import PREVIOUS, Fused, Member
from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode

# Element-wise operators whose result has the type of their first input and one element per
# element of the broadcast inputs (so a chain's result can be written over its predecessor).
ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Max", "Min", "Abs", "Neg", "Reciprocal", "Sqrt", "Exp", "Log",
    "Erf", "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
    "Selu", "Celu", "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Clip", "Sin",
    "Cos", "Floor", "Ceil", "Swish",
})  # fmt: skip
# Operators an element-wise tail may follow.
HEADS = (
    frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization"})
    | frozenset({"LayerNormalization", "InstanceNormalization"})
    | ELEMENTWISE
)


class FuseElementwise(GraphPass):
    name = "fuse-elementwise"
    min_level = OptimizationLevel.ALL
    preserves_bits = True

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for head in graph:
            if head.removed or not _is(head, HEADS):
                continue
            chain = [head]
            while (follower := _follower(graph, chain[-1])) is not None:
                chain.append(follower)
            if len(chain) > 1:
                graph.replace(chain, [_fuse(graph, chain)])


def _is(node: PassNode, names: frozenset[str]) -> bool:
    return canonical_domain(node.info.domain) == "" and node.info.op_type in names


def _single_output(node: PassNode) -> int | None:
    live = [v for v in node.outputs if v != ABSENT]
    return live[0] if len(live) == 1 and node.outputs[0] == live[0] else None


def _follower(graph: PassGraph, node: PassNode) -> PassNode | None:
    """The element-wise node that alone reads `node`'s single result, if there is one."""
    result = _single_output(node)
    if result is None:
        return None
    reader = graph.only_reader(result)
    if reader is None or not _is(reader, ELEMENTWISE) or _single_output(reader) is None:
        return None
    return reader


def _fuse(graph: PassGraph, chain: list[PassNode]) -> PassNode:
    """One node reading every input the chain reads from outside, producing its last result."""
    inputs: list[int] = []
    members = []
    previous = None
    for node in chain:
        sources: list[int | None] = []
        for value_id in node.inputs:
            if value_id == ABSENT:
                sources.append(None)
            elif value_id == previous:
                sources.append(PREVIOUS)
            else:
                if value_id not in inputs:
                    inputs.append(value_id)
                sources.append(inputs.index(value_id))
        members.append(Member(node.operator, tuple(sources)))
        previous = node.outputs[0]
    head, last = chain[0], chain[-1]
    label = "+".join(node.info.op_type for node in chain)
    info = NodeInfo(
        head.info.name, f"fused({label})", INTERNAL_DOMAIN, 1,
        tuple(graph.names[v] for v in inputs), tuple(graph.names[v] for v in last.outputs[:1]),
    )  # fmt: skip
    return PassNode(Fused(info, members), info, inputs, last.outputs[:1])
