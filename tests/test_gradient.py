"""Gradient (ai.onnx.preview.training) expanded into backward nodes, against derivatives
worked out by hand, with broadcasting and a value reached along two paths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import ErrorKind, Session, SessionError
from onemodel.graph.importer import model_from_proto


def gradient_model(nodes, inputs, y, xs):
    grads = [f"d_{x}" for x in xs]
    gradient = helper.make_node(
        "Gradient", xs, grads, name="grad", domain="ai.onnx.preview.training", xs=xs, y=y
    )
    graph = helper.make_graph(
        [*nodes, gradient],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in (y, *grads)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]
    return model_from_proto(helper.make_model(graph, opset_imports=opsets))


def test_sub_div_neg_with_broadcasting_and_two_paths():
    # y = -((a - b) / c) * a, with c broadcast over the rows of a and b
    nodes = [
        helper.make_node("Sub", ["a", "b"], ["s"]),
        helper.make_node("Div", ["s", "c"], ["q"]),
        helper.make_node("Neg", ["q"], ["n"]),
        helper.make_node("Mul", ["n", "a"], ["y"]),
    ]
    shapes = [("a", [2, 3]), ("b", [2, 3]), ("c", [1, 3])]
    session = Session.create(gradient_model(nodes, shapes, "y", ["a", "b", "c"]))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 2, 3)).astype(np.float32)
    c = rng.uniform(1, 2, (1, 3)).astype(np.float32)
    y, da, db, dc = session.run(None, {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(y, -((a - b) / c) * a, rtol=1e-6)
    np.testing.assert_allclose(da, -(2 * a - b) / c, rtol=1e-5)
    np.testing.assert_allclose(db, a / c, rtol=1e-5)
    np.testing.assert_allclose(dc, (((a - b) * a) / c**2).sum(axis=0, keepdims=True), rtol=1e-5)


def test_an_input_y_does_not_depend_on_gets_zeros():
    nodes = [helper.make_node("Identity", ["a"], ["y"])]
    session = Session.create(gradient_model(nodes, [("a", [2]), ("b", [3])], "y", ["a", "b"]))
    _, da, db = session.run(None, {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})
    assert da.tolist() == [1.0, 1.0] and db.tolist() == [0.0, 0.0, 0.0]


def test_a_path_through_an_operator_without_a_rule_is_unsupported():
    nodes = [helper.make_node("Exp", ["a"], ["y"])]
    with pytest.raises(SessionError, match="Gradient through Exp") as error:
        Session.create(gradient_model(nodes, [("a", [2])], "y", ["a"]))
    assert error.value.kind is ErrorKind.UNSUPPORTED and error.value.node == "grad"
