"""The compiled graph after its passes, written back as an ONNX model to look at (Netron).

Fused steps become one `onemodel.internal.Fused` node whose `body` attribute holds the member
nodes, so a viewer shows both the step and what it runs. Nodes the passes made from a newer
operator set (LayerNormalization, Gelu, Attention) raise the default domain's opset import to
the newest one used, so the file is a record of what runs rather than a model to re-optimise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from onemodel.graph import ir
from onemodel.graph.operators.base import INTERNAL_DOMAIN
from onemodel.graph.operators.fused import Fused


def optimized_model(graph: Any, model: ir.Model) -> onnx.ModelProto:
    """The ModelProto of a CompiledGraph compiled from `model`."""
    to_host = graph.kernels.memory.to_host
    initializers = [
        numpy_helper.from_array(np.asarray(to_host(array)), graph.names[value_id])
        for values in (graph.weights, graph.defaults)
        for value_id, array in values.items()
    ]
    nodes = [_node_proto(node, graph.names) for node in graph.nodes]
    graph_proto = helper.make_graph(
        nodes,
        model.graph.name or "optimized",
        [_value_info(info) for info in model.graph.inputs],
        [_value_info(info) for info in model.graph.outputs],
        initializers,
    )
    opsets = dict(model.opsets)
    for node in graph.nodes:
        domain = ir.canonical_domain(node.info.domain)
        opsets[domain] = max(opsets.get(domain, 1), node.info.opset)
    proto = helper.make_model(
        graph_proto,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets.items()],
        producer_name="onemodel (optimized graph)",
    )
    proto.ir_version = max(model.ir_version, 3)
    return proto


def _node_proto(node: Any, names: Sequence[str]) -> onnx.NodeProto:
    info = node.info
    inputs = [names[v] if v >= 0 else "" for v in node.inputs[: len(info.inputs)]]
    outputs = [names[v] if v >= 0 else "" for v in node.outputs]
    if isinstance(node.operator, Fused):
        members = [m.operator.node for m in node.operator.members]
        body = helper.make_graph(
            [_ir_node_proto(m.ir) for m in members if m.ir is not None],
            info.op_type,
            [helper.make_empty_tensor_value_info(name) for name in inputs if name],
            [helper.make_empty_tensor_value_info(name) for name in outputs if name],
        )
        return helper.make_node(
            "Fused", inputs, outputs, info.name, domain=INTERNAL_DOMAIN, body=body
        )
    proto = _ir_node_proto(info.ir)  # every compiled node keeps the IR node it stands for
    proto.ClearField("input")
    proto.ClearField("output")
    proto.input.extend(inputs)
    proto.output.extend(outputs)
    return proto


def _ir_node_proto(node: ir.Node) -> onnx.NodeProto:
    proto = helper.make_node(node.op_type, list(node.inputs), list(node.outputs), node.name)
    proto.domain = node.domain
    proto.attribute.extend(_attribute(name, value) for name, value in node.attributes.items())
    return proto


def _attribute(name: str, value: Any) -> AttributeProto:
    if isinstance(value, ir.Graph):
        return helper.make_attribute(name, _graph_proto(value))
    if isinstance(value, ir.ValueType):
        return helper.make_attribute(name, _type_proto(value))
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, list | tuple):
        items = [
            _graph_proto(v) if isinstance(v, ir.Graph)
            else numpy_helper.from_array(v) if isinstance(v, np.ndarray)
            else _type_proto(v) if isinstance(v, ir.ValueType)
            else v
            for v in value
        ]  # fmt: skip
        if not items:
            return helper.make_attribute(name, [], attr_type=AttributeProto.INTS)
        return helper.make_attribute(name, items)
    return helper.make_attribute(name, value)


def _graph_proto(graph: ir.Graph) -> onnx.GraphProto:
    return helper.make_graph(
        [_ir_node_proto(node) for node in graph.nodes],
        graph.name,
        [_value_info(info) for info in graph.inputs],
        [_value_info(info) for info in graph.outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in graph.initializers.items()],
    )


def _value_info(info: ir.ValueInfo) -> onnx.ValueInfoProto:
    if info.type.kind == "unknown":
        return helper.make_empty_tensor_value_info(info.name)
    return helper.make_value_info(info.name, _type_proto(info.type))


def _type_proto(value_type: ir.ValueType) -> onnx.TypeProto:
    if value_type.kind == "sequence" and value_type.element is not None:
        return helper.make_sequence_type_proto(_type_proto(value_type.element))
    if value_type.kind == "optional" and value_type.element is not None:
        return helper.make_optional_type_proto(_type_proto(value_type.element))
    return helper.make_tensor_type_proto(value_type.elem_type or 0, value_type.dims)
