"""GELU written out op by op becomes one Gelu (opset 20), in both of its forms:

    erf:   0.5·x·(1 + erf(x/√2))                       (Div by √2 or Mul by 1/√2)
    tanh:  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (Pow(x, 3), x·(x·x) or (x·x)·x)

The final product is matched in the orders PyTorch and TensorFlow emit: (x·(1 + f))·0.5,
(x·0.5)·(1 + f) and x·((1 + f)·0.5), every Mul and Add in either operand order. Constants
must equal the formula's up to their type's rounding. The Gelu kernel evaluates the formula
in a form without 1 + erf's cancellation, so the bits change.
"""

from __future__ import annotations

import math

from onemodel.graph.passes.base import GraphPass, OptimizationLevel, PassContext, is_onnx
from onemodel.graph.passes.pass_graph import PassGraph, PassNode
from onemodel.graph.passes.recognise_common import (
    near,
    opset_at_least,
    other_input,
    scaled_operand,
    sole_reader,
)

GELU_OPSET = 20
TANH_SCALE = math.sqrt(2 / math.pi)
CUBE_COEFFICIENT = 0.044715


class RecogniseGelu(GraphPass):
    name = "recognise-gelu"
    min_level = OptimizationLevel.ALL
    preserves_bits = False

    def run(self, graph: PassGraph, ctx: PassContext) -> None:
        for node in graph:
            if node.removed:
                continue
            if is_onnx(node, "Erf"):
                match, approximate = _erf_form(graph, node), "none"
            elif is_onnx(node, "Tanh"):
                match, approximate = _tanh_form(graph, node), "tanh"
            else:
                continue
            if match is not None:
                x, nodes = match
                gelu = graph.make_node(
                    nodes[0].info, "Gelu", [x], nodes[-1].outputs[:1],
                    {"approximate": approximate}, opset=opset_at_least(graph, GELU_OPSET),
                )  # fmt: skip
                graph.replace(nodes, [gelu])


def _erf_form(graph: PassGraph, erf: PassNode) -> tuple[int, list[PassNode]] | None:
    """x and the pattern's nodes in order, for erf(x/√2) or erf(x·(1/√2))."""
    scaled = erf.inputs[0]
    divide = graph.producer(scaled)
    if divide is None or graph.only_reader(scaled) is not erf:
        return None
    if is_onnx(divide, "Div") and near(graph, divide.inputs[1], math.sqrt(2)):
        x = divide.inputs[0]
    elif is_onnx(divide, "Mul"):
        x = scaled_operand(graph, divide, math.sqrt(0.5))
    else:
        return None
    tail = None if x is None else _half_x_times_one_plus(graph, erf, x)
    return None if tail is None else (x, [divide, erf, *tail])


def _tanh_form(graph: PassGraph, tanh: PassNode) -> tuple[int, list[PassNode]] | None:
    """x and the pattern's nodes in order, for tanh(√(2/π)·(x + 0.044715·x³))."""
    scaled = tanh.inputs[0]
    scale = graph.producer(scaled)
    if not is_onnx(scale, "Mul") or graph.only_reader(scaled) is not tanh:
        return None
    inner = scaled_operand(graph, scale, TANH_SCALE)
    total = None if inner is None else graph.producer(inner)
    if not is_onnx(total, "Add") or graph.only_reader(inner) is not scale:
        return None
    for x, term in (total.inputs, total.inputs[::-1]):
        cubic = _cubic_term(graph, term, x, total)
        if cubic is not None:
            tail = _half_x_times_one_plus(graph, tanh, x)
            return None if tail is None else (x, [*cubic, total, scale, tanh, *tail])
    return None


def _cubic_term(graph: PassGraph, term: int, x: int, reader: PassNode) -> list[PassNode] | None:
    """The nodes of 0.044715·x³ (in either order), read only by `reader`."""
    product = graph.producer(term)
    if not is_onnx(product, "Mul") or graph.only_reader(term) is not reader:
        return None
    cube = scaled_operand(graph, product, CUBE_COEFFICIENT)
    nodes = None if cube is None else _cube(graph, cube, x, product)
    return None if nodes is None else [*nodes, product]


def _cube(graph: PassGraph, value: int, x: int, reader: PassNode) -> list[PassNode] | None:
    """The nodes computing x³ as Pow(x, 3), x·(x·x) or (x·x)·x, read only by `reader`."""
    node = graph.producer(value)
    if node is None or graph.only_reader(value) is not reader:
        return None
    if is_onnx(node, "Pow"):
        exponent = graph.constant(node.inputs[1])
        is_three = exponent is not None and exponent.size == 1 and float(exponent.flat[0]) == 3
        return [node] if node.inputs[0] == x and is_three else None
    if not is_onnx(node, "Mul") or x not in node.inputs:
        return None
    square = graph.producer(other_input(node, x))
    if is_onnx(square, "Mul") and square.inputs == [x, x]:
        return [square, node] if graph.only_reader(square.outputs[0]) is node else None
    return None


def _half_x_times_one_plus(graph: PassGraph, f: PassNode, x: int) -> list[PassNode] | None:
    """The nodes of 0.5·x·(1 + f) after f, in one of the orders exporters write it."""
    plus = sole_reader(graph, f.outputs[0], "Add")
    if plus is None or not near(graph, other_input(plus, f.outputs[0]), 1.0):
        return None
    first = sole_reader(graph, plus.outputs[0], "Mul")
    operand = None if first is None else other_input(first, plus.outputs[0])
    if operand is None:
        return None
    if operand == x or near(graph, operand, 0.5):  # (x·(1 + f))·0.5 or ((1 + f)·0.5)·x
        last = sole_reader(graph, first.outputs[0], "Mul")
        remaining = None if last is None else other_input(last, first.outputs[0])
        wanted = remaining is not None and (
            near(graph, remaining, 0.5) if operand == x else remaining == x
        )
        return [plus, first, last] if wanted else None
    half = graph.producer(operand)  # (x·0.5)·(1 + f)
    if not is_onnx(half, "Mul") or graph.only_reader(operand) is not first:
        return None
    if x not in half.inputs or not near(graph, other_input(half, x), 0.5):
        return None
    return [half, plus, first]
