"""SiLU written out as x · Sigmoid(x) (PyTorch's exports of nn.SiLU before opset 24, Keras'
swish) becomes one Swish (opset 24, alpha 1), in either operand order of the Mul.

Alone it saves a pass (Swish's kernel is three passes and a tanh against Sigmoid's three and
a tanh plus the Mul), and it makes x's producer's result single-read again, so that the
fusion pass takes the activation into a Conv's step as its tail: EfficientNet-B0 and
YOLO-style detectors have one after nearly every Conv. The bits change (Swish's kernel
rounds differently from the product of a rounded sigmoid), so fast mode only.
"""

from __future__ import annotations

from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext, is_onnx
from onemodel.graph.passes.pass_graph import PassGraph
from onemodel.graph.passes.recognise_common import opset_at_least, other_input, sole_reader

SWISH_OPSET = 24


class RecogniseSwish(GraphPass):
    name = "recognise-swish"
    min_level = OptimizationLevel.ALL
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for sigmoid in graph:
            if sigmoid.removed or not is_onnx(sigmoid, "Sigmoid"):
                continue
            x, gate = sigmoid.inputs[0], sigmoid.outputs[0]
            product = sole_reader(graph, gate, "Mul")
            if product is None or other_input(product, gate) != x:
                continue
            swish = graph.make_node(
                product.info, "Swish", [x], product.outputs[:1],
                opset=opset_at_least(graph, SWISH_OPSET),
            )  # fmt: skip
            graph.replace([sigmoid, product], [swish])
