"""Values held channels last between depthwise and 1×1 convolutions (graph/layouts.py):
chosen where every step around them takes them, computed as the planar run computes them,
and never seen by the caller."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session
from onemodel.graph.run_state import Prepared
from onemodel.session import SessionOptions

RNG = np.random.default_rng(7)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _block(stride: int, reduce_mean: bool) -> onnx.ModelProto:
    """An inverted residual block: 1×1 expansion + Clip, depthwise 3×3 + HardSwish, a
    squeeze-and-excitation gate, 1×1 projection (+ the residual at unit stride), and a head
    that pools the result."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["e"], kernel_shape=[1, 1]),
        helper.make_node("Clip", ["e", "lo", "hi"], ["ea"]),
        helper.make_node(
            "Conv", ["ea", "wd", "bd"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
            strides=[stride, stride], group=24,
        ),
        helper.make_node("HardSwish", ["d"], ["da"]),
        helper.make_node("ReduceMean", ["da"], ["s"], axes=[2, 3], keepdims=1)
        if reduce_mean
        else helper.make_node("GlobalAveragePool", ["da"], ["s"]),
        helper.make_node("Conv", ["s", "ws1", "bs1"], ["s1"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["s1"], ["s1a"]),
        helper.make_node("Conv", ["s1a", "ws2", "bs2"], ["s2"], kernel_shape=[1, 1]),
        helper.make_node("HardSigmoid", ["s2"], ["gate"]),
        helper.make_node("Mul", ["gate", "da"], ["g"]),
        helper.make_node("Conv", ["g", "w2", "b2"], ["p"], kernel_shape=[1, 1]),
    ]  # fmt: skip
    last = "p"
    if stride == 1:
        nodes.append(helper.make_node("Add", ["p", "x"], ["r"]))
        last = "r"
    nodes += [
        helper.make_node("Conv", [last, "w3"], ["h"], kernel_shape=[1, 1]),
        helper.make_node("Sigmoid", ["h"], ["y"]),
        helper.make_node("GlobalAveragePool", ["y"], ["pooled"]),
    ]
    initializers = [
        _weight("w1", 24, 8, 1, 1), _weight("b1", 24),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
        _weight("wd", 24, 1, 3, 3), _weight("bd", 24),
        _weight("ws1", 6, 24, 1, 1), _weight("bs1", 6),
        _weight("ws2", 24, 6, 1, 1), _weight("bs2", 24),
        _weight("w2", 8, 24, 1, 1), _weight("b2", 8),
        _weight("w3", 16, 8, 1, 1),
    ]  # fmt: skip
    side = 14 // stride
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 14, 14])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, side, side]),
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [2, 16, 1, 1]),
        ],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _held(session: Session, x: np.ndarray) -> tuple[list[np.ndarray], frozenset[str]]:
    """The session's outputs, and the names of the values its plan holds channels last."""
    outputs = session.run(None, {"x": x})
    (plan,) = session.plans()
    names = frozenset(plan.names[v] for v in Prepared(plan).channels_last)
    return outputs, names


@pytest.mark.parametrize("stride, reduce_mean", [(1, False), (2, True)])
def test_a_block_holds_its_inner_values_channels_last_and_computes_as_the_planar_run(
    stride: int, reduce_mean: bool
) -> None:
    model = _block(stride, reduce_mean).SerializeToString()
    x = RNG.standard_normal((2, 8, 14, 14)).astype(np.float32)
    plain, held = _held(Session.load(model), x)
    # The expansion, the depthwise result, the gated product; not the graph's outputs.
    assert {"ea", "g"} <= held and not held & {"x", "y", "pooled"}
    planar = Session.load(model, SessionOptions(checked=True)).run(None, {"x": x})
    for got, want in zip(plain, planar, strict=True):
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_a_value_read_by_another_operator_stays_planar() -> None:
    """The depthwise result also feeds a Transpose, which takes C order only."""
    model = _block(1, False)
    graph = model.graph
    graph.node.append(helper.make_node("Transpose", ["da"], ["t"], perm=[0, 2, 3, 1]))
    graph.output.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 14, 14, 24]))
    x = RNG.standard_normal((2, 8, 14, 14)).astype(np.float32)
    plain, held = _held(Session.load(model.SerializeToString()), x)
    assert "ea" in held and "da" not in held
    planar = Session.load(model.SerializeToString(), SessionOptions(checked=True))
    for got, want in zip(plain, planar.run(None, {"x": x}), strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_exact_mode_holds_nothing_channels_last() -> None:
    model = _block(1, False).SerializeToString()
    x = RNG.standard_normal((2, 8, 14, 14)).astype(np.float32)
    _, held = _held(Session.load(model, SessionOptions(mode="exact")), x)
    assert held == frozenset()
