"""RNN, GRU and LSTM: the ONNX conformance node cases, onnxruntime on random configurations,
and the semantics onnxruntime cannot check (layout 1, per-entry lengths of 0, narrow types,
absent outputs, empty batches and sequences)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import case_params, node_cases, run_case
from onnx import TensorProto, helper, numpy_helper
from operator_harness import assert_same, one_node_model, onnxruntime_outputs, refused, run_node

from onemodel import Session, SessionOptions
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.importer import model_from_proto
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import InferContext, NodeInfo, TensorSpec

OPS = ("RNN", "GRU", "LSTM")
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
ACTIVATIONS_PER_DIRECTION = {"RNN": 1, "GRU": 2, "LSTM": 3}
STATE_OUTPUTS = {"RNN": 1, "GRU": 1, "LSTM": 2}

# -- the ONNX backend conformance node cases ------------------------------------------------

# Conformance cases these operators do not pass yet, each with its reason (none at present).
EXPECTED_FAILURES: dict[str, str] = {}

CASES = node_cases(OPS)


@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance(name: str) -> None:
    run_case(CASES[name])


def test_every_conformance_op_is_covered() -> None:
    assert {case.op_type for case in CASES.values()} == set(OPS)
    assert len(CASES) >= 18


# -- random configurations -------------------------------------------------------------------

# name → (uses alpha, uses beta)
ACTIVATION_PARAMETERS = {
    "Relu": (False, False),
    "Tanh": (False, False),
    "Sigmoid": (False, False),
    "Affine": (True, True),
    "LeakyRelu": (True, False),
    "ThresholdedRelu": (True, False),
    "ScaledTanh": (True, True),
    "HardSigmoid": (True, True),
    "Elu": (True, False),
    "Softsign": (False, False),
    "Softplus": (False, False),
}


class Config:
    """One random layer: inputs, our attributes, and onnxruntime's (which needs hidden_size and
    knows no defaults for some alphas and betas, so they are always given explicitly)."""

    def __init__(self, op: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.op = op
        gates = GATES[op]
        direction = str(rng.choice(["forward", "reverse", "bidirectional"]))
        d = 2 if direction == "bidirectional" else 1
        steps, batch = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        size, hidden = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        self.directions, self.steps, self.batch, self.hidden = d, steps, batch, hidden

        def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
            return (scale * rng.standard_normal(shape)).astype(np.float32)

        def maybe(value: np.ndarray) -> np.ndarray | None:
            return value if rng.random() < 0.6 else None

        self.inputs: list[np.ndarray | None] = [
            normal(steps, batch, size),
            normal(d, gates * hidden, size, scale=0.6),
            normal(d, gates * hidden, hidden, scale=0.6),
            maybe(normal(d, 2 * gates * hidden, scale=0.5)),
            # Lengths of 0 are left to test_each_entry_runs_as_its_own_shorter_sequence:
            # onnxruntime then gives a zero Y_h (and Y_c), not the initial state.
            maybe(rng.integers(1, steps + 1, size=batch).astype(np.int32)),
            maybe(normal(d, batch, hidden, scale=0.5)),
        ]
        if op == "LSTM":
            self.inputs += [maybe(normal(d, batch, hidden)), maybe(normal(d, 3 * hidden))]
        while self.inputs[-1] is None:
            self.inputs.pop()

        self.attributes: dict[str, Any] = {"direction": direction}
        self.oracle: dict[str, Any] = {"direction": direction, "hidden_size": hidden}
        if rng.random() < 0.5:
            self.attributes["hidden_size"] = hidden
        if rng.random() < 0.3:
            self.attributes["clip"] = self.oracle["clip"] = float(rng.uniform(0.3, 2.0))
        if op == "GRU" and rng.random() < 0.5:
            self.attributes["linear_before_reset"] = self.oracle["linear_before_reset"] = 1
        if op == "LSTM" and rng.random() < 0.3:
            self.attributes["input_forget"] = self.oracle["input_forget"] = 1
        if rng.random() < 0.7:
            self._activations(rng, d * ACTIVATIONS_PER_DIRECTION[op])

    def _activations(self, rng: np.random.Generator, count: int) -> None:
        names = [str(rng.choice(list(ACTIVATION_PARAMETERS))) for _ in range(count)]
        alphas, betas = [], []
        for name in names:
            uses_alpha, uses_beta = ACTIVATION_PARAMETERS[name]
            alphas.append(float(rng.uniform(0.1, 0.9)) if uses_alpha else None)
            betas.append(float(rng.uniform(0.1, 0.9)) if uses_beta else None)
        self.attributes["activations"] = self.oracle["activations"] = names
        for key, values in (("activation_alpha", alphas), ("activation_beta", betas)):
            consumed = [v for v in values if v is not None]
            if consumed:
                self.attributes[key] = self.oracle[key] = consumed

    @property
    def outputs(self) -> int:
        return 1 + STATE_OUTPUTS[self.op]


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("op", OPS)
def test_matches_onnxruntime(op: str, seed: int) -> None:
    config = Config(op, seed)
    expected = onnxruntime_outputs(
        op, config.inputs, config.oracle, opset=14, outputs=config.outputs,
        output_types=TensorProto.FLOAT,
    )  # fmt: skip
    results = run_node(op, config.inputs, config.attributes, opset=14, outputs=config.outputs)
    for result, wanted in zip(results, expected, strict=True):
        assert_same(result, wanted, rtol=1e-4, atol=2e-5)


def _to_batch_major(config: Config) -> list[np.ndarray | None]:
    """The inputs of `config` for layout 1: X [B, T, I], initial states [B, D, H]."""
    inputs = list(config.inputs)
    inputs[0] = inputs[0].transpose(1, 0, 2).copy()
    for index in (5, 6):
        if index < len(inputs) and inputs[index] is not None:
            inputs[index] = inputs[index].transpose(1, 0, 2).copy()
    return inputs


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("op", OPS)
def test_layout_1_is_layout_0_transposed(op: str, seed: int) -> None:
    config = Config(op, 100 + seed)
    time_major = run_node(op, config.inputs, config.attributes, opset=14, outputs=config.outputs)
    batch_major = run_node(
        op, _to_batch_major(config), {**config.attributes, "layout": 1}, opset=22,
        outputs=config.outputs,
    )  # fmt: skip
    np.testing.assert_allclose(batch_major[0], time_major[0].transpose(2, 0, 1, 3), rtol=1e-6)
    for result, wanted in zip(batch_major[1:], time_major[1:], strict=True):
        np.testing.assert_allclose(result, wanted.transpose(1, 0, 2), rtol=1e-6)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("op", OPS)
def test_each_entry_runs_as_its_own_shorter_sequence(op: str, seed: int) -> None:
    """With sequence_lens, entry b is the layer on its first L steps alone (any L, 0 too),
    zero-padded in Y; Y_h (and Y_c) are its state after step L - 1, the initial one if L = 0."""
    config = Config(op, 200 + seed)
    inputs = config.inputs + [None] * (8 - len(config.inputs))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, config.steps + 1, size=config.batch).astype(np.int32)
    lengths[0] = 0
    inputs[4] = lengths
    results = run_node(op, inputs, config.attributes, opset=14, outputs=config.outputs)
    for b, length in enumerate(lengths):
        alone = list(inputs)
        alone[0] = inputs[0][:length, b : b + 1]
        alone[4] = None
        for index in (5, 6):
            if alone[index] is not None:
                alone[index] = alone[index][:, b : b + 1]
        own = run_node(op, alone, config.attributes, opset=14, outputs=config.outputs)
        np.testing.assert_allclose(results[0][:length, :, b : b + 1], own[0], rtol=1e-5, atol=1e-6)
        assert not results[0][length:, :, b].any()
        for state, own_state in zip(results[1:], own[1:], strict=True):
            np.testing.assert_allclose(state[:, b : b + 1], own_state, rtol=1e-5, atol=1e-6)
    initial_h = inputs[5] if inputs[5] is not None else np.zeros_like(results[1])
    np.testing.assert_array_equal(results[1][:, 0], initial_h[:, 0])


@pytest.mark.parametrize("op", OPS)
def test_every_opset_version_runs_the_same_layer(op: str) -> None:
    config = Config(op, 7)
    attributes = {k: v for k, v in config.attributes.items() if k != "linear_before_reset"}
    results = [
        run_node(op, config.inputs, attributes, opset=opset, outputs=config.outputs)
        for opset in (1, 3, 7, 14, 22, 23)
    ]
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def test_gru_1_has_no_linear_before_reset() -> None:
    config = Config("GRU", 3)
    plain = run_node("GRU", config.inputs, config.attributes, opset=1, outputs=2)
    ignored = run_node(
        "GRU", config.inputs, {**config.attributes, "linear_before_reset": 1}, opset=1, outputs=2
    )
    linear = run_node(
        "GRU", config.inputs, {**config.attributes, "linear_before_reset": 1}, opset=3, outputs=2
    )
    np.testing.assert_array_equal(plain[0], ignored[0])
    assert not np.allclose(plain[0], linear[0])


# -- element types -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("dtype", "opset", "rtol"),
    [(np.float16, 14, 1e-2), (ml_dtypes.bfloat16, 22, 5e-2), (np.float64, 14, 1e-5)],
)
def test_other_float_types_keep_their_type(op: str, dtype: Any, opset: int, rtol: float) -> None:
    config = Config(op, 11)
    reference = run_node(op, config.inputs, config.attributes, opset=14, outputs=config.outputs)
    narrow = [
        x.astype(dtype) if x is not None and x.dtype == np.float32 else x for x in config.inputs
    ]
    results = run_node(op, narrow, config.attributes, opset=opset, outputs=config.outputs)
    for result, wanted in zip(results, reference, strict=True):
        assert result.dtype == np.dtype(dtype) and result.shape == wanted.shape
        np.testing.assert_allclose(result.astype(np.float32), wanted, rtol=rtol, atol=rtol)


def test_bfloat16_before_opset_22_is_refused() -> None:
    config = Config("RNN", 1)
    inputs = [x.astype(ml_dtypes.bfloat16) if x.dtype == np.float32 else x for x in config.inputs]
    refused(ErrorKind.INVALID_MODEL, "RNN", inputs, config.attributes, opset=21, outputs=2)


# -- empty batches and sequences, absent outputs ---------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", [0, 1])
def test_empty_batch(op: str, layout: int) -> None:
    gates, states = GATES[op], STATE_OUTPUTS[op]
    x = np.zeros((3, 0, 2) if layout == 0 else (0, 3, 2), np.float32)
    w, r = np.ones((2, gates * 4, 2), np.float32), np.ones((2, gates * 4, 4), np.float32)
    lengths = np.zeros(0, np.int32)
    attributes = {"hidden_size": 4, "direction": "bidirectional", "layout": layout}
    results = run_node(op, [x, w, r, None, lengths], attributes, opset=14, outputs=1 + states)
    assert results[0].shape == ((3, 2, 0, 4) if layout == 0 else (0, 3, 2, 4))
    assert all(s.shape == ((2, 0, 4) if layout == 0 else (0, 2, 4)) for s in results[1:])


@pytest.mark.parametrize("op", OPS)
def test_empty_sequence_keeps_the_initial_state(op: str) -> None:
    gates, states = GATES[op], STATE_OUTPUTS[op]
    x = np.zeros((0, 2, 3), np.float32)
    w, r = np.ones((1, gates * 4, 3), np.float32), np.ones((1, gates * 4, 4), np.float32)
    initial = [np.full((1, 2, 4), 0.5 + k, np.float32) for k in range(states)]
    inputs = [x, w, r, None, np.zeros(2, np.int32), *initial]
    results = run_node(op, inputs, {"hidden_size": 4}, opset=14, outputs=1 + states)
    assert results[0].shape == (0, 1, 2, 4)
    for state, given in zip(results[1:], initial, strict=True):
        np.testing.assert_array_equal(state, given)
    without = run_node(op, [x, w, r], {"hidden_size": 4}, opset=14, outputs=1 + states)
    assert all(not s.any() and s.shape == (1, 2, 4) for s in without[1:])


def session_outputs(op: str, config: Config, outputs: list[str]) -> dict[str, np.ndarray]:
    model, given = one_node_model(
        op, config.inputs, config.attributes, outputs=outputs, output_types=TensorProto.FLOAT
    )
    session = Session.create(model_from_proto(model), SessionOptions())
    wanted = [o for o in outputs if o]
    return dict(zip(wanted, session.run(wanted, given), strict=True))


@pytest.mark.parametrize(
    ("op", "outputs"),
    [
        ("RNN", ["", "h"]),
        ("GRU", ["y"]),
        ("LSTM", ["", "h"]),
        ("LSTM", ["", "", "c"]),
        ("LSTM", ["y", "", "c"]),
    ],
)
def test_absent_outputs_in_a_session(op: str, outputs: list[str]) -> None:
    config = Config(op, 5)
    full = run_node(op, config.inputs, config.attributes, opset=17, outputs=config.outputs)
    results = session_outputs(op, config, outputs)
    for position, name in enumerate(outputs):
        if name:
            np.testing.assert_allclose(results[name], full[position], rtol=1e-6)


def test_infer_states_one_spec_per_output_empty_for_absent_ones() -> None:
    node = NodeInfo("lstm", "LSTM", "", 17, ("x", "w", "r"), ("", "h", ""), {"hidden_size": 3})
    operator = optable.resolve("", "LSTM", 17).factory(node)
    specs = [TensorSpec(1, (5, 2, 4)), TensorSpec(1, (1, 12, 4)), TensorSpec(1, (1, 12, 3))]
    stated = operator.infer(InferContext(node, specs, [None] * 3))
    assert stated == [TensorSpec(1, (0,)), TensorSpec(1, (1, 2, 3)), TensorSpec(1, (0,))]


# -- activation defaults and consumption ------------------------------------------------------


def _one_step_rnn(activation: str, attributes: dict) -> np.ndarray:
    """One step of a one-unit RNN whose pre-activation is x itself (W = 1, R = 0)."""
    x = np.array([[[-2.0], [-0.5], [0.5], [0.9], [1.0], [2.0]]], np.float32)
    w, r = np.ones((1, 1, 1), np.float32), np.zeros((1, 1, 1), np.float32)
    (y,) = run_node("RNN", [x, w, r], {"activations": [activation], **attributes}, outputs=1)
    return y.reshape(-1)


@pytest.mark.parametrize(
    ("activation", "formula"),
    [
        ("Relu", lambda x: np.maximum(x, 0)),
        ("Tanh", np.tanh),
        ("Sigmoid", lambda x: 1 / (1 + np.exp(-x))),
        ("Affine", lambda x: x),
        ("LeakyRelu", lambda x: np.where(x >= 0, x, 0.01 * x)),
        ("ThresholdedRelu", lambda x: np.where(x > 1.0, x, 0)),
        ("ScaledTanh", np.tanh),
        ("HardSigmoid", lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
        ("Elu", lambda x: np.where(x >= 0, x, np.expm1(x))),
        ("Softsign", lambda x: x / (1 + np.abs(x))),
        ("Softplus", lambda x: np.log1p(np.exp(x))),
    ],
)
def test_activation_defaults_are_those_of_the_onnx_operators(activation, formula) -> None:
    x = np.array([-2.0, -0.5, 0.5, 0.9, 1.0, 2.0])
    np.testing.assert_allclose(_one_step_rnn(activation, {}), formula(x), rtol=1e-6, atol=1e-7)


def test_activation_names_ignore_case_and_parameters_are_consumed_in_order() -> None:
    x = np.array([-2.0, -0.5, 0.5, 0.9, 1.0, 2.0])
    attributes = {"activation_alpha": [0.5], "activation_beta": [0.25]}
    np.testing.assert_allclose(_one_step_rnn("affine", attributes), 0.5 * x + 0.25, rtol=1e-6)
    np.testing.assert_allclose(
        _one_step_rnn("SCALEDTANH", attributes), 0.5 * np.tanh(0.25 * x), rtol=1e-6
    )


def test_clip_bounds_the_activation_input() -> None:
    x = np.array([-2.0, -0.5, 0.5, 0.9, 1.0, 2.0])
    clipped = _one_step_rnn("Affine", {"clip": 0.75})
    np.testing.assert_allclose(clipped, np.clip(x, -0.75, 0.75), rtol=1e-6)


def test_one_direction_keeps_the_first_half_of_a_two_direction_list() -> None:
    x = np.array([-2.0, -0.5, 0.5, 0.9, 1.0, 2.0])
    np.testing.assert_allclose(
        _one_step_rnn("Relu", {"activations": ["Relu", "Tanh"]}), np.maximum(x, 0)
    )


# -- refusals ----------------------------------------------------------------------------------


X = np.zeros((2, 1, 3), np.float32)
W = np.zeros((1, 4, 3), np.float32)
R = np.zeros((1, 4, 4), np.float32)


@pytest.mark.parametrize(
    ("attributes", "what"),
    [
        ({"direction": "sideways"}, "direction"),
        ({"activations": ["Gelu"]}, "unknown activation"),
        ({"activations": ["Tanh", "Tanh", "Tanh"]}, "activations"),
        ({"clip": 0.0}, "clip"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"layout": 2}, "layout"),
    ],
)
def test_bad_attributes_make_the_model_invalid(attributes: dict, what: str) -> None:
    with pytest.raises(SessionError, match=what) as caught:
        run_node("RNN", [X, W, R], {"hidden_size": 4, **attributes}, outputs=2)
    assert caught.value.kind is ErrorKind.INVALID_MODEL


@pytest.mark.parametrize(
    ("inputs", "attributes"),
    [
        ([X[0], W, R], {}),
        ([X, W[:, :, :2], R], {}),
        ([X, W, R], {"hidden_size": 3}),
        ([X, W, R, np.zeros((1, 4), np.float32)], {}),
        ([X, W, R, None, np.zeros(2, np.int32)], {}),
        ([X, W, R, None, None, np.zeros((1, 2, 4), np.float32)], {}),
        ([X, W, R, None, np.array([3], np.int32)], {}),
        ([X, W, R, None, np.array([-1], np.int32)], {}),
    ],
)
def test_bad_shapes_and_lengths_are_bad_input(inputs: list, attributes: dict) -> None:
    refused(ErrorKind.INVALID_INPUT, "RNN", inputs, attributes, outputs=2)


def test_wrong_types_make_the_model_invalid() -> None:
    refused(ErrorKind.INVALID_MODEL, "RNN", [X, W, R, None, np.array([1], np.int64)], {}, outputs=2)
    refused(ErrorKind.INVALID_MODEL, "RNN", [X, W.astype(np.float64), R], {}, outputs=2)


def test_lstm_peepholes_must_have_three_blocks_per_direction() -> None:
    w, r = np.zeros((1, 16, 3), np.float32), np.zeros((1, 16, 4), np.float32)
    p = np.zeros((1, 8), np.float32)
    inputs = [X, w, r, None, None, None, None, p]
    refused(ErrorKind.INVALID_INPUT, "LSTM", inputs, {}, outputs=3)


# -- the fused cells with constant weights (prepared once per plan) -----------------------------


def _constant_weight_layer(op: str, seed: int, batch: int, direction: str, layout: int):
    """A one-node model with W, R and B as initializers (what exported models have), default
    activations: the fused cells of backends/recurrent.py with prepared weights."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    steps, size, hidden = 9, 5, 7
    gates = GATES[op]

    def normal(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    weights = {
        "w": normal(d, gates * hidden, size),
        "r": normal(d, gates * hidden, hidden),
        "b": normal(d, 2 * gates * hidden),
    }
    x = normal(steps, batch, size, scale=1.0)
    h0 = normal(d, batch, hidden)
    attributes: dict[str, Any] = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attributes["linear_before_reset"] = seed % 2
    feeds = {"x": x, "h0": h0}
    names = ["x", "w", "r", "b", "", "h0"]
    if op == "LSTM":
        feeds["c0"] = normal(d, batch, hidden)
        names.append("c0")
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    if layout:
        attributes["layout"] = 1
        feeds = {k: v.transpose(1, 0, 2).copy() for k, v in feeds.items()}
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attributes)],
        "fused",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(("op", "seed"), [("RNN", 0), ("GRU", 0), ("GRU", 1), ("LSTM", 0)])
