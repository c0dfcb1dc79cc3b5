"""Bound steps (Operator.bind): a fast-mode run state calls what each step's operator settled
at plan time instead of `run`, and must get `run`'s bits. Checked runs never bind, so a
checked session of the same model is the reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel import ErrorKind, SessionError
from onemodel.backends.broadcasting import held_operand
from onemodel.bench_graphs import vad_stream_inputs, vad_stream_model
from onemodel.graph.run_state import RunState

F = TensorProto.FLOAT
MODELS = "tests/models"


def _sessions(model: bytes | str) -> tuple[onemodel.Session, onemodel.Session]:
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    unbound = onemodel.Session.load(
        model, onemodel.SessionOptions(intra_op_threads=1, checked=True)
    )
    return fast, unbound


def _is_bound(call: object) -> bool:
    """Whether a run state's call for a step was made by an operator's `bind`."""
    name = getattr(call, "__qualname__", "")
    return "bind" in name and name.endswith("<locals>.call")


def _bound_count(session: onemodel.Session) -> int:
    """Steps of the session's plans (and of the If branches they enter) whose call is bound."""
    count = 0
    for plan in session.plans():
        for step in RunState(plan).steps:
            count += _is_bound(step.call)
            for name in ("then_branch", "else_branch"):
                branch = getattr(step.node.operator, name, None)
                for body_plan in branch.plans() if branch is not None else ():
                    count += sum(_is_bound(s.call) for s in RunState(body_plan).steps)
    return count


def _assert_same_bits(fast: onemodel.Session, unbound: onemodel.Session, feeds: dict) -> None:
    for mine, reference in zip(fast.run(None, feeds), unbound.run(None, feeds), strict=True):
        assert mine.dtype == reference.dtype
        np.testing.assert_array_equal(mine, reference)
        assert mine.tobytes() == reference.tobytes()


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_bench_models_run_bound_with_the_unbound_bits(name: str) -> None:
    path = f"{MODELS}/{name}.onnx"
    feeds = {
        k: v
        for k, v in np.load(f"{MODELS}/{name}.inputs.npz").items()
        if not k.startswith("output:")
    }
    fast, unbound = _sessions(path)
    _assert_same_bits(fast, unbound, feeds)
    assert _bound_count(fast) > 0


def test_the_streaming_model_carries_its_state_bound_with_the_unbound_bits() -> None:
    model = vad_stream_model().SerializeToString()
    fast, unbound = _sessions(model)
    feeds = {"fast": vad_stream_inputs(), "unbound": vad_stream_inputs()}
    for _ in range(20):
        prob, feeds["fast"]["state"] = fast.run(None, feeds["fast"])
        expected, feeds["unbound"]["state"] = unbound.run(None, feeds["unbound"])
        assert prob.tobytes() == expected.tobytes()
        assert feeds["fast"]["state"].tobytes() == feeds["unbound"]["state"].tobytes()
    assert _bound_count(fast) >= 20  # the branch's steps


def _every_bound_kind() -> bytes:
    """One node of each operator with a bound call, on small float32 tensors."""
    rng = np.random.default_rng(5)

    def weight(name: str, shape: tuple[int, ...]) -> object:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def ints(name: str, values: list[int]) -> object:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Slice", ["x", "s0", "s1", "ax1"], ["xs"]),
        helper.make_node("MatMul", ["xs", "w"], ["m"]),
        helper.make_node("Gemm", ["m", "wt", "b"], ["g"], transB=1),
        helper.make_node("Gemm", ["m", "wt"], ["g2"], transB=1),
        helper.make_node("Gemm", ["m", "w2", "b"], ["g3"]),
        helper.make_node("Gelu", ["g"], ["ge"], domain="com.microsoft"),
        helper.make_node("Sigmoid", ["g2"], ["sg"]),
        helper.make_node("Tanh", ["g3"], ["th"]),
        helper.make_node("Relu", ["ge"], ["r"]),
        helper.make_node("Mul", ["r", "sg"], ["p"]),
        helper.make_node("Add", ["p", "th"], ["q"]),
        helper.make_node("ReduceMean", ["q"], ["mean"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["q", "mean"], ["centred"]),
        helper.make_node("Split", ["centred", "halves"], ["h0", "h1"], axis=1),
        helper.make_node("Concat", ["h1", "h0"], ["cat"], axis=0),
        helper.make_node("Gather", ["cat", "one"], ["row"], axis=0),
        helper.make_node("Equal", ["k", "k0"], ["same"]),
    ]
    graph = helper.make_graph(
        nodes,
        "bound",
        [
            helper.make_tensor_value_info("x", F, [2, 40]),
            helper.make_tensor_value_info("k", TensorProto.INT64, []),
        ],
        [
            helper.make_tensor_value_info("cat", F, [4, 8]),
            helper.make_tensor_value_info("row", F, [8]),
            helper.make_tensor_value_info("same", TensorProto.BOOL, []),
        ],
        [
            ints("s0", [3]), ints("s1", [35]), ints("ax1", [1]), weight("w", (32, 16)),
            weight("wt", (16, 16)), weight("w2", (16, 16)), weight("b", (16,)),
            ints("halves", [8, 8]), numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array(7, np.int64), "k0"),
        ],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_every_bound_operator_gives_the_unbound_bits() -> None:
    fast, unbound = _sessions(_every_bound_kind())
    rng = np.random.default_rng(6)
    for k in (7, 3):
        feeds = {"x": rng.standard_normal((2, 40)).astype(np.float32), "k": np.array(k)}
        _assert_same_bits(fast, unbound, feeds)
    # without fusion every node but the folded ones is a step of its own, each one bound
    assert _bound_count(fast) >= 10


