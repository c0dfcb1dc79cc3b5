"""Dilated convolutions tap by tap over the outputs each tap reads x for (fast mode,
onemodel/graph/operators/conv_taps.py): DeepLabV3's atrous rates over small feature maps,
where most of what the windows read is padding. Results against onnxruntime; the path taken
from the plan's prepared values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel.graph.operators.conv_taps import LiveTaps, tap_interval
from onemodel.graph.operators.fused import Chain
from onemodel.graph.run_state import Prepared

F = TensorProto.FLOAT


def _model(x_shape, w, *, dilation, pad, stride=1, bias=True, relu=False, dims=None) -> bytes:
    rng = np.random.default_rng(3)
    rank = len(x_shape) - 2
    inits = [numpy_helper.from_array(w, "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(
            numpy_helper.from_array(rng.standard_normal(w.shape[0]).astype(np.float32), "b")
        )
        inputs.append("b")
    nodes = [
        helper.make_node(
            "Conv", inputs, ["c" if relu else "y"], dilations=[dilation] * rank,
            pads=list(pad) if isinstance(pad, tuple) else [pad] * 2 * rank, strides=[stride] * rank,
        )
    ]  # fmt: skip
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(
        nodes, "dilated", [helper.make_tensor_value_info("x", F, dims or list(x_shape))],
        [helper.make_tensor_value_info("y", F, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _weights(m: int, c: int, kernel: tuple[int, ...]) -> np.ndarray:
    return (np.random.default_rng(1).standard_normal((m, c, *kernel)) * 0.2).astype(np.float32)


def _onnxruntime(model: bytes, x: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _live_taps(session: onemodel.Session) -> list[LiveTaps]:
    found = []
    for plan in session.plans():
        for value in Prepared(plan).values:
            value = value.prepared if isinstance(value, Chain) else value
            if isinstance(value, LiveTaps):
                found.append(value)
    return found


CASES = [
    # (x shape, M, kernel, dilation, pads, stride, taps kept or None for the usual paths)
    ((1, 64, 14, 14), 32, (3, 3), 36, 36, 1, 1),  # every outer tap reads padding only
    ((1, 64, 14, 14), 32, (3, 3), 24, 24, 1, 1),
    ((1, 64, 14, 14), 32, (3, 3), 12, 12, 1, 9),  # outer taps over two rows and columns
    ((2, 48, 14, 14), 40, (3, 3), 6, 6, 1, 9),
    ((1, 32, 33, 33), 16, (3, 3), 12, 12, 1, 9),
    ((1, 16, 15, 13), 24, (3, 3), 5, (7, 2, 5, 9), 2, 9),  # strided, uneven pads
    ((1, 8, 20), 12, (5,), 8, 16, 1, 5),  # 1-D
    ((1, 16, 32, 32), 16, (3, 3), 2, 2, 1, None),  # little padding: the usual paths
    ((1, 16, 14, 14), 16, (3, 3), 1, 1, 1, None),  # undilated
]


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize(("x_shape", "m", "kernel", "dilation", "pad", "stride", "kept"), CASES)
def test_dilated_convolutions_match_onnxruntime(
    x_shape, m, kernel, dilation, pad, stride, kept, relu
):
    w = _weights(m, x_shape[1], kernel)
    model = _model(x_shape, w, dilation=dilation, pad=pad, stride=stride, relu=relu)
    x = np.random.default_rng(2).standard_normal(x_shape).astype(np.float32)
    session = onemodel.Session.load(model)
    np.testing.assert_allclose(
        session.run(None, {"x": x})[0], _onnxruntime(model, x), rtol=1e-4, atol=1e-4
    )
    taps = _live_taps(session)
    if kept is None:
        assert not taps
    else:
        assert [len(t.taps) for t in taps] == [kept]


def test_the_taps_are_boxed_to_the_outputs_that_read_x():
    """Rate 12 over 14×14 with pad 12: the first tap row reads x for output rows 12 and 13
    only, the middle one for every row, the last for rows 0 and 1."""
    assert tap_interval(14, 1, 0 * 12 - 12, 14) == (12, 14)
    assert tap_interval(14, 1, 1 * 12 - 12, 14) == (0, 14)
    assert tap_interval(14, 1, 2 * 12 - 12, 14) == (0, 2)
    assert tap_interval(14, 1, 36 - 36 + 36, 14) == (0, 0)  # reads padding only
    assert tap_interval(15, 2, -7, 11) == (4, 11)  # stride 2: rows 1, 3, ..., 13


def test_without_bias_and_over_a_batch():
    w = _weights(16, 24, (3, 3))
    model = _model((3, 24, 10, 10), w, dilation=8, pad=8, bias=False)
    x = np.random.default_rng(4).standard_normal((3, 24, 10, 10)).astype(np.float32)
    session = onemodel.Session.load(model)
    np.testing.assert_allclose(
        session.run(None, {"x": x})[0], _onnxruntime(model, x), rtol=1e-4, atol=1e-4
    )
    assert _live_taps(session)


def test_an_infinite_weight_on_a_tap_that_reads_only_padding_adds_nothing():
    """As in onnxruntime (whose kernel skips such taps too): not 0·inf = NaN. The same weight
    on a tap that reads x makes every output NaN or infinite."""
    w = _weights(8, 8, (3, 3))
    w[0, 0, 0, 0] = np.inf
    x = np.random.default_rng(5).standard_normal((1, 8, 14, 14)).astype(np.float32)
    model = _model((1, 8, 14, 14), w, dilation=24, pad=24)
    session = onemodel.Session.load(model)
    mine, theirs = session.run(None, {"x": x})[0], _onnxruntime(model, x)
    assert _live_taps(session) and np.isfinite(theirs).all()
    np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-4)
    w[0, 0, 0, 0], w[0, 0, 1, 1] = 0, np.inf
    mine = onemodel.Session.load(_model((1, 8, 14, 14), w, dilation=24, pad=24)).run(None, {"x": x})
    assert not np.isfinite(mine[0][0, 0]).any() and np.isfinite(mine[0][0, 1:]).all()


def test_exact_mode_keeps_its_own_path():
    w = _weights(8, 8, (3, 3))
    model = _model((1, 8, 14, 14), w, dilation=24, pad=24)
    x = np.random.default_rng(6).standard_normal((1, 8, 14, 14)).astype(np.float32)
    exact = onemodel.Session.load(model, onemodel.SessionOptions(mode=onemodel.ExecutionMode.EXACT))
    np.testing.assert_allclose(
        exact.run(None, {"x": x})[0], _onnxruntime(model, x), rtol=1e-4, atol=1e-4
    )
    assert not _live_taps(exact)


def test_inputs_of_several_shapes_get_their_own_taps():
    w = _weights(8, 8, (3, 3))
    model = _model((1, 8, 14, 14), w, dilation=12, pad=12, dims=[1, 8, "h", "w"])
    session = onemodel.Session.load(model)
    for shape in ((1, 8, 14, 14), (1, 8, 20, 9), (1, 8, 14, 14)):
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(
            session.run(None, {"x": x})[0], _onnxruntime(model, x), rtol=1e-4, atol=1e-4
        )