def test_constant_weights_are_prepared_once_and_match_onnxruntime(
    op: str, seed: int, batch: int, direction: str, layout: int, monkeypatch
) -> None:
    import onnxruntime

    from onemodel.graph.operators.recurrent import Recurrent

    prepared = []
    original = Recurrent._cell_weights

    def counted(self, *args):
        prepared.append(args[2])
        return original(self, *args)

    monkeypatch.setattr(Recurrent, "_cell_weights", counted)
    model, feeds = _constant_weight_layer(op, seed, batch, direction, layout)
    session = Session.create(model_from_proto(model), SessionOptions())
    results = [session.run(None, feeds) for _ in range(2)]
    directions = 2 if direction == "bidirectional" else 1
    assert prepared == list(range(directions))  # at plan time, not in the two runs
    for first, second in zip(*results, strict=True):
        np.testing.assert_array_equal(first, second)
    # onnxruntime has no layout 1: its layout-0 results, transposed.
    model, feeds = _constant_weight_layer(op, seed, batch, direction, 0)
    oracle = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    expected = oracle.run(None, feeds)
    if layout:
        expected = [expected[0].transpose(2, 0, 1, 3)] + [
            e.transpose(1, 0, 2) for e in expected[1:]
        ]
    for ours, theirs in zip(results[1], expected, strict=True):
        assert_same(ours, theirs, rtol=1e-5, atol=1e-6)


