"""The layer norm that exporters write out op by op (PyTorch below opset 17, TensorFlow/Keras,
older transformers exports) becomes one LayerNormalization:

    mean = ReduceMean(x, axes)        d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2) | Mul(d, d), axes)
    y    = Div(d, Sqrt(Add(var, eps))) | Mul(d, Reciprocal(Sqrt(Add(var, eps))))
    y    = Add(Mul(y, gamma), beta)   (the Add optional)

Without knowing the rank, only negative axes -k..-1 (keepdims 1) provably name the trailing
axes that LayerNormalization's `axis = -k` covers. gamma and beta must be constants of at most
k dimensions, so that they broadcast over the normalised axes only. Without gamma the pattern
stays: LayerNormalization needs a scale of the normalised shape, which a shape-free pass cannot
build. The kernel computes the statistics in float32 (float64 for doubles) rather than step by
step in x's type, so the bits change.
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
from onemodel.graph.passes.recognise_common import (
    opset_at_least,
    other_input,
    scalar,
    sole_reader,
)

LAYER_NORMALIZATION_OPSET = 17


@dataclass(frozen=True, slots=True)
class _Match:
    nodes: list[PassNode]
    x: int
    trailing: int  # k: the pattern normalises over the last k axes
    epsilon: float
    gamma: int
    beta: int  # ABSENT when no Add follows the scale


class RecogniseLayerNormalization(GraphPass):
    name = "recognise-layer-normalization"
    min_level = OptimizationLevel.ALL
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for sub in graph:
            if sub.removed or not is_onnx(sub, "Sub"):
                continue
            match = _match(graph, sub)
            if match is None:
                continue
            inputs = [match.x, match.gamma] + ([match.beta] if match.beta != ABSENT else [])
            attributes = {"axis": -match.trailing, "epsilon": match.epsilon, "stash_type": 1}
            fused = graph.make_node(
                match.nodes[0].info, "LayerNormalization", inputs, match.nodes[-1].outputs[:1],
                attributes, opset=opset_at_least(graph, LAYER_NORMALIZATION_OPSET),
            )  # fmt: skip
            graph.replace(match.nodes, [fused])


def _match(graph: PassGraph, sub: PassNode) -> _Match | None:
    """The whole pattern around `sub` = Sub(x, mean), or None when any piece is missing or an
    intermediate value is read outside it."""
    x, mean = sub.inputs
    first_mean = graph.producer(mean)
    if not is_onnx(first_mean, "ReduceMean") or first_mean.inputs[0] != x:
        return None
    trailing = _trailing_axes(graph, first_mean)
    if trailing is None or graph.only_reader(mean) is not sub:
        return None
    centred = sub.outputs[0]
    readers = {id(node): node for node in graph.readers(centred)}
    if len(readers) != 2 or graph.is_output(centred):
        return None
    square = next((n for n in readers.values() if _squares(graph, n, centred)), None)
    if square is None:
        return None
    divide = next(n for n in readers.values() if n is not square)
    variance = _variance(graph, square, trailing)
    if variance is None:
        return None
    statistics_nodes, (epsilon, dtype), root = variance
    normalise = _normalise(graph, divide, centred, root)
    if normalise is None:
        return None
    affine = _affine(graph, normalise[-1].outputs[0], trailing, dtype)
    if affine is None:
        return None
    affine_nodes, gamma, beta = affine
    nodes = [first_mean, sub, square, *statistics_nodes, *normalise, *affine_nodes]
    return _Match(nodes, x, trailing, epsilon, gamma, beta)


def _trailing_axes(graph: PassGraph, reduce: PassNode) -> int | None:
    """k when the ReduceMean keeps its dimensions and its axes are exactly -k..-1."""
    if attribute(reduce, "keepdims", 1) != 1:
        return None
    if reduce.info.opset >= 18:
        axes = graph.constant(reduce.inputs[1]) if len(reduce.inputs) > 1 else None
    else:
        axes = attribute(reduce, "axes")
    if axes is None:
        return None
    ordered = sorted(int(axis) for axis in np.asarray(axes).reshape(-1))
    return len(ordered) if ordered and ordered == list(range(-len(ordered), 0)) else None


def _squares(graph: PassGraph, node: PassNode, value: int) -> bool:
    """Pow(value, 2) or Mul(value, value)."""
    if is_onnx(node, "Mul"):
        return node.inputs == [value, value]
    if not is_onnx(node, "Pow") or node.inputs[0] != value:
        return False
    exponent = graph.constant(node.inputs[1])
    return exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0


def _variance(
    graph: PassGraph, square: PassNode, trailing: int
) -> tuple[list[PassNode], tuple[float, np.dtype], int] | None:
    """ReduceMean over the same axes → Add(·, ε) → Sqrt: (those nodes, ε with its type, the
    root's id)."""
    mean = sole_reader(graph, square.outputs[0], "ReduceMean")
    if mean is None or mean.inputs[0] != square.outputs[0]:
        return None
    if _trailing_axes(graph, mean) != trailing:
        return None
    add = sole_reader(graph, mean.outputs[0], "Add")
    epsilon = None if add is None else scalar(graph, other_input(add, mean.outputs[0]))
    if epsilon is None:
        return None
    root = sole_reader(graph, add.outputs[0], "Sqrt")
    if root is None:
        return None
    return [mean, add, root], epsilon, root.outputs[0]


def _normalise(graph: PassGraph, node: PassNode, centred: int, root: int) -> list[PassNode] | None:
    """Div(centred, root), or Mul(centred, Reciprocal(root)) in either order."""
    if is_onnx(node, "Div"):
        return (
            [node] if node.inputs == [centred, root] and graph.only_reader(root) is node else None
        )
    reciprocal = sole_reader(graph, root, "Reciprocal")
    if reciprocal is None or not is_onnx(node, "Mul"):
        return None
    if other_input(node, centred) != reciprocal.outputs[0]:
        return None
    return [reciprocal, node] if graph.only_reader(reciprocal.outputs[0]) is node else None


def _affine(
    graph: PassGraph, normed: int, trailing: int, dtype: np.dtype
) -> tuple[list[PassNode], int, int] | None:
    """Mul(·, gamma) and an optional Add(·, beta): (nodes, gamma, beta or ABSENT)."""
    scale = sole_reader(graph, normed, "Mul")
    gamma = None if scale is None else other_input(scale, normed)
    if gamma is None or not _parameter(graph, gamma, trailing, dtype):
        return None
    shift = sole_reader(graph, scale.outputs[0], "Add")
    beta = None if shift is None else other_input(shift, scale.outputs[0])
    if beta is None or not _parameter(graph, beta, trailing, dtype):
        return [scale], gamma, ABSENT
    return [scale, shift], gamma, beta


def _parameter(graph: PassGraph, value: int, trailing: int, dtype: np.dtype) -> bool:
    """A constant of ε's type with at most `trailing` dimensions (so it broadcasts over the
    normalised axes only)."""
    array = graph.constant(value)
    return array is not None and array.ndim <= trailing and array.dtype == dtype
