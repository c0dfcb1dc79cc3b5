"""Per-run overhead savings keep behaviour: floating-point errors stay silent in runs (set once
per run, not per operator) and outside them (plan time), and the caller's settings come back."""

from __future__ import annotations

import contextlib
import threading
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import ErrorKind, Session, SessionError
from onemodel.backends.fp_errors import quiet, run_scope
from onemodel.graph.importer import model_from_proto


def _overflowing_model() -> object:
    """Exp overflows, Log(0) divides by zero, 0/0 is invalid: every NumPy warning kind."""
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Log", ["x"], ["l"]),
        helper.make_node("Div", ["x", "x"], ["d"]),
        helper.make_node("MatMul", ["e", "m"], ["y"]),
    ]
    weight = helper.make_tensor("m", TensorProto.FLOAT, [4, 2], [3e38] * 8)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "eldy"]
    graph = helper.make_graph(nodes, "overflow", [x], outputs, [weight])
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 13)])


def test_runs_warn_nothing_and_restore_the_callers_error_settings() -> None:
    session = Session(model_from_proto(_overflowing_model()))
    x = np.array([[0.0, 1e3, -1.0, 2.0]], dtype=np.float32)
    with np.errstate(all="raise"):
        before = np.geterr()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            e, log, div, y = session.run(None, {"x": x})
        assert np.geterr() == before
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(e, np.exp(x))
        np.testing.assert_array_equal(log, np.log(x))
        np.testing.assert_array_equal(div, x / x)
    assert np.isinf(y).all()


def test_quiet_ignores_errors_outside_a_run_and_costs_nothing_inside() -> None:
    with np.errstate(all="raise"), quiet():
        assert set(np.geterr().values()) == {"ignore"}
    assert isinstance(quiet(), np.errstate)
    with np.errstate(all="raise"), run_scope():
        assert set(np.geterr().values()) == {"ignore"}
        assert isinstance(quiet(), contextlib.nullcontext)
        with run_scope():
            pass
        assert isinstance(quiet(), contextlib.nullcontext)  # the outer run is still on
    assert isinstance(quiet(), np.errstate)


def test_a_run_on_one_thread_does_not_silence_another() -> None:
    seen = []
    entered, leave = threading.Event(), threading.Event()

    def in_a_run() -> None:
        with run_scope():
            entered.set()
            leave.wait(5)

    worker = threading.Thread(target=in_a_run)
    worker.start()
    entered.wait(5)
    with np.errstate(all="raise"):
        seen.append(np.geterr()["over"])
        with quiet():
            seen.append(np.geterr()["over"])
    leave.set()
    worker.join()
    assert seen == ["raise", "ignore"]


def _two_input_model() -> object:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "add", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 13)])


def test_plain_inputs_skip_conversion_and_anything_else_gets_the_full_checks(monkeypatch) -> None:
    session = Session(model_from_proto(_two_input_model()))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((1, 3)).astype(np.float32)
    strided = np.asfortranarray(rng.standard_normal((3, 4)).astype(np.float32)).T
    (slow,) = session.run(None, {"a": strided, "b": b})
    np.testing.assert_array_equal(slow, strided + b)

    def refuse(*args: object) -> None:
        raise AssertionError("a plain input went through the conversions")

    monkeypatch.setattr(Session, "_converted", refuse)
    (fast,) = session.run(None, {"a": a, "b": b})
    np.testing.assert_array_equal(fast, a + b)
    monkeypatch.undo()
    bad = {
        "a wrong fixed extent": {"a": a, "b": np.zeros((1, 4), np.float32)},
        "a wrong rank": {"a": a[0], "b": b},
        "a wrong type": {"a": a.astype(np.float64), "b": b},
        "an unknown name": {"a": a, "c": b},
    }
    for why, feeds in bad.items():
        with pytest.raises(SessionError) as caught:
            session.run(None, feeds)
        assert caught.value.kind is ErrorKind.INVALID_INPUT, why