# -- a bidirectional layer over one batch entry: both directions in one loop ------------------


def _bidirectional_layer(op: str, lbr: int, batch: int, outputs: list[str], options: set[str]):
    """A bidirectional one-node model of hidden 6 over 7 steps; `options`: "constant" (W, R, B
    as initializers, prepared once per plan), "initial" (h0 and c0 given), "lengths" (every
    entry's sequence_lens the full length)."""
    rng = np.random.default_rng(batch + 2 * lbr + 4 * len(options))
    steps, size, hidden, gates = 7, 5, 6, GATES[op]

    def normal(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    values = {
        "x": normal(steps, batch, size, scale=1.0),
        "w": normal(2, gates * hidden, size),
        "r": normal(2, gates * hidden, hidden),
        "b": normal(2, 2 * gates * hidden),
    }
    names = ["x", "w", "r", "b", "", "", ""][: 6 + (op == "LSTM")]
    if "lengths" in options:
        values["lens"], names[4] = np.full(batch, steps, np.int32), "lens"
    if "initial" in options:
        for index, name in enumerate(["h0", "c0"][: STATE_OUTPUTS[op]]):
            values[name], names[5 + index] = normal(2, batch, hidden), name
    attributes: dict[str, Any] = {"hidden_size": hidden, "direction": "bidirectional"}
    if op == "GRU":
        attributes["linear_before_reset"] = lbr
    constants = {"w", "r", "b"} if "constant" in options else set()
    feeds = {n: v for n, v in values.items() if n not in constants}
    dtype = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32}
    graph = helper.make_graph(
        [helper.make_node(op, names, outputs, **attributes)],
        "bidirectional",
        [helper.make_tensor_value_info(n, dtype[v.dtype], v.shape) for n, v in feeds.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs if n],
        [numpy_helper.from_array(values[n], n) for n in sorted(constants)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


@pytest.mark.parametrize(
    "options",
    [{"constant"}, {"constant", "initial"}, {"constant", "initial", "lengths"}, {"initial"}],
    ids=lambda options: "+".join(sorted(options)),
)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize(
    ("op", "lbr", "outputs"),
    [
        (op, lbr, outputs)
        for op, lbr in [("LSTM", 0), ("GRU", 0), ("GRU", 1), ("RNN", 0)]
        for outputs in [["y", "y_h", "y_c"], ["y"], ["", "y_h"], ["", "", "y_c"]]
        if len(outputs) <= 1 + STATE_OUTPUTS[op]
    ]
    + [(op, 0, ["y", "y_h"]) for op in ("GRU", "RNN")],
    ids=lambda value: "-".join(value) if isinstance(value, list) else str(value),
)
def test_bidirectional_one_entry_in_one_loop_matches_onnxruntime(
    op: str, lbr: int, batch: int, outputs: list[str], options: set[str], monkeypatch
) -> None:
    """One batch entry runs both directions in one loop (`Cells.run_both`), a batch one loop
    per direction, and so do an LSTM and a GRU whose backend compiles their loops (a
    direction at a time: numpy_cpu/compiled_recurrent.py); either way onnxruntime's
    results, whichever outputs are asked for."""
    import onnxruntime

    from onemodel.backends import recurrent
    from onemodel.backends.numpy_cpu.compiled_recurrent import compiles

    joint = []
    original = recurrent.Cells.run_both
    monkeypatch.setattr(
        recurrent.Cells, "run_both", lambda self, *args: joint.append(1) or original(self, *args)
    )
    model, feeds = _bidirectional_layer(op, lbr, batch, outputs, options)
    ours = Session.create(model_from_proto(model), SessionOptions()).run(None, feeds)
    assert len(joint) == (batch == 1 and not (op in ("LSTM", "GRU") and compiles()))
    full = [name or f"unnamed{k}" for k, name in enumerate(["y", "y_h", "y_c"][: len(outputs)])]
    oracle_model, _ = _bidirectional_layer(op, lbr, batch, full, options)
    theirs = onnxruntime.InferenceSession(
        oracle_model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    wanted = [theirs[k] for k, name in enumerate(outputs) if name]
    for result, expected in zip(ours, wanted, strict=True):
        assert_same(result, expected, rtol=1e-5, atol=1e-6)