def test_a_constant_gather_index_out_of_range_still_fails_by_name() -> None:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "nine"], ["y"], name="pick", axis=0)],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [3])],
        [numpy_helper.from_array(np.array(9, np.int64), "nine")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onemodel.Session.load(model.SerializeToString())
    with pytest.raises(SessionError) as raised:
        session.run(None, {"x": np.zeros((2, 3), np.float32)})
    assert raised.value.kind is ErrorKind.INVALID_INPUT
    assert "pick" in str(raised.value)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_weight_product_gives_matmuls_bits(dtype: type) -> None:
    """NumpyKernels.weight_product (np.dot) against np.matmul, C- and F-ordered weights."""
    kernels = onemodel.Session.load(f"{MODELS}/mlp.onnx").kernels
    product = kernels.weight_product(np.dtype(dtype), 2)
    assert product is not None
    rng = np.random.default_rng(7)
    for m in (1, 2, 3, 7, 14, 64):
        for k in (1, 3, 16, 63, 257, 512):
            for n in (1, 2, 10, 65, 514):
                a = rng.standard_normal((m, k)).astype(dtype)
                w = rng.standard_normal((k, n)).astype(dtype)
                for b in (w, np.asfortranarray(w)):
                    expected = np.matmul(a, b)
                    out = np.empty((m, n), dtype)
                    product(a, b, out=out)
                    assert out.tobytes() == expected.tobytes(), (m, k, n, b.flags.f_contiguous)


class _MatmulShapes:
    """numpy with its matmul recording the rank of each left operand it is given."""

    def __init__(self) -> None:
        self.ranks: list[int] = []

    def matmul(self, a: np.ndarray, b: np.ndarray, **kwargs: object) -> np.ndarray:
        self.ranks.append(a.ndim)
        return np.matmul(a, b, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


def test_a_stack_times_one_matrix_is_one_product_of_all_its_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """matmul_arrays multiplies a (2, 3, 5, 16) stack by a (16, 8) weight as one (30, 16)
    matrix (np.matmul would run a GEMM per 5-row matrix, each packing the weight again), and
    the bound step's weight_product gives those bits."""
    kernels = onemodel.Session.load(f"{MODELS}/mlp.onnx").kernels
    spy = _MatmulShapes()
    monkeypatch.setattr(type(kernels), "xp", property(lambda self: spy))
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        a = rng.standard_normal((2, 3, 5, 16)).astype(dtype)
        w = rng.standard_normal((16, 8)).astype(dtype)
        out = np.empty((2, 3, 5, 8), dtype)
        kernels.matmul_arrays(a, w, out)
        assert spy.ranks[-1] == 2
        assert out.tobytes() == np.matmul(a.reshape(30, 16), w).tobytes()
        bound = np.empty_like(out)
        kernels.weight_product(np.dtype(dtype), 4)(a, w, out=bound)
        assert bound.tobytes() == out.tobytes()
        strided = np.zeros((2, 3, 5, 16), dtype)[..., ::2]  # a view the product must reach
        kernels.weight_product(np.dtype(dtype), 4)(a, w, out=strided)
        # Into a strided view NumPy may sum in another order: within 16 roundings of the
        # terms' magnitudes (a relative bound fails where the terms cancel).
        scale = np.abs(a) @ np.abs(w) * 16 * np.finfo(dtype).eps
        assert np.all(np.abs(strided - out) <= scale)


def _embedding() -> bytes:
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0)],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("rows", F, [2, 3, 4])],
        [numpy_helper.from_array(table, "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_a_bound_gather_of_run_time_indices_wraps_negatives_and_refuses_by_name() -> None:
    fast, unbound = _sessions(_embedding())
    ids = np.array([[0, -1, 3], [-10, 9, 2]], np.int64)
    _assert_same_bits(fast, unbound, {"ids": ids})
    assert _bound_count(fast) == 1
    for bad in (10, -11):
        with pytest.raises(SessionError) as raised:
            fast.run(None, {"ids": np.array([[0, bad, 1], [2, 3, 4]], np.int64)})
        assert raised.value.kind is ErrorKind.INVALID_INPUT
        assert "embed" in str(raised.value) and str(bad) in str(raised.value)


def test_a_constant_operand_that_broadcasts_is_held_full_once() -> None:
    bias = np.arange(64, dtype=np.float32)
    held = held_operand(np, bias, (2, 7, 64))
    assert held.shape == (2, 7, 64) and held.flags.c_contiguous
    np.testing.assert_array_equal(held, np.broadcast_to(bias, (2, 7, 64)))
    full = np.ones((2, 7, 64), np.float32)
    single = np.array([2.0], np.float32)
    assert held_operand(np, full, (2, 7, 64)) is full  # nothing to broadcast
    assert held_operand(np, single, (2, 7, 64)) is single  # NumPy takes it as a scalar
    assert held_operand(np, bias, (512, 64)) is bias  # above ROW_BUFFER_ABOVE elements


def _constant_operands() -> bytes:
    """Add, Sub, Mul and Gemm with constant operands that broadcast either way round."""
    rng = np.random.default_rng(9)

    def weight(name: str, shape: tuple[int, ...]) -> object:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Add", ["bias", "x"], ["a"]),
        helper.make_node("Sub", ["a", "column"], ["s"]),
        helper.make_node("Mul", ["s", "row"], ["m"]),
        helper.make_node("Gemm", ["m", "w", "c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "constants",
        [helper.make_tensor_value_info("x", F, [3, 16])],
        [helper.make_tensor_value_info("y", F, [3, 8])],
        [weight("bias", (16,)), weight("column", (3, 1)), weight("row", (1, 16)),
         weight("w", (16, 8)), weight("c", (8,))],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_held_constant_operands_give_the_unbound_bits() -> None:
    model = _constant_operands()
    fast, unbound = _sessions(model.SerializeToString())
    x = np.random.default_rng(10).standard_normal((3, 16)).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    _assert_same_bits(fast, unbound, {"x": x})
    _assert_same_bits(fast, unbound, {"x": x[::-1].copy()})  # the held arrays are not written
    assert _bound_count(fast) >= 1


def _held_chain() -> bytes:
    """One fused chain of small element-wise steps, each with a constant operand on either
    side (Sub's order matters), broadcasting or full."""
    rng = np.random.default_rng(11)

    def weight(name: str, shape: tuple[int, ...]) -> object:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Sub", ["column", "a"], ["s"]),
        helper.make_node("Mul", ["s", "full"], ["m"]),
        helper.make_node("Sub", ["m", "row"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "held_chain",
        [helper.make_tensor_value_info("x", F, [3, 16])],
        [helper.make_tensor_value_info("y", F, [3, 16])],
        [weight("bias", (16,)), weight("column", (3, 1)), weight("full", (3, 16)),
         weight("row", (1, 16))],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_fused_chain_calls_each_members_ufunc_on_its_held_operand() -> None:
    """A bound binary step with a constant operand says what it holds (`HeldOperand`), and a
    fused chain of such members calls the ufuncs itself: the unbound bits, either side."""
    fast, unbound = _sessions(_held_chain().SerializeToString())
    (step,) = fast._graph.nodes
    assert step.info.op_type == "fused(Add+Sub+Mul+Sub)"
    x = np.random.default_rng(12).standard_normal((3, 16)).astype(np.float32)
    x[1, :3] = [np.nan, np.inf, -0.0]
    _assert_same_bits(fast, unbound, {"x": x})
    _assert_same_bits(fast, unbound, {"x": x + 1})
    (plan,) = fast.plans()
    (bound,) = RunState(plan).steps
    (links,) = [cell.cell_contents for cell in bound.call.__closure__ or ()]
    forms = [(link[0], link[1], link[2].shape) for link in links[1:]]  # the first reads x
    assert forms == [
        (np.subtract, "ufunc(held, previous)", (3, 16)),  # the column held full
        (np.multiply, "ufunc(previous, held)", (3, 16)),
        (np.subtract, "ufunc(previous, held)", (3, 16)),
    ]


def _uniform_weight_products() -> bytes:
    """MatMul and Gemm (transB) by weights that ConstantOfShape fills with 0.02, 1000 columns,
    as the ONNX suite's light Inception-v1 classifier has."""
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.02])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=fill),
        helper.make_node("ConstantOfShape", ["wt_shape"], ["wt"], value=fill),
        helper.make_node("MatMul", ["x", "w"], ["matmul"]),
        helper.make_node("Gemm", ["x", "wt"], ["gemm"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "uniform",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            for name in ("matmul", "gemm")
        ],
        [
            numpy_helper.from_array(np.array([1024, 1000], np.int64), "w_shape"),
            numpy_helper.from_array(np.array([1000, 1024], np.int64), "wt_shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def test_equal_weight_columns_give_equal_output_columns() -> None:
    """A weight whose columns are all equal gives output columns with equal bits, bound or
    not: a GEMM rounds its edge blocks' columns in another order, which a softmax over logits
    of 1e20 (light Inception-v1) turns into 0.125 where 0.001 is the answer."""
    x = np.random.default_rng(5).uniform(1e17, 1e20, (1, 1024)).astype(np.float32)
    expected = x.astype(np.float64).sum(axis=1, keepdims=True) * np.float64(np.float32(0.02))
    for session in _sessions(_uniform_weight_products()):
        for y in session.run(None, {"x": x}):
            assert (y == y[:, :1]).all()
            np.testing.assert_allclose(y[:, :1], expected, rtol=1e-5)
