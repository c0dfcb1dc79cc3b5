"""The fused fast-mode cells of backends/recurrent.py on their own: against the ONNX cell
equations in float64, for one batch entry (a gemv per step after one projection GEMM) and a
batch (GEMMs over the step's column [x_t; 1; h]), and their calls per step, which are the
point of the layout."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from onemodel.backends import recurrent

STEPS, HIDDEN = 6, 7
SIZES = (5, 9)  # inputs per step: fewer and more than the hidden units
# The walks: one entry (projected input, gemvs), a batch with its input projected and a batch
# whose step's GEMMs read x_t; `Cells.projects` chooses between the last two by size.
WALKS = {"one entry": (1, True), "projected batch": (3, True), "stacked batch": (3, False)}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _oracle(kind: str, x, w, r, wb, rb, h, c, backward: bool):
    """Y [T, B, H] and the final states by the ONNX equations, in float64, step by step."""
    x, w, r, wb, rb, h, c = (np.asarray(a, np.float64) for a in (x, w, r, wb, rb, h, c))
    hidden = r.shape[1]

    def block(a, k):
        return a[..., k * hidden : (k + 1) * hidden]

    ys = []
    for t in range(STEPS - 1, -1, -1) if backward else range(STEPS):
        xw = x[t] @ w.T + wb
        hr = h @ r.T + rb
        if kind == "LSTM":
            i, o, f, g = (block(xw + hr, k) for k in range(4))
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
        elif kind == "RNN":
            h = np.tanh(xw + hr)
        else:
            z = _sigmoid(block(xw, 0) + block(hr, 0))
            reset = _sigmoid(block(xw, 1) + block(hr, 1))
            if kind == "GRU1":  # linear_before_reset
                n = np.tanh(block(xw, 2) + reset * block(hr, 2))
            else:
                n = np.tanh(block(xw, 2) + (reset * h) @ r[2 * hidden :].T + block(rb, 2))
            h = (1 - z) * n + z * h
        ys.append(h)
    if backward:
        ys.reverse()
    return np.stack(ys), h, c


def _cells(kind: str) -> recurrent.Cells:
    return {
        "LSTM": recurrent.LSTMCells(),
        "RNN": recurrent.RNNCells(),
        "GRU0": recurrent.GRUCells(False),
        "GRU1": recurrent.GRUCells(True),
    }[kind]


def _layer(kind: str, batch: int, size: int, seed: int):
    rng = np.random.default_rng(seed)
    gates = {"LSTM": 4, "RNN": 1}.get(kind, 3)

    def normal(*shape: int) -> np.ndarray:
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)

    return (
        normal(STEPS, batch, size),
        normal(gates * HIDDEN, size),
        normal(gates * HIDDEN, HIDDEN),
        normal(gates * HIDDEN),
        normal(gates * HIDDEN),
        normal(batch, HIDDEN),
        normal(batch, HIDDEN),
    )


def _walk(monkeypatch, walk: str) -> int:
    """The batch size of `walk`, with the cells made to take it."""
    batch, projected = WALKS[walk]
    for cells in (recurrent.Cells, recurrent.GRUCells):
        monkeypatch.setattr(cells, "projects", lambda self, b, s, h: b == 1 or projected)
    return batch


def _scratch(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    return np.full(shape, np.nan, dtype)  # no step may read what it did not write


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("kind", ["LSTM", "RNN", "GRU0", "GRU1"])
def test_cells_follow_the_onnx_equations(
    kind: str, walk: str, backward: bool, size: int, monkeypatch
) -> None:
    batch = _walk(monkeypatch, walk)
    x, w, r, wb, rb, h0, c0 = _layer(kind, batch, size, seed=batch + 2 * backward + size)
    cells = _cells(kind)
    weights = cells.prepare(np, w, r, wb, rb)
    y = np.empty((STEPS, batch, HIDDEN), np.float32)
    initial = [h0, c0][: cells.states]
    finals = cells.run(np, x, weights, initial, y, backward, _scratch)
    want_y, want_h, want_c = _oracle(kind, x, w, r, wb, rb, h0, c0, backward)
    np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(finals[0], want_h, rtol=1e-5, atol=1e-6)
    if kind == "LSTM":
        np.testing.assert_allclose(finals[1], want_c, rtol=1e-5, atol=1e-6)


class _Counting:
    """NumPy, counting the calls of its matrix products and ufuncs."""

    COUNTED = ("dot", "matmul", "add", "subtract", "multiply", "tanh")

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        function = getattr(np, name)
        if name not in self.COUNTED:
            return function

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return function(*args, **kwargs)

        return counted


# Per step: (products with the input projected, without, ufunc calls with). Without, GRU
# computes xn (and n's recurrence) by GEMMs of their own.
PER_STEP = {"LSTM": (1, 1, 8), "RNN": (1, 1, 2), "GRU0": (2, 3, 10), "GRU1": (1, 3, 10)}


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("kind", ["LSTM", "RNN", "GRU0", "GRU1"])
def test_calls_per_step(kind: str, walk: str, monkeypatch) -> None:
    """One entry: one projection GEMM before the loop, then gemvs by `dot`; a projected
    batch: the projection, then `matmul`s; else no projection, `matmul`s over the step's
    column [x_t; 1; h] and one ufunc call fewer a step."""
    batch = _walk(monkeypatch, walk)
    x, w, r, wb, rb, h0, c0 = _layer(kind, batch, 5, seed=0)
    cells = _cells(kind)
    weights = cells.prepare(np, w, r, wb, rb)
    xp = _Counting()
    cells.run(xp, x, weights, [h0, c0][: cells.states], None, False, _scratch)
    one, many, ufuncs = PER_STEP[kind]
    calls = xp.calls
    if batch == 1:
        assert (calls["matmul"], calls["dot"]) == (1, one * STEPS)
    elif WALKS[walk][1]:
        assert (calls["matmul"], calls["dot"]) == (1 + one * STEPS, 0)
    else:
        assert (calls["matmul"], calls["dot"]) == (many * STEPS, 0)
        ufuncs -= 1
    elementwise = sum(calls[name] for name in ("add", "subtract", "multiply", "tanh"))
    assert elementwise == ufuncs * STEPS


@pytest.mark.parametrize(
    ("kind", "batch", "size", "hidden", "projected"),
    [
        ("LSTM", 8, 64, 128, False),  # the step's GEMM over [x_t; 1; h]
        ("LSTM", 8, 512, 64, True),  # inputs wider than the state
        ("LSTM", 64, 512, 64, False),  # a batch whose transposed reads would cost more
        ("GRU1", 8, 64, 128, True),  # three small GEMMs a step cost more than one
        ("GRU1", 8, 64, 256, False),
    ],
)
def test_which_walk(kind: str, batch: int, size: int, hidden: int, projected: bool) -> None:
    assert _cells(kind).projects(batch, size, hidden) is projected


# -- both directions of one batch entry in one loop (`Cells.run_both`) ------------------------


def _both(kind: str, size: int, seed: int):
    """x [T, 1, I] and each direction's own weights and initial states, prepared as the
    joint loop takes them."""
    cells = _cells(kind)
    layers = [_layer(kind, 1, size, seed=seed + d) for d in range(2)]
    x = layers[0][0]
    directions = tuple(cells.prepare(np, *layer[1:5]) for layer in layers)
    joint = recurrent.LayerWeights(cells, directions).joint
    initial = [[layer[5], layer[6]][: cells.states] for layer in layers]
    return cells, x, layers, joint, initial


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["LSTM", "RNN", "GRU0", "GRU1"])
def test_both_directions_in_one_loop_follow_the_onnx_equations(kind: str, size: int) -> None:
    cells, x, layers, joint, initial = _both(kind, size, seed=20 + size)
    y = np.empty((STEPS, 2, 1, HIDDEN), np.float32)
    finals = cells.run_both(np, x, joint, initial, y, _scratch)
    for d, layer in enumerate(layers):
        want_y, want_h, want_c = _oracle(kind, x, *layer[1:], backward=d == 1)
        np.testing.assert_allclose(y[:, d], want_y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(finals[d][0], want_h, rtol=1e-5, atol=1e-6)
        if kind == "LSTM":
            np.testing.assert_allclose(finals[d][1], want_c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["LSTM", "RNN", "GRU0", "GRU1"])
def test_both_directions_make_one_directions_calls_per_step(kind: str) -> None:
    """A step of the joint loop is one direction's: one stacked `matmul` per product (after
    one projection GEMM per direction) and the same ufunc calls, on blocks twice as long."""
    cells, x, _, joint, initial = _both(kind, 5, seed=0)
    xp = _Counting()
    cells.run_both(xp, x, joint, initial, None, _scratch)
    one, _, ufuncs = PER_STEP[kind]
    assert (xp.calls["matmul"], xp.calls["dot"]) == (2 + one * STEPS, 0)
    elementwise = sum(xp.calls[name] for name in ("add", "subtract", "multiply", "tanh"))
    assert elementwise == ufuncs * STEPS


@pytest.mark.parametrize(
    ("kind", "hidden", "joins"),
    [
        ("LSTM", 128, True),  # the CRNN's layers: 512 KiB of recurrence matrices
        ("LSTM", 256, False),  # 2 MiB: a loop per direction keeps its own in L2
        ("GRU1", 192, True),
        ("GRU1", 256, False),
        ("RNN", 256, True),
    ],
)
def test_which_loop_for_both_directions(kind: str, hidden: int, joins: bool) -> None:
    assert _cells(kind).joins(hidden, 4) is joins


@pytest.mark.parametrize("walk", WALKS)
@pytest.mark.parametrize("kind", ["LSTM", "GRU1"])
def test_a_warm_run_keeps_its_walk_and_follows_new_inputs(
    kind: str, walk: str, monkeypatch
) -> None:
    """A run handed the last run's scratch arrays (as a run state hands them) reuses that
    run's per-step views (`held_walk`); fresh arrays get a walk of their own. Either way the
    results are those of this run's inputs."""
    batch = _walk(monkeypatch, walk)
    cells = _cells(kind)
    x, w, r, wb, rb, h0, c0 = _layer(kind, batch, 5, seed=3)
    weights = cells.prepare(np, w, r, wb, rb)
    pool: dict[tuple, np.ndarray] = {}

    def kept(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        return pool.setdefault((shape, np.dtype(dtype).str), _scratch(shape, dtype))

    walks = []
    for scratch, inputs in ((kept, x), (kept, x[::-1].copy()), (_scratch, x + 1)):
        y = np.empty((STEPS, batch, HIDDEN), np.float32)
        cells.run(np, inputs, weights, [h0, c0][: cells.states], y, True, scratch)
        walks.append(weights.last_walk)
        want_y, _, _ = _oracle(kind, inputs, w, r, wb, rb, h0, c0, backward=True)
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-6)
    assert walks[0] is walks[1] and walks[2] is not walks[1]


