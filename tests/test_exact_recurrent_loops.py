"""Exact mode's fused RNN, GRU and LSTM loops (backends/exact_recurrent.py) against the
step-by-step formulas they replace (`step`, with `exact_loop` turned off): the same bits on every
output, also where gates saturate, states are huge, zero or subnormal, inputs hold inf or NaN,
for both GRU forms, and on the flushing checked-device stand-in; and the loops do run."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from onemodel import ExecutionMode, Session, SessionOptions
from onemodel.backends import exact_gemm, exact_recurrent
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import recurrent
from onemodel.graph.operators.recurrent import Recurrent
from tests.operator_harness import one_node_model, run_node
from tests.test_exact_layers import _recipe
from tests.test_exact_operators import assert_bits, canonical

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _case(op: str, name: str) -> tuple[list, dict]:
    """(inputs, attributes) of one node."""
    rng = np.random.default_rng(abs(hash((op, name))) % 2**32)
    seq, batch, width, hidden, directions = 6, 3, 5, 8, 1
    gates = _GATES[op]
    attributes: dict = {}
    scale = 1.0
    if name == "one_entry":
        batch, hidden = 1, 16
    if name == "bidirectional_layout":
        directions = 2
        attributes = {"direction": "bidirectional", "layout": 1}
    if name == "reverse":
        attributes = {"direction": "reverse"}
    if name == "saturated":
        scale = 400.0  # pre-activations beyond ±746 and every tanh at ±1
    if op == "GRU" and name != "reset_after":
        attributes["linear_before_reset"] = 1
    attributes["hidden_size"] = hidden
    x = rng.standard_normal((seq, batch, width)) * scale
    if name == "subnormal_states":
        x *= 1e-40
    w = rng.standard_normal((directions, gates * hidden, width))
    r = rng.standard_normal((directions, gates * hidden, hidden)) * 0.5
    b = rng.standard_normal((directions, 2 * gates * hidden))
    state = (directions, batch, hidden)
    h0 = rng.standard_normal(state) * (1e-39 if name == "subnormal_states" else 1.0)
    c0 = rng.standard_normal(state) * (1e30 if name == "saturated" else 1.0)
    if name == "non_finite":
        x[2, 0, 1], x[3, 1, 0] = np.inf, np.nan
        h0[0, 2, 0] = -np.inf
    if name == "nan_input":  # NaN states from step 3 on: the loop's products decide NaN
        x[2, 1, 3] = np.nan
    if name == "zero_states":
        h0[...], c0[...], b[...] = 0, 0, 0
    if attributes.get("layout") == 1:
        x, h0, c0 = x.transpose(1, 0, 2), h0.transpose(1, 0, 2), c0.transpose(1, 0, 2)
    lengths = np.full(batch, seq, dtype=np.int32)
    dtype = np.float16 if name == "float16" else np.float32
    initial = (h0, c0) if op == "LSTM" else (h0,)
    inputs = [a.astype(dtype) for a in (x, w, r, b)] + [lengths]
    return inputs + [a.astype(dtype) for a in initial], attributes


CASES = [
    "plain", "one_entry", "bidirectional_layout", "reverse", "saturated", "subnormal_states",
    "non_finite", "nan_input", "zero_states", "float16", "reset_after",
]  # fmt: skip
# Where every product decides its elements, the loop runs to the end.
_LOOPED = {"plain", "one_entry", "bidirectional_layout", "reverse", "float16", "reset_after"}


@pytest.mark.parametrize("backend", ["numpy", "checked-device"])
@pytest.mark.parametrize(
    ("op", "name"),
    [(op, name) for op in sorted(_GATES) for name in CASES if op == "GRU" or name != "reset_after"],
)
def test_fused_loop_gives_the_step_by_step_bits(
    op: str, name: str, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs, attributes = _case(op, name)
    outputs = 3 if op == "LSTM" else 2
    finished = []
    run = exact_recurrent._Loop.run

    def counted(self, *args):  # whether each direction's loop ran to the end
        result = run(self, *args)
        finished.append(result is not None)
        return result

    monkeypatch.setattr(exact_recurrent._Loop, "run", counted)
    fused = run_node(op, inputs, attributes, opset=14, outputs=outputs, backend=backend, exact=True)
    assert finished, "the fused loop did not run"
    if name in _LOOPED:
        assert all(finished), finished
    monkeypatch.setattr(Recurrent, "exact_loop", lambda self, *args: None)
    steps = run_node(op, inputs, attributes, opset=14, outputs=outputs, backend=backend, exact=True)
    for index, (got, want) in enumerate(zip(fused, steps, strict=True)):
        if got.dtype == np.float32:
            got, want = canonical(got), canonical(want)
        else:  # NaN payloads are the runtime's to rewrite
            got, want = got.copy(), want.copy()
            got[np.isnan(got)] = want[np.isnan(want)] = np.nan
        assert_bits(got, want, f"{op} {name} output {index}")


@pytest.mark.parametrize(
    ("op_type", "linear_before_reset"), [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)]
)
def test_constant_weights_take_the_loop_prepared_once_per_plan(
    op_type: str, linear_before_reset: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W, R and B as initializers: R is prepared for the loop when the plan is made, and the
    outputs are docs/exact-mode.md's recipe written out step by step (test_exact_layers)."""
    rng = np.random.default_rng(11)
    seq, batch, width, hidden, gates = 7, 2, 5, 12, _GATES[op_type]

    def f32(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x, w = f32(seq, batch, width, scale=2.0), f32(1, gates * hidden, width, scale=0.7)
    r, b = f32(1, gates * hidden, hidden, scale=0.6), f32(1, 2 * gates * hidden, scale=0.3)
    attributes = {"hidden_size": hidden}
    if op_type == "GRU":
        attributes["linear_before_reset"] = linear_before_reset
    outputs = 3 if op_type == "LSTM" else 2
    model, feeds = one_node_model(op_type, [x, w, r, b], attributes, opset=14, outputs=outputs)
    constants = {"in1": w, "in2": r, "in3": b}
    model.graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in constants.items())
    kept = [i for i in model.graph.input if i.name not in constants]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    prepared, finished = [], []
    matrix, run = recurrent.loop_matrix, exact_recurrent._Loop.run
    monkeypatch.setattr(recurrent, "loop_matrix", lambda *a: prepared.append(1) or matrix(*a))
    monkeypatch.setattr(
        exact_recurrent._Loop, "run", lambda self, *a: finished.append(1) or run(self, *a)
    )
    want = _recipe(op_type, x, w, r, b, linear_before_reset)
    for backend in ("numpy", "checked-device"):
        prepared.clear()
        options = SessionOptions(mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy")
        session = Session.create(model_from_proto(model), options)
        for _ in range(2):  # the plan's prepared matrices serve every run
            got = session.run(None, {"in0": feeds["in0"]})
            for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
                assert_bits(result, wanted, f"{op_type} output {index} on {backend}")
        assert len(prepared) == (2 if (op_type, linear_before_reset) == ("GRU", 0) else 1)
    assert len(finished) == 4


def test_fsum_exact_path_rounds_to_odd_as_odd_sum() -> None:
    """NumPy's exact path for a few dot products (math.fsum and the remainder's sign) gives
    odd_sum's values: cancellation, ties at float32 midpoints, wide ranges, exact zeros."""
    rng = np.random.default_rng(5)
    for _ in range(300):
        k = int(rng.integers(1, 60))
        a = (rng.standard_normal(k) * np.exp2(rng.integers(-60, 60, k))).astype(np.float32)
        b = (rng.standard_normal(k) * np.exp2(rng.integers(-60, 60, k))).astype(np.float32)
        products = a.astype(np.float64) * b.astype(np.float64)
        cut = int(rng.integers(0, k + 1))
        tail = [math.ldexp(1.0, -int(rng.integers(0, 90)))]
        terms = np.concatenate([products, -products[:cut], tail])
        for row in (terms, terms[:-1], np.zeros(3)):
            odd = exact_gemm.odd_sum(np, row[None])
            assert_bits(exact_gemm._fsum_odd(row[None]), odd, "fsum vs odd_sum")


def test_exact_path_sums_on_the_host_up_to_a_budget_of_products(monkeypatch) -> None:
    """A few short dot products take the host's fsum, one long one `odd_sum` (the cheaper of
    the two by K), with odd_sum's values either way."""
    rng = np.random.default_rng(8)
    hosted = []
    fsum_odd = exact_gemm._fsum_odd
    monkeypatch.setattr(exact_gemm, "_fsum_odd", lambda t: hosted.append(t.shape) or fsum_odd(t))
    for k, count, on_host in ((128, 8, True), (128, 9, False), (3072, 1, False), (1024, 1, True)):
        a = rng.standard_normal((count, k)).astype(np.float32).astype(np.float64)
        b = rng.standard_normal((k, 5)).astype(np.float32).astype(np.float64)
        index = (np.arange(count), np.arange(count) % 5)
        hosted.clear()
        got = exact_gemm.exact_dots(np, a, b, index)
        assert bool(hosted) == on_host, (k, count)
        want = exact_gemm.odd_sum(np, a[index[0]] * b[:, index[1]].T)
        assert_bits(got, want, f"exact_dots of {count} × K = {k}")
