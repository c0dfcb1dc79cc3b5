"""The LSTM time loop compiled by numba (numpy_cpu/compiled_recurrent.py) against the NumPy step
loop it replaces (backends/recurrent.py) on the layers it takes: forward, reverse and
bidirectional, one batch entry or a projected batch, with and without initial states; the
initial states it must not write; and the layers it leaves to the NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import Session, SessionOptions
from onemodel.backends.numpy_cpu import fast
from onemodel.backends.numpy_cpu.compiled_recurrent import compiled_lstm_steps
from onemodel.graph.importer import model_from_proto

NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c"]


def _layer(direction: str, steps: int, batch: int, size: int, hidden: int, initial: bool, dtype):
    rng = np.random.default_rng(steps * 100 + batch * 10 + size + hidden)
    d = 2 if direction == "bidirectional" else 1
    arrays = {
        "X": rng.standard_normal((steps, batch, size)),
        "W": rng.standard_normal((d, 4 * hidden, size)) * 0.3,
        "R": rng.standard_normal((d, 4 * hidden, hidden)) * 0.3,
        "B": rng.standard_normal((d, 8 * hidden)) * 0.1,
    }
    if initial:
        arrays["initial_h"] = rng.standard_normal((d, batch, hidden))
        arrays["initial_c"] = rng.standard_normal((d, batch, hidden))
    arrays = {name: value.astype(dtype) for name, value in arrays.items()}
    element = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inputs = [name if name in arrays else "" for name in NAMES]
    node = helper.make_node(
        "LSTM", inputs, ["Y", "Y_h", "Y_c"], hidden_size=hidden, direction=direction
    )
    graph = helper.make_graph(
        [node],
        "lstm",
        [
            helper.make_tensor_value_info(name, element, value.shape)
            for name, value in arrays.items()
        ],
        [helper.make_tensor_value_info(name, element, None) for name in ("Y", "Y_h", "Y_c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, arrays


def _run(model, arrays, monkeypatch, compiled: bool):
    calls = []

    def spy(self, *args):
        taken = compiled and compiled_lstm_steps(*args)
        calls.append(taken)
        return taken

    monkeypatch.setattr(fast.NumpyKernels, "compiled_lstm_steps", spy)
    session = Session.create(model_from_proto(model), SessionOptions())
    return session.run(None, {name: value.copy() for name, value in arrays.items()}), calls


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize(("batch", "size"), [(1, 5), (3, 12)])  # a batch projects when I > H
@pytest.mark.parametrize("initial", [False, True])
def test_the_compiled_loop_gives_the_numpy_loops_results(
    direction, batch, size, initial, monkeypatch
):
    model, arrays = _layer(direction, 17, batch, size, 8, initial, np.float32)
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


def test_other_layers_run_the_numpy_loop(monkeypatch):
    """float64 (declined), and a batch whose input is narrower than the state (x_t goes into
    the step's GEMM: no projection for the compiled loop to read, so it is not asked)."""
    model, arrays = _layer("forward", 5, 1, 4, 6, False, np.float64)
    _, calls = _run(model, arrays, monkeypatch, compiled=True)
    assert calls == [False]
    model, arrays = _layer("forward", 5, 4, 3, 6, False, np.float32)
    _, calls = _run(model, arrays, monkeypatch, compiled=True)
    assert calls == []
