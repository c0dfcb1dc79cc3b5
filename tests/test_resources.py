"""Requests beyond the tensor limits are refused before anything is allocated; models whose
declarations are beyond them, or that ONNX's IR versions do not cover, are invalid."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel import ErrorKind, Session, SessionError
from onemodel.graph.importer import model_from_proto

HUGE = np.array([100_000, 100_000, 3], np.int64)


def one_node(op_type, inputs, outputs=("y",), **attributes):
    nodes = [
        helper.make_node(op_type, [n for n, _ in inputs], list(outputs), name="n", **attributes)
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs
        ],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("op_type", "inputs"),
    [
        ("Reshape", [("x", np.zeros(3, np.float32)), ("shape", HUGE)]),
        ("Expand", [("x", np.zeros(3, np.float32)), ("shape", HUGE)]),
        ("ConstantOfShape", [("shape", HUGE)]),
        ("Tile", [("x", np.zeros((1, 1, 3), np.float32)), ("repeats", HUGE)]),
    ],
)
def test_oversized_requests_are_refused_before_allocating(op_type, inputs):
    session = Session.create(model_from_proto(one_node(op_type, inputs)))
    tracemalloc.start()
    try:
        with pytest.raises(SessionError) as error:
            session.run(None, dict(inputs))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.value.kind is ErrorKind.INVALID_INPUT and error.value.node == "n"
    assert "100000" in str(error.value)
    assert peak < 1024**2


def test_declared_shapes_beyond_the_limits_make_the_model_invalid():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [100_000, 100_000, 0])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y])
    )
    with pytest.raises(SessionError, match="prefix product") as error:
        Session.create(model_from_proto(model))
    assert error.value.kind is ErrorKind.INVALID_MODEL and error.value.value == "x"


@pytest.mark.parametrize("ir_version", [0, onnx.IR_VERSION + 1])
def test_ir_versions_onnx_does_not_define_make_the_model_invalid(ir_version):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [x])
    )
    model.ir_version = ir_version
    with pytest.raises(SessionError, match="IR version") as error:
        Session.load(model.SerializeToString())
    assert error.value.kind is ErrorKind.INVALID_MODEL


def test_a_model_of_100000_nodes_loads_in_seconds():
    count = 100_000
    nodes = [helper.make_node("Identity", [f"v{i}"], [f"v{i + 1}"]) for i in range(count)]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(f"v{count}", TensorProto.FLOAT, [4])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    started = time.process_time()  # CPU time: other load on a shared machine does not count
    session = Session.load(data)
    (y,) = session.run(None, {"v0": np.arange(4, dtype=np.float32)})
    assert time.process_time() - started < 30  # seconds; tests/test_creation_scaling.py: growth
    np.testing.assert_array_equal(y, np.arange(4, dtype=np.float32))


def _varint(value: int) -> bytes:
    encoded = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        encoded.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(encoded)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, encoded by hand: Python's protobuf cannot even build a
    message nested this deep."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _graph_attribute(name: bytes, graph: bytes) -> bytes:
    return _field(1, name) + _field(6, graph) + _varint(20 << 3) + _varint(5)  # type GRAPH


def nested_if_model(depth: int) -> bytes:
    """Model bytes whose If nodes nest `depth` deep, each then_branch holding the next If."""
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]).SerializeToString()
    leaf = _field(1, _field(1, b"x") + _field(2, b"y") + _field(4, b"Identity")) + _field(
        12, output
    )
    body = leaf
    for level in range(depth):
        node = (
            _field(1, b"c")
            + _field(2, b"y")
            + _field(4, b"If")
            + _field(5, _graph_attribute(b"then_branch", body))
            + _field(5, _graph_attribute(b"else_branch", leaf))
        )
        body = _field(1, node) + _field(2, f"g{level}".encode()) + _field(12, output)
    inputs = b"".join(
        _field(11, helper.make_tensor_value_info(n, t, s).SerializeToString())
        for n, t, s in (("c", TensorProto.BOOL, []), ("x", TensorProto.FLOAT, [1]))
    )
    opset = helper.make_opsetid("", 17).SerializeToString()
    return _varint(1 << 3) + _varint(8) + _field(7, body + inputs) + _field(8, opset)


@pytest.mark.parametrize("depth", [3, 30, 200])
def test_if_nested_deep_runs_or_is_refused_cleanly(depth):
    data = nested_if_model(depth)
    try:
        session = Session.load(data)
    except SessionError as error:
        assert error.kind is ErrorKind.INVALID_MODEL
        assert depth > 30  # shallow nesting must work
        return
    (y,) = session.run(None, {"c": np.array(True), "x": np.array([4.0], np.float32)})
    assert y.tolist() == [4.0]


@pytest.mark.parametrize("opset", [0, onnx.defs.onnx_opset_version() + 1])
def test_default_domain_opsets_onnx_does_not_define_make_the_model_invalid(opset):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [x])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(SessionError, match=f"opset {opset} of the default domain") as error:
        Session.load(model.SerializeToString())
    assert error.value.kind is ErrorKind.INVALID_MODEL
