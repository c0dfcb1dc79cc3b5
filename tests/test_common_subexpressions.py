"""Common subexpression elimination when a session is created (graph/common_subexpressions.py)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onemodel import Session, SessionOptions
from onemodel.bench_graphs import add_tree_model
from onemodel.graph.importer import model_from_proto

F = TensorProto.FLOAT


def _model(nodes, outputs, inputs=("x",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, F, [2, 3]) for name in inputs],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _session(model: onnx.ModelProto, level: int = 2) -> Session:
    return Session.create(model_from_proto(model), SessionOptions(optimization_level=level))


def _compiled_ops(session: Session) -> list[str]:
    return [node.info.op_type for node in session._graph.nodes]


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_a_tree_of_equal_sums_keeps_one_node_per_level():
    model = add_tree_model(1023)  # 10 levels over 1024 reads of x
    session = _session(model, level=1)
    assert _compiled_ops(session) == ["Add"] * 10
    (y,) = session.run(None, {"x": np.ones((1, 4), np.float32)})
    np.testing.assert_array_equal(y, np.full((1, 4), 1024, np.float32))


def test_level_zero_keeps_every_node():
    assert len(_compiled_ops(_session(add_tree_model(63), level=0))) == 63


def test_attributes_and_inputs_must_match():
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1),
        helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
        helper.make_node("LeakyRelu", ["x"], ["c"], alpha=0.1),
        helper.make_node("Sub", ["x", "a"], ["d"]),
        helper.make_node("Sub", ["a", "x"], ["e"]),
        helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"]),
    ]
    session = _session(_model(nodes, ["y"]), level=1)
    assert sorted(_compiled_ops(session)) == ["LeakyRelu", "LeakyRelu", "Sub", "Sub", "Sum"]
    a, b = np.where(X >= 0, X, 0.1 * X), np.where(X >= 0, X, 0.2 * X)
    (y,) = session.run(None, {"x": X})
    np.testing.assert_allclose(y, a + b + a + (X - a) + (a - X), rtol=1e-6)


def test_random_generators_are_not_merged():
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["r1"]),
        helper.make_node("RandomUniformLike", ["x"], ["r2"]),
        helper.make_node("Sub", ["r1", "r2"], ["y"]),
    ]
    session = _session(_model(nodes, ["y"]), level=1)
    assert _compiled_ops(session).count("RandomUniformLike") == 2
    (y,) = session.run(None, {"x": X})
    assert np.any(y != 0)


def test_a_duplicate_that_is_a_graph_output_stays():
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"])]
    session = _session(_model(nodes, ["a", "b"]), level=1)
    assert _compiled_ops(session) == ["Neg", "Neg"]
    a, b = session.run(None, {"x": X})
    np.testing.assert_array_equal(a, -X)
    np.testing.assert_array_equal(b, -X)


def test_a_duplicate_read_by_a_subgraph_stays():
    then = helper.make_graph(
        [helper.make_node("Identity", ["b"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", F, None)],
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["a"]),
        helper.make_node("Neg", ["x"], ["b"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", F, [2, 3]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", F, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = _session(model, level=1)
    assert _compiled_ops(session).count("Neg") == 2
    for condition in (True, False):
        (y,) = session.run(None, {"x": X, "c": np.array(condition)})
        np.testing.assert_array_equal(y, -X)
