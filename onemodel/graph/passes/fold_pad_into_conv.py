"""A zero Pad of the spatial axes whose only reader is a Conv's input becomes that Conv's pads.

TensorFlow's SAME padding at a stride (tf2onnx, Keras, TF-Lite conversions, timm's `tf_`
models) is exported as an explicit Pad before a Conv with pads 0: a copy of every feature map
into a larger one, which the Conv then reads again (TF-EfficientNet-Lite0: 15 Pads, 0.93 ms
of 23.7). The Conv's own pads read the same zeros without the copy, and leave its held forms
(numpy_cpu/depthwise.py) their choice. Pads of N or C, negative pads, another mode or a
nonzero constant stay as they are. The sums are the same, but a path chosen by the pads may
add them in another order, so exact mode does not run this pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext, is_onnx
from onemodel.graph.passes.pass_graph import ABSENT, PassGraph, PassNode


class FoldPadIntoConv(GraphPass):
    name = "fold-pad-into-conv"
    min_level = OptimizationLevel.BASIC
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for pad in graph:
            if pad.removed or not is_onnx(pad, "Pad"):
                continue
            conv = graph.only_reader(pad.outputs[0])
            if not is_onnx(conv, "Conv") or conv.inputs[0] != pad.outputs[0]:
                continue
            attributes = dict(conv.info.attributes)
            auto_pad = attributes.get("auto_pad", "NOTSET")
            if (auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)) != "NOTSET":
                continue
            weight = graph.constant(conv.inputs[1]) if len(conv.inputs) > 1 else None
            spatial = _spatial_pads(graph, pad, None if weight is None else weight.ndim - 2)
            if spatial is None:
                continue
            rank = len(spatial) // 2
            own = [int(p) for p in attributes.get("pads", [0] * (2 * rank))]
            if len(own) != 2 * rank:
                continue
            attributes["pads"] = [a + b for a, b in zip(own, spatial, strict=True)]
            inputs = [pad.inputs[0], *conv.inputs[1:]]
            folded = graph.make_node(
                conv.info, "Conv", inputs, conv.outputs, attributes, opset=conv.info.opset
            )
            graph.replace([pad, conv], [folded])


def _spatial_pads(graph: PassGraph, pad: PassNode, spatial: int | None) -> list[int] | None:
    """The Pad's [begins, ends] of the last `spatial` axes, where it pads only those, with
    zeros, by non-negative amounts; else None."""
    if spatial is None or spatial < 1:
        return None
    attributes = pad.info.attributes
    mode = attributes.get("mode", "constant")
    if (mode.decode() if isinstance(mode, bytes) else str(mode)) != "constant":
        return None
    if pad.info.opset < 11:
        pads = attributes.get("pads" if pad.info.opset >= 2 else "paddings")
        value: Any = attributes.get("value", 0.0)
    else:
        pads = graph.constant(pad.inputs[1]) if len(pad.inputs) > 1 else None
        given = pad.inputs[2] if len(pad.inputs) > 2 else ABSENT
        value = 0.0 if given == ABSENT else graph.constant(given)
        if len(pad.inputs) > 3 and pad.inputs[3] != ABSENT:
            return None  # axes (opset 18): left alone
    if pads is None or value is None or np.size(value) != 1 or float(np.ravel(value)[0]) != 0.0:
        return None
    pads = [int(p) for p in np.ravel(pads)]
    rank = spatial + 2
    if len(pads) != 2 * rank or min(pads) < 0:
        return None
    begins, ends = pads[:rank], pads[rank:]
    if any(begins[:2]) or any(ends[:2]):
        return None
    return begins[2:] + ends[2:]
