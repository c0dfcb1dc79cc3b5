"""The LSTM and GRU time loops compiled by numba (numpy_cpu/compiled_recurrent.py) against the
NumPy step loops they replace (backends/recurrent.py) on the layers they take: forward,
reverse and bidirectional, one batch entry or a projected batch, with and without initial
states, GRU with and without linear_before_reset; the initial states they must not write;
and the layers they leave to the NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import Session, SessionOptions
from onemodel.backends.numpy_cpu import fast
from onemodel.backends.numpy_cpu.compiled_recurrent import compiled_gru_steps, compiled_lstm_steps
from onemodel.graph.importer import model_from_proto

NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c"]


def _layer(
    direction: str, steps: int, batch: int, size: int, hidden: int, initial: bool, dtype,
    op: str = "LSTM", lbr: int = 0,
):  # fmt: skip
    rng = np.random.default_rng(steps * 100 + batch * 10 + size + hidden)
    d, gates = 2 if direction == "bidirectional" else 1, 4 if op == "LSTM" else 3
    arrays = {
        "X": rng.standard_normal((steps, batch, size)),
        "W": rng.standard_normal((d, gates * hidden, size)) * 0.3,
        "R": rng.standard_normal((d, gates * hidden, hidden)) * 0.3,
        "B": rng.standard_normal((d, 2 * gates * hidden)) * 0.1,
    }
    if initial:
        arrays["initial_h"] = rng.standard_normal((d, batch, hidden))
        if op == "LSTM":
            arrays["initial_c"] = rng.standard_normal((d, batch, hidden))
    arrays = {name: value.astype(dtype) for name, value in arrays.items()}
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inputs = [name if name in arrays else "" for name in NAMES[: 7 if op == "LSTM" else 6]]
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op == "LSTM" else 2]
    extra = {"linear_before_reset": lbr} if op == "GRU" else {}
    node = helper.make_node(op, inputs, outputs, hidden_size=hidden, direction=direction, **extra)
    graph = helper.make_graph(
        [node],
        "lstm",
        [
            helper.make_tensor_value_info(name, element, value.shape)
            for name, value in arrays.items()
        ],
        [helper.make_tensor_value_info(name, element, None) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, arrays


def _run(model, arrays, monkeypatch, compiled: bool):
    calls = []

    def spying(function):
        def spy(self, *args):
            taken = compiled and function(*args)
            calls.append(taken)
            return taken

        return spy

    monkeypatch.setattr(fast.NumpyKernels, "compiled_lstm_steps", spying(compiled_lstm_steps))
    monkeypatch.setattr(fast.NumpyKernels, "compiled_gru_steps", spying(compiled_gru_steps))
    session = Session.create(model_from_proto(model), SessionOptions())
    return session.run(None, {name: value.copy() for name, value in arrays.items()}), calls


@pytest.mark.parametrize(("op", "lbr"), [("LSTM", 0), ("GRU", 0), ("GRU", 1)])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("batch", "size"), [(1, 5), (3, 12)])  # a batch projects when I > H
@pytest.mark.parametrize("initial", [False, True])
def test_the_compiled_loop_gives_the_numpy_loops_results(
    op, lbr, direction, batch, size, initial, monkeypatch
):
    model, arrays = _layer(direction, 17, batch, size, 8, initial, np.float32, op, lbr)
    ours, calls = _run(model, arrays, monkeypatch, compiled=True)
    assert calls == [True] * (2 if direction == "bidirectional" else 1)
    theirs, _ = _run(model, arrays, monkeypatch, compiled=False)
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_the_initial_states_are_not_written():
    """c is updated in place: a [B, H] initial_c of one entry transposes to a contiguous view,
    which the loop must copy (it once wrote the caller's array)."""
    model, arrays = _layer("forward", 6, 1, 4, 3, True, np.float32)
    kept = {name: value.copy() for name, value in arrays.items()}
    session = Session.create(model_from_proto(model), SessionOptions())
    first = session.run(None, arrays)
    for name, value in kept.items():
        np.testing.assert_array_equal(arrays[name], value)
    second = session.run(None, arrays)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_float64_runs_the_numpy_loop_and_a_narrow_batch_projects(monkeypatch):
    """float64 never asks for the compiled loop; a batch whose input is narrower than the
    state, whose x_t the NumPy loop puts into the step's GEMM, projects its input for it."""
    model, arrays = _layer("forward", 5, 1, 4, 6, False, np.float64)
    _, calls = _run(model, arrays, monkeypatch, compiled=True)
    assert calls == []
    assert not compiled_lstm_steps(
        np.ones((2, 1, 8)), np.ones((2, 8)), np.ones((3, 2, 1)), np.ones((2, 1)), False
    )
    model, arrays = _layer("forward", 5, 4, 3, 6, False, np.float32)
    ours, calls = _run(model, arrays, monkeypatch, compiled=True)
    assert calls == [True]
    theirs, _ = _run(model, arrays, monkeypatch, compiled=False)
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
