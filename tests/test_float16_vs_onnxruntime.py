"""float16 models against onnxruntime: each operator alone, then a float16 ResNet-50.

onnxruntime's CPU provider has no float16 kernel for most operators on x86: it casts their
inputs to float32, runs the float32 kernel and casts the result back, so a lone float16 node
is its float32 computation rounded once. Where ONNX leaves the intermediate precision open
(Gemm's epilogue, pooling and reduction sums) onemodel's fast mode matches that bit for bit;
Conv and MatMul sum in float32 in another order (a few ulps on cancelling sums). Softmax keeps
ONNX's own step-by-step float16 definition, which a conformance case tells apart.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onemodel import Session
from onemodel.errors import ErrorKind, SessionError
from onemodel.session import ExecutionMode, SessionOptions

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(0)


def _half(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float16)


def _single_node(node, feeds: dict, initializers: dict) -> bytes:
    graph = helper.make_graph(
        [node], node.op_type,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT16, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _onnxruntime(model: bytes, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


CASES = {
    "Gemm": (
        helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, alpha=0.5, beta=2.0),
        {"x": _half(2, 512)}, {"w": _half(300, 512, scale=0.05), "b": _half(300)},
    ),
    "GlobalAveragePool": (
        helper.make_node("GlobalAveragePool", ["x"], ["y"]), {"x": _half(1, 256, 7, 7, scale=3)}, {}
    ),
    "AveragePool": (
        helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3]),
        {"x": _half(1, 16, 12, 12, scale=3)}, {},
    ),
    "ReduceMean": (
        helper.make_node("ReduceMean", ["x"], ["y"], axes=[-1]), {"x": _half(8, 768, scale=3)}, {}
    ),
    "BatchNormalization": (
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
        {"x": _half(1, 32, 8, 8)},
        {"s": _half(32), "b": _half(32), "m": _half(32), "v": np.abs(_half(32)) + np.float16(0.5)},
    ),
    "Add": (helper.make_node("Add", ["x", "z"], ["y"]), {"x": _half(1000)}, {"z": _half(1000)}),
}  # fmt: skip


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_lone_float16_operator_rounds_once_as_onnxruntime(op: str) -> None:
    node, feeds, initializers = CASES[op]
    model = _single_node(node, feeds, initializers)
    (expected,) = _onnxruntime(model, feeds)
    (got,) = Session.load(model).run(None, feeds)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("node", "feeds", "initializers"),
    [
        (
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            {"x": _half(1, 64, 10, 10)},
            {"w": _half(64, 64, 3, 3, scale=0.05)},
        ),
        (
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            {"x": _half(4, 512)},
            {"w": _half(512, 256, scale=0.05)},
        ),
    ],
    ids=["Conv", "MatMul"],
)
def test_float16_products_sum_in_float32_as_onnxruntime(node, feeds, initializers) -> None:
    """Both sum in float32 and round once; only the order of the float32 sums differs, which
    moves a rounding by one float16 step now and then (the outputs are of order 1)."""
    model = _single_node(node, feeds, initializers)
    (expected,) = _onnxruntime(model, feeds)
    (got,) = Session.load(model).run(None, feeds)
    assert np.mean(got != expected) < 0.01
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3)


# -- float16 chains: ONNX's types (the default) or onnxruntime's float32 (opt-in) -------------


def _chain() -> tuple[bytes, dict]:
    """float32 image → Cast to float16 → Conv → Relu → Conv → Add → Gemm head → float32, as
    onnxconverter-common writes a float16 model with float32 inputs and outputs."""
    nodes = [
        helper.make_node("Cast", ["image"], ["x"], to=TensorProto.FLOAT16),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf"], ["h"], transB=1),
        helper.make_node("Cast", ["h"], ["logits"], to=TensorProto.FLOAT),
    ]
    weights = {"w1": _half(16, 3, 3, 3, scale=0.5), "b1": _half(16),
               "w2": _half(16, 16, 3, 3, scale=0.3), "wf": _half(10, 16)}  # fmt: skip
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    image = (RNG.standard_normal((1, 3, 8, 8)) * 10).astype(np.float32)
    return model.SerializeToString(), {"image": image}


# float32 sums of other orders on logits of about 300 (an ulp is 3e-5 there).
FLOAT32_ORDER = {"rtol": 1e-5, "atol": 1e-4}


def _float32_twin(model: bytes) -> bytes:
    """The same model with every float16 weight and Cast made float32 (the weights' values
    exactly): the network onnxruntime's CPU provider runs for the float16 one."""
    proto = onnx.ModelProto.FromString(model)
    for tensor in proto.graph.initializer:
        wide = numpy_helper.to_array(tensor).astype(np.float32)
        tensor.CopyFrom(numpy_helper.from_array(wide, tensor.name))
    for node in proto.graph.node:
        if node.op_type == "Cast":
            node.attribute[0].i = TensorProto.FLOAT
    return proto.SerializeToString()