@pytest.mark.parametrize("kind", ["LSTM", "GRU0", "GRU1", "RNN"])
def test_the_projection_multiplies_a_contiguous_k_by_n_matrix(kind: str, monkeypatch) -> None:
    """X·Wᵀ + bias before the loop reads [W | bias] laid out [I + 1, N] once per plan:
    OpenBLAS runs the same product from a transposed view of [N, I + 1] up to 3× slower."""
    cells = _cells(kind)
    x, w, r, wb, rb, *_ = _layer(kind, 1, 5, seed=4)
    weights = cells.prepare(np, w, r, wb, rb)
    seen = []
    matmul = np.matmul

    def recording(a: np.ndarray, b: np.ndarray, **kwargs: Any) -> np.ndarray:
        seen.append(b)
        return matmul(a, b, **kwargs)

    monkeypatch.setattr(np, "matmul", recording)
    projected = cells._projected(np, x, weights, _scratch)
    monkeypatch.undo()
    assert seen and all(b.flags.c_contiguous and b.shape == (6, w.shape[0]) for b in seen)
    want = x[:, 0] @ w[list(_gate_rows(cells, w.shape[0]))].T
    scaled = want * _sigmoid_scale(cells, w.shape[0])
    bias = weights.inputs[-1]
    np.testing.assert_allclose(projected[:, 0], scaled + bias, rtol=1e-5, atol=1e-6)


def _gate_rows(cells: recurrent.Cells, units: int) -> np.ndarray:
    hidden = units // cells.gates
    return np.concatenate([np.arange(k * hidden, (k + 1) * hidden) for k in cells.order])


def _sigmoid_scale(cells: recurrent.Cells, units: int) -> np.ndarray:
    scale = np.ones(units, np.float32)
    scale[: cells.sigmoid_gates * (units // cells.gates)] = recurrent.SIGMOID_SCALE
    return scale
