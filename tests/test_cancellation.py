"""Stopping runs: a Loop that would run (practically) forever is stopped by the timeout and by a
cancellation token within a second, and the session stays usable."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import (
    CancellationToken,
    ErrorKind,
    OptimizationLevel,
    Session,
    SessionError,
    SessionOptions,
)
from onemodel.graph.importer import model_from_proto


def counting_loop_model():
    """count = Loop(trips, true, 0) adding one per iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["count_in", "one"], ["count_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("count_in", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("count_out", TensorProto.INT64, []),
        ],
        [helper.make_tensor("one", TensorProto.INT64, [], [1])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go", "zero"], ["count"], body=body)],
        "loop",
        [helper.make_tensor_value_info("trips", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("count", TensorProto.INT64, [])],
        [
            helper.make_tensor("go", TensorProto.BOOL, [], [True]),
            helper.make_tensor("zero", TensorProto.INT64, [], [0]),
        ],
    )
    return model_from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


FOREVER = {"trips": np.int64(2**62)}


def test_a_finite_loop_counts():
    (count,) = Session.create(counting_loop_model()).run(None, {"trips": np.int64(7)})
    assert count == 7


def test_the_timeout_stops_an_endless_loop_and_the_session_stays_usable():
    session = Session.create(counting_loop_model())
    started = time.monotonic()
    with pytest.raises(SessionError, match=r"timeout of 0\.3 s") as error:
        session.run(None, FOREVER, timeout=0.3)
    assert error.value.kind is ErrorKind.CANCELLED
    assert time.monotonic() - started < 1.3
    (count,) = session.run(None, {"trips": np.int64(3)})
    assert count == 3


def test_a_token_cancelled_from_another_thread_stops_the_run_within_a_second():
    session = Session.create(counting_loop_model())
    token = CancellationToken()
    requested = []

    def cancel_soon() -> None:
        time.sleep(0.3)
        requested.append(time.monotonic())
        token.cancel()

    threading.Thread(target=cancel_soon).start()
    with pytest.raises(SessionError, match="cancelled") as error:
        session.run(None, FOREVER, cancel=token)
    assert error.value.kind is ErrorKind.CANCELLED
    assert time.monotonic() - requested[0] < 1.0


def test_the_session_option_sets_a_default_timeout():
    session = Session.create(counting_loop_model(), SessionOptions(run_timeout=0.2))
    with pytest.raises(SessionError) as error:
        session.run(None, FOREVER)
    assert error.value.kind is ErrorKind.CANCELLED


def test_a_cancelled_token_stops_session_creation():
    token = CancellationToken()
    token.cancel()
    with pytest.raises(SessionError, match="cancelled") as error:
        Session.create(counting_loop_model(), cancel=token)
    assert error.value.kind is ErrorKind.CANCELLED


def accumulating_loop_model():
    """Loop(trips, true) whose body emits a 1 MiB scan output per iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("ConstantOfShape", ["shape"], ["block"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("block", TensorProto.FLOAT, [262144]),
        ],
        [helper.make_tensor("shape", TensorProto.INT64, [1], [262144])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "go"], ["blocks"], body=body)],
        "loop",
        [helper.make_tensor_value_info("trips", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("blocks", TensorProto.FLOAT, None)],
        [helper.make_tensor("go", TensorProto.BOOL, [], [True])],
    )
    return model_from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_the_memory_limit_stops_a_loop_accumulating_without_bound():
    session = Session.create(accumulating_loop_model(), SessionOptions(memory_limit=64 * 2**20))
    (blocks,) = session.run(None, {"trips": np.int64(8)})
    assert blocks.shape == (8, 262144)
    with pytest.raises(SessionError, match="memory limit of 67108864") as error:
        session.run(None, {"trips": np.int64(2**62)})
    assert error.value.kind is ErrorKind.UNSUPPORTED
    (blocks,) = session.run(None, {"trips": np.int64(2)})  # still usable
    assert blocks.shape == (2, 262144)


def test_the_memory_limit_refuses_a_plan_whose_slab_is_larger():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    model = model_from_proto(helper.make_model(helper.make_graph(nodes, "g", [x], [y])))
    # Without passes: the two Negs would fuse into one step with no slab value.
    options = SessionOptions(memory_limit=1000, optimization_level=OptimizationLevel.NONE)
    session = Session.create(model, options)
    session.run(None, {"x": np.ones(10, np.float32)})
    with pytest.raises(SessionError, match="slab") as error:
        session.run(None, {"x": np.ones(1000, np.float32)})
    assert error.value.kind is ErrorKind.UNSUPPORTED


def test_a_cancelled_token_stops_the_import_at_a_node():
    token = CancellationToken()
    token.cancel()
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["x2"], name="first")], "g", [x], [
        helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1])])  # fmt: skip
    data = helper.make_model(graph).SerializeToString()
    with pytest.raises(SessionError, match="cancelled") as error:
        Session.load(data, cancel=token)
    assert error.value.kind is ErrorKind.CANCELLED and error.value.node == "first"
