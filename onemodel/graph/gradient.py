"""The Gradient operator of ai.onnx.preview.training, expanded into ordinary nodes.

Gradient(xs) differentiates `y`, a value of the graph the node lives in, with respect to each
x in `xs` (the gradient of sum(y) when y is not a scalar). An operator only sees its own node,
so the expansion happens on the IR before compiling: the forward nodes between xs and y are
walked backwards and each contributes its local derivative as Add/Sub/Mul/Div/Neg nodes, with
two internal operators for what ONNX cannot say without shapes: a tensor of ones shaped like
another (the seed) and a sum back to an operand's shape (undoing broadcasting). The backward
nodes then run like any other nodes, in every mode and on every backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from onemodel.errors import ErrorKind, SessionError
from onemodel.graph import ir
from onemodel.graph.operators.base import INTERNAL_DOMAIN

TRAINING_DOMAIN = "ai.onnx.preview.training"

# For each differentiable operator: (node, output gradient name, emit) -> the gradient names
# of its inputs, in order, before un-broadcasting.
Emit = Callable[[str, list[str]], str]


def _add(node: ir.Node, g: str, emit: Emit) -> list[str]:
    return [g, g]


def _sub(node: ir.Node, g: str, emit: Emit) -> list[str]:
    return [g, emit("Neg", [g])]


def _mul(node: ir.Node, g: str, emit: Emit) -> list[str]:
    a, b = node.inputs
    return [emit("Mul", [g, b]), emit("Mul", [g, a])]


def _div(node: ir.Node, g: str, emit: Emit) -> list[str]:
    b = node.inputs[1]
    quotient = node.outputs[0]  # d(a/b)/db = -(a/b)/b
    return [emit("Div", [g, b]), emit("Neg", [emit("Div", [emit("Mul", [g, quotient]), b])])]


def _neg(node: ir.Node, g: str, emit: Emit) -> list[str]:
    return [emit("Neg", [g])]


def _identity(node: ir.Node, g: str, emit: Emit) -> list[str]:
    return [g]


_RULES = {"Add": _add, "Sub": _sub, "Mul": _mul, "Div": _div, "Neg": _neg, "Identity": _identity}


def has_gradients(graph: ir.Graph) -> bool:
    return any(n.op_type == "Gradient" and n.domain == TRAINING_DOMAIN for n in graph.nodes)


def expand_gradients(model: ir.Model) -> ir.Model:
    """The model with every Gradient node of its main graph replaced by backward nodes."""
    nodes: list[ir.Node] = []
    for node in model.graph.nodes:
        if node.op_type == "Gradient" and node.domain == TRAINING_DOMAIN:
            nodes.extend(_backward(node, nodes))
        else:
            nodes.append(node)
    graph = dataclasses.replace(model.graph, nodes=tuple(nodes))
    return dataclasses.replace(model, graph=graph, opsets={**model.opsets, INTERNAL_DOMAIN: 1})


def _backward(gradient: ir.Node, forward: list[ir.Node]) -> list[ir.Node]:
    xs = [str(x) for x in gradient.attributes.get("xs", [])]
    y = gradient.attributes.get("y")
    if not xs or not isinstance(y, str) or len(xs) != len(gradient.outputs):
        raise SessionError(
            ErrorKind.INVALID_MODEL,
            "Gradient needs `xs` naming one input per output and `y` naming a value",
            node=gradient.name,
        )
    producers = {out: node for node in forward for out in node.outputs}
    path = _nodes_between(set(xs), y, producers, gradient.name)
    emitted: list[ir.Node] = []

    def emit(op_type: str, inputs: list[str], domain: str = "") -> str:
        name = f"{gradient.name}/grad{len(emitted)}"
        emitted.append(ir.Node(name, op_type, domain, tuple(inputs), (name,)))
        return name

    grads: dict[str, list[str]] = {y: [emit("OnesLike", [y], INTERNAL_DOMAIN)]}
    for node in reversed(path):
        (output,) = node.outputs
        if output not in grads:
            continue
        g = _total(grads[output], emit)
        for operand, local in zip(node.inputs, _RULES[node.op_type](node, g, emit), strict=True):
            shaped = emit("SumToShape", [local, operand], INTERNAL_DOMAIN)
            grads.setdefault(operand, []).append(shaped)
    for x, out in zip(xs, gradient.outputs, strict=True):
        total = (
            _total(grads[x], emit)
            if x in grads
            else emit("Mul", [emit("OnesLike", [x], INTERNAL_DOMAIN), _zero(x, emit)])
        )
        emitted.append(ir.Node(f"{gradient.name}/{out}", "Identity", "", (total,), (out,)))
    return emitted


def _zero(like: str, emit: Emit) -> str:
    ones = emit("OnesLike", [like], INTERNAL_DOMAIN)
    return emit("Sub", [ones, ones])


def _total(parts: list[str], emit: Emit) -> str:
    total = parts[0]
    for part in parts[1:]:
        total = emit("Add", [total, part])
    return total


def _nodes_between(
    xs: set[str], y: str, producers: dict[str, ir.Node], where: str
) -> list[ir.Node]:
    """The forward nodes on a path from xs to y, in graph order; each must have a rule."""
    needed: list[ir.Node] = []
    seen: set[str] = set()
    stack = [y]
    while stack:
        value = stack.pop()
        node = producers.get(value)
        if value in seen or value in xs or node is None:
            continue
        seen.add(value)
        needed.append(node)
        stack.extend(name for name in node.inputs if name)
    reaches = set(xs)
    order = {id(node): index for index, node in enumerate(producers.values())}
    path = []
    for node in sorted(needed, key=lambda n: order[id(n)]):
        if any(name in reaches for name in node.inputs):
            if node.op_type not in _RULES or node.domain:
                raise SessionError(
                    ErrorKind.UNSUPPORTED,
                    f"Gradient through {node.op_type} is not supported (only "
                    f"{', '.join(sorted(_RULES))})",
                    node=where,
                )
            reaches.update(node.outputs)
            path.append(node)
    return path
