"""Scaled dot-product attention written out op by op becomes one Attention (opset 23):

    Y = MatMul(Softmax(MatMul(Q, Transpose(K', perm)) / c [+ mask], axis=-1), V)

(or · c instead of / c). The Transpose tells the rank r (3 or 4) without looking at shapes;
Q and V must provably have that rank too (their producers say so), since MatMul would
broadcast a lower rank where Attention refuses it. Attention's K is the Transpose's input when
the perm swaps only the last two axes, else a Transpose of K' by the perm with its last two
entries swapped. Rank-3 patterns are one head of a batch: Attention's packed 3-D layout with
one query and one key/value head; a mask then has to be a constant, reshaped to 4-D here.

Where the semantics differ, the pass stays away: Softmax below opset 13 (it flattens the
trailing axes), softmax over another axis, float16 and bfloat16 (Attention rounds √scale to
them before scaling Q and K, which moves the scores by more than one rounding), and constant
masks whose last extent is 1 (Attention pads a short mask with −inf rather than broadcasting
it). Two differences are accepted: a query row whose keys are all masked with −inf gives
zeros rather than NaN, and a run-time mask must broadcast to the scores without widening them
(Attention reports one that does not).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    attribute,
    is_onnx,
)
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode
from onemodel.graph.passes.recognise_common import scalar, sole_reader

ATTENTION_OPSET = 23
SUPPORTED_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
_RANK_SEARCH_DEPTH = 8  # how many producers `_rank` follows before giving up


@dataclass(frozen=True, slots=True)
class _Scores:
    """MatMul(Q, Kᵀ) scaled by a constant: its nodes, Q, the Transpose making Kᵀ, r and
    the scale."""

    nodes: list[PassNode]
    query: int
    transpose: PassNode
    rank: int
    scale: float


class RecogniseAttention(GraphPass):
    name = "recognise-attention"
    min_level = OptimizationLevel.ALL
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for softmax in graph:
            if not softmax.removed and is_onnx(softmax, "Softmax"):
                _recognise(graph, softmax)


def _recognise(graph: PassGraph, softmax: PassNode) -> None:
    if softmax.info.opset < 13:
        return
    product = sole_reader(graph, softmax.outputs[0], "MatMul")
    if product is None or product.inputs[0] != softmax.outputs[0]:
        return
    found = _scores_and_mask(graph, softmax.inputs[0])
    if found is None:
        return
    scores, mask_nodes, mask = found
    rank = scores.rank
    if attribute(softmax, "axis", -1) not in (-1, rank - 1):
        return
    value = product.inputs[1]
    if _rank(graph, scores.query, _RANK_SEARCH_DEPTH) != rank:
        return
    if _rank(graph, value, _RANK_SEARCH_DEPTH) != rank:
        return
    if mask != ABSENT:
        mask = _attention_mask(graph, mask, rank)
        if mask is None:
            return
    key, added = _key(graph, scores.transpose)
    attributes = {"scale": scores.scale}
    if rank == 3:
        attributes.update(q_num_heads=1, kv_num_heads=1)
    inputs = [scores.query, key, value] + ([mask] if mask != ABSENT else [])
    attention = graph.make_node(
        scores.nodes[0].info, "Attention", inputs, product.outputs[:1], attributes,
        opset=ATTENTION_OPSET,
    )  # fmt: skip
    graph.replace([*scores.nodes, *mask_nodes, softmax, product], [*added, attention])


def _scores_and_mask(graph: PassGraph, logits: int) -> tuple[_Scores, list[PassNode], int] | None:
    """The scaled scores feeding the softmax, and the Add of a mask between them when there is
    one: (scores, [the Add] or [], the mask or ABSENT)."""
    node = graph.producer(logits)
    if graph.only_reader(logits) is None or node is None:
        return None
    scores = _scaled_scores(graph, node)
    if scores is not None:
        return scores, [], ABSENT
    if not is_onnx(node, "Add"):
        return None
    for summand, mask in (node.inputs, node.inputs[::-1]):
        producer = graph.producer(summand)
        if producer is not None and graph.only_reader(summand) is node:
            scores = _scaled_scores(graph, producer)
            if scores is not None:
                return scores, [node], mask
    return None


def _scaled_scores(graph: PassGraph, node: PassNode) -> _Scores | None:
    """Div(MatMul(Q, Kᵀ), c) or Mul(MatMul(Q, Kᵀ), c) in either order, c a positive float32 or
    float64 scalar constant of at most r dimensions."""
    if not is_onnx(node, "Div", "Mul"):
        return None
    for raw, constant in (node.inputs, node.inputs[::-1]):
        if is_onnx(node, "Div") and raw != node.inputs[0]:
            continue
        matmul = graph.producer(raw)
        found = scalar(graph, constant)
        if not is_onnx(matmul, "MatMul") or found is None or graph.only_reader(raw) is not node:
            continue
        value, dtype = found
        scale = (1 / value if value else 0.0) if is_onnx(node, "Div") else value
        transpose = graph.producer(matmul.inputs[1])
        perm = attribute(transpose, "perm") if is_onnx(transpose, "Transpose") else None
        if perm is None or len(perm) not in (3, 4) or dtype not in SUPPORTED_TYPES:
            continue
        if not 0 < scale < float("inf") or graph.constant(constant).ndim > len(perm):
            continue  # Attention takes no negative, zero or infinite scale
        return _Scores([matmul, node], matmul.inputs[0], transpose, len(perm), scale)
    return None


def _key(graph: PassGraph, transpose: PassNode) -> tuple[int, list[PassNode]]:
    """K for Attention, undoing the swap of the last two axes that Kᵀ = Transpose(K', perm)
    made: (K's id, the Transpose added for it, if one is needed)."""
    perm = [int(axis) for axis in attribute(transpose, "perm")]
    perm[-2], perm[-1] = perm[-1], perm[-2]
    source = transpose.inputs[0]
    if perm == list(range(len(perm))):
        return source, []
    key = graph.add_value("key")
    node = graph.make_node(
        transpose.info, "Transpose", [source], [key], {"perm": perm}, opset=transpose.info.opset
    )
    return key, [node]


def _attention_mask(graph: PassGraph, mask: int, rank: int) -> int | None:
    """The mask as Attention's attn_mask, or None when the replacement would change what it
    does: a constant must not be wider than r dimensions nor end in a 1 Attention would pad,
    and a rank-3 pattern's mask must be a constant, reshaped to (B, 1, S, T) here."""
    array = graph.constant(mask)
    if array is None:
        return mask if rank == 4 else None
    if array.ndim > rank or (array.ndim and array.shape[-1] == 1):
        return None
    if rank == 4:
        return mask
    widened = array.reshape((1,) * (3 - array.ndim) + array.shape)
    return graph.add_constant("attn_mask", np.expand_dims(widened, 1))


def _rank(graph: PassGraph, value: int, depth: int) -> int | None:
    """The value's rank when its producers prove it: a Transpose's perm, a constant Reshape
    target, a MatMul with a constant weight, an element-wise op with a constant operand."""
    node = graph.producer(value)
    if node is None or depth == 0:
        return None
    if is_onnx(node, "Transpose"):
        perm = attribute(node, "perm")
        return None if perm is None else len(perm)
    if is_onnx(node, "Reshape"):
        target = graph.constant(node.inputs[1])
        return None if target is None else target.size
    if not is_onnx(node, "MatMul", "Add", "Sub", "Mul", "Div") or len(node.inputs) != 2:
        return None
    weights = [graph.constant(v) for v in node.inputs]
    if sum(w is not None for w in weights) != 1:
        return None
    index = 0 if weights[1] is not None else 1
    weight = weights[1 - index]
    if is_onnx(node, "MatMul") and (index != 0 or weight.ndim < 2):
        return None  # a 1-D weight drops an axis; a constant left operand is rare
    found = _rank(graph, node.inputs[index], depth - 1)
    if found is None or (is_onnx(node, "MatMul") and found < 2):
        return None
    return max(found, weight.ndim)