def test_onnxruntime_computes_a_float16_chain_as_its_float32_twin() -> None:
    """The fact the opt-in follows: onnxruntime's float16 result is its float32 network's
    (to a float32 ulp: its Conv kernels for weights fed by a Cast and for constant weights
    sum in other orders), not the float16-rounded chain (a float16 ulp is 2^13 of them)."""
    model, feeds = _chain()
    (half,) = _onnxruntime(model, feeds)
    (single,) = _onnxruntime(_float32_twin(model), feeds)
    np.testing.assert_allclose(half, single, rtol=1e-6, atol=0)


def test_float32_intermediates_give_onnxruntimes_float16_chain() -> None:
    model, feeds = _chain()
    (expected,) = _onnxruntime(model, feeds)
    options = SessionOptions(float16_intermediates="float32")
    (got,) = Session.load(model, options).run(None, feeds)
    np.testing.assert_allclose(got, expected, **FLOAT32_ORDER)
    (typed,) = Session.load(model).run(None, feeds)
    assert np.abs(typed - expected).max() > 10 * np.abs(got - expected).max()


def test_the_default_rounds_each_float16_value_as_onnx_types_it() -> None:
    """Fast mode's float16 chain equals exact mode's (each operator exact, rounded once to
    float16) on this small chain, and the compat layer, like onnxruntime on the CPU, does not
    round."""
    model, feeds = _chain()
    (typed,) = Session.load(model).run(None, feeds)
    (exact,) = Session.load(model, SessionOptions(mode=ExecutionMode.EXACT)).run(None, feeds)
    np.testing.assert_allclose(typed, exact, rtol=0, atol=2e-3)
    from onemodel.compat.onnxruntime import InferenceSession

    (compat,) = InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    (expected,) = _onnxruntime(model, feeds)
    np.testing.assert_allclose(compat, expected, **FLOAT32_ORDER)


def test_widening_keeps_float16_inputs_outputs_defaults_and_bodies() -> None:
    """A float16 input with a default, an If whose branches read it from outside (If has a
    float16 kernel: its inputs are rounded and its body kept in float16), a float16
    initializer that is also an output: the declared float16 signature stays and the results
    are onnxruntime's."""
    branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["y_then"])], "then", [],
        [helper.make_tensor_value_info("y_then", TensorProto.FLOAT16, None)],
    )  # fmt: skip
    other = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y_else"], to=TensorProto.FLOAT16)], "else", [],
        [helper.make_tensor_value_info("y_else", TensorProto.FLOAT16, None)],
    )  # fmt: skip
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["xk"]),
        helper.make_node("ReduceSum", ["xk"], ["s"], keepdims=0),
        helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["zero"], value_float=0.0),
        helper.make_node("Greater", ["s32", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["y"], then_branch=branch, else_branch=other),
        helper.make_node("Mul", ["y", "k"], ["yk"]),
        helper.make_node("Mul", ["yk", "xk"], ["z"]),
    ]
    half = TensorProto.FLOAT16
    graph = helper.make_graph(
        nodes, "signature", [helper.make_tensor_value_info("x", half, [4])],
        [helper.make_tensor_value_info(n, half, None) for n in ("z", "k", "x")],
        [numpy_helper.from_array(np.float16([1.5, 2, 3, 4]), "x"),
         numpy_helper.from_array(np.float16([0.1, 0.2, 0.3, 0.7]), "k")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    session = Session.load(data, SessionOptions(float16_intermediates="float32"))
    assert [(m.name, m.elem_type) for m in session.inputs] == [("x", half)]
    assert [m.elem_type for m in session.outputs] == [half] * 3
    x = np.float16([3.1, -1.7, 2.9, 0.3])
    for feeds in ({"x": x}, {"x": -x}, {}):
        got = session.run(None, feeds)
        for have, expected in zip(got, _onnxruntime(data, feeds), strict=True):
            assert have.dtype == expected.dtype == np.float16
            np.testing.assert_array_equal(have, expected)


def test_float16_intermediates_refuses_another_value() -> None:
    model, _ = _chain()
    with pytest.raises(SessionError, match="float16_intermediates") as caught:
        Session.load(model, SessionOptions(float16_intermediates="bfloat16"))
    assert caught.value.kind is ErrorKind.UNSUPPORTED
