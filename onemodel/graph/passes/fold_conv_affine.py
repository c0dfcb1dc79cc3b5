"""A per-channel Mul or Add after a Conv with constant weights is folded into them:
conv(x, W)·c = conv(x, W·c) and (conv(x, W) + B)·c + d = conv(x, W·c) + (B·c + d); after an
inference BatchNormalization with constant parameters, into its scale and shift.

Exporters leave such affine steps after convolutions whose BatchNormalization was folded or
split (the onnx light models: Conv, BatchNormalization, Mul, Add, Relu). Folding them removes
two passes over each output. The products are computed in float64 and rounded once, so
results change in the last bits: not bit-preserving, skipped in exact mode. A bias-free Conv
followed by an Add is left to fold-conv-bias, which preserves bits and runs first.
"""

from __future__ import annotations

import numpy as np

from onemodel.graph.passes.base import (
    GraphPass,
    OptimizationLevel,
    PassContext,
    is_onnx,
)
from onemodel.graph.passes.fold_batch_norm import fold_into_conv, inference_parameters
from onemodel.graph.passes.fold_conv_bias import per_channel
from onemodel.graph.passes.pass_graph import PassGraph, PassNode


class FoldConvAffine(GraphPass):
    name = "fold-conv-affine"
    min_level = OptimizationLevel.BASIC
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for node in graph:
            while node is not None and not node.removed:
                if is_onnx(node, "Conv"):
                    node = _fold_next(graph, node)
                elif is_onnx(node, "BatchNormalization"):
                    node = _fold_into_normalization(graph, node)
                else:
                    break


def _fold_next(graph: PassGraph, conv: PassNode) -> PassNode | None:
    """Fold the Conv's one reader into it when that is a per-channel Mul or Add; returns the
    new Conv, or None when there is nothing (more) to fold."""
    weight = graph.constant(conv.inputs[1]) if len(conv.inputs) > 1 else None
    reader = graph.only_reader(conv.outputs[0])
    if weight is None or not is_onnx(reader, "Mul", "Add"):
        return None
    other = reader.inputs[1] if reader.inputs[0] == conv.outputs[0] else reader.inputs[0]
    constant = graph.constant(other)
    if constant is None or constant.dtype != weight.dtype or not per_channel(constant, weight):
        return None
    values = constant.astype(np.float64).reshape(-1)
    if reader.info.op_type == "Mul":
        return fold_into_conv(graph, conv, reader, (values, np.zeros_like(values)))
    if len(conv.inputs) < 3 or graph.constant(conv.inputs[2]) is None:
        return None  # no bias yet: fold-conv-bias adds it without changing bits
    return fold_into_conv(graph, conv, reader, (np.ones_like(values), values))


def _fold_into_normalization(graph: PassGraph, norm: PassNode) -> PassNode | None:
    """BatchNormalization then a per-channel Mul or Add: one BatchNormalization whose scale
    and shift absorb it. The input's rank must be known, so that the constant's shape can be
    told to run along the channel axis."""
    params = inference_parameters(graph, norm)
    reader = graph.only_reader(norm.outputs[0])
    rank = graph.rank(norm.inputs[0])
    if params is None or rank is None or not is_onnx(reader, "Mul", "Add"):
        return None
    scale, beta = params[0], params[1]
    other = reader.inputs[1] if reader.inputs[0] == norm.outputs[0] else reader.inputs[0]
    constant = graph.constant(other)
    channels, spatial = scale.size, rank - 2
    shapes = ((channels, *(1,) * spatial), (1, channels, *(1,) * spatial))
    if constant is None or constant.dtype != scale.dtype or tuple(constant.shape) not in shapes:
        return None
    values = constant.astype(np.float64).reshape(-1)
    if reader.info.op_type == "Mul":
        scale, beta = scale.astype(np.float64) * values, beta.astype(np.float64) * values
    else:
        beta = beta.astype(np.float64) + values
    inputs = [
        norm.inputs[0],
        graph.add_constant("folded_scale", scale.astype(params[0].dtype)),
        graph.add_constant("folded_shift", beta.astype(params[1].dtype)),
        *norm.inputs[3:5],
    ]
    folded = graph.make_node(
        norm.info, "BatchNormalization", inputs, reader.outputs[:1],
        dict(norm.info.attributes), opset=norm.info.opset,
    )  # fmt: skip
    graph.replace([norm, reader], [folded])
    return folded
