"""A bias-free Conv whose only reader adds a per-channel constant takes that constant as its
bias (seed 001's conv2d+add; JAX and TensorFlow export conv biases this way). The Conv kernel
adds its bias to the finished sum with the same element-wise add, so bits are preserved.

Per-channel means shaped [O, 1, …, 1] or [1, O, 1, …, 1] with one 1 per spatial axis, which is
what broadcasting against [N, O, *spatial] needs; seed 001 also accepts [O], which under ONNX
broadcasting would add along the last spatial axis instead, so it is left alone here.
"""

from __future__ import annotations

import numpy as np

from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext, is_onnx
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph


class FoldConvBias(GraphPass):
    name = "fold-conv-bias"
    min_level = OptimizationLevel.BASIC
    preserves_bits = True

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for conv in graph:
            if conv.removed or not is_onnx(conv, "Conv"):
                continue
            weight = graph.constant(conv.inputs[1]) if len(conv.inputs) > 1 else None
            if weight is None or (len(conv.inputs) > 2 and conv.inputs[2] != ABSENT):
                continue
            add = graph.only_reader(conv.outputs[0])
            if not is_onnx(add, "Add"):
                continue
            other = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
            bias = graph.constant(other)
            if bias is None or bias.dtype != weight.dtype or not per_channel(bias, weight):
                continue
            inputs = [*conv.inputs[:2], graph.add_constant("conv_bias", bias.reshape(-1))]
            folded = graph.make_node(
                conv.info, "Conv", inputs, add.outputs, dict(conv.info.attributes),
                opset=conv.info.opset,
            )  # fmt: skip
            graph.replace([conv, add], [folded])


def per_channel(bias: np.ndarray, weight: np.ndarray) -> bool:
    """Whether `bias` broadcasts against a Conv output (N, O, *spatial) along O only."""
    channels, spatial = weight.shape[0], weight.ndim - 2
    shape = tuple(bias.shape)
    return shape in ((channels, *(1,) * spatial), (1, channels, *(1,) * spatial))
