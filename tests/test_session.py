"""Sessions: loading, metadata, runs in every form, validation errors, plans and threads."""

from __future__ import annotations

import io
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel import (
    ErrorKind,
    ExecutionMode,
    OptimizationLevel,
    Session,
    SessionError,
    SessionOptions,
)
from onemodel.examples import mlp_model
from onemodel.graph.importer import load_model, model_from_proto
from onemodel.graph.plan import StepKind


def session_for(model: onnx.ModelProto, **options) -> Session:
    return Session.create(model_from_proto(model), SessionOptions(**options))


def reference_mlp(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    w = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    return np.maximum(x @ w["W1"] + w["b1"], 0) @ w["W2"] + w["b2"]


def single_node_model(op_type, inputs, outputs, *, opset=17, **attributes) -> onnx.ModelProto:
    node = helper.make_node(op_type, [i.name for i in inputs], [o.name for o in outputs],
                            name=f"{op_type.lower()}_0", **attributes)  # fmt: skip
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def mlp() -> onnx.ModelProto:
    return mlp_model()


X = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)


def test_load_from_path_bytes_and_stream_agree(tmp_path, mlp):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp, path)
    expected = reference_mlp(mlp, X)
    for source in (str(path), path, mlp.SerializeToString(), io.BytesIO(mlp.SerializeToString())):
        (y,) = Session.load(source).run(None, {"x": X})
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_metadata_names_types_and_symbolic_dims(mlp):
    session = session_for(mlp)
    (x,) = session.inputs
    (y,) = session.outputs
    assert (x.name, x.elem_type, x.dims, x.kind) == (
        "x",
        TensorProto.FLOAT,
        ("batch", 16),
        "tensor",
    )
    assert (y.name, y.dims) == ("y", ("batch", 4))
    assert session.backend == "numpy"


def test_happy_path_load_and_run_array(tmp_path, mlp):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp, path)
    model = onemodel.load(path)
    np.testing.assert_allclose(model.run(X), reference_mlp(mlp, X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model.run([X]), reference_mlp(mlp, X), rtol=1e-5, atol=1e-6)


def test_output_names_select_and_order():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("r", "n")]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Neg", ["a"], ["n"])],
        "g", [a], outs,
    )  # fmt: skip
    session = session_for(helper.make_model(graph))
    values = np.array([-1.0, 2.0], np.float32)
    n, r = session.run(["n", "r"], {"a": values})
    np.testing.assert_array_equal(n, -values)
    np.testing.assert_array_equal(r, np.maximum(values, 0))
    with pytest.raises(SessionError, match="has no output 'zz'") as error:
        session.run(["zz"], {"a": values})
    assert error.value.kind is ErrorKind.INVALID_INPUT


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"x": X, "extra": X}, "has no input 'extra'; its inputs are x"),
        ({}, "missing required input"),
        ({"x": X.astype(np.float64)}, "expects element type FLOAT, got DOUBLE"),
        ({"x": X[0]}, r"expects rank 2 \[batch, 16\], got shape \[16\]"),
        ({"x": X[:, :3]}, r"expects extent 16 on axis 1"),
        ({"x": "text"}, "cannot convert"),
    ],
)
def test_bad_inputs_are_refused_before_running(mlp, feeds, message):
    session = session_for(mlp)
    with pytest.raises(SessionError, match=message) as error:
        session.run(None, feeds)
    assert error.value.kind is ErrorKind.INVALID_INPUT
    assert session.plan_count() == 0  # refused before any plan was made


def test_lists_big_endian_and_strided_inputs_are_read_correctly(mlp):
    session = session_for(mlp)
    expected = reference_mlp(mlp, X)
    feeds = [X.tolist(), X.astype(">f4"), np.asfortranarray(X)]
    for feed in feeds:
        (y,) = session.run(None, {"x": feed})
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    strided = np.zeros((5, 32), np.float32)
    strided[:, ::2] = X
    (y,) = session.run(None, {"x": strided[:, ::2]})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_caller_arrays_are_never_modified(mlp):
    x = X.copy()
    x.flags.writeable = False
    session_for(mlp).run(None, {"x": x})
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("reader", ["dynamic-reshape", "optional"])
def test_exact_mode_rewrites_nans_without_touching_the_callers_array(reader: str) -> None:
    """Exact mode writes NaNs canonically, in its own arrays: a run-time view of an input, or
    an optional input's element, must not make it rewrite the caller's NaN in place."""
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if reader == "dynamic-reshape":
        inputs = [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ]
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
        extra = {"shape": np.array([2, 2])}
    else:
        optional = helper.make_optional_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, [4])
        )
        inputs = [helper.make_value_info("x", optional)]
        nodes = [helper.make_node("OptionalGetElement", ["x"], ["y"])]
        extra = {}
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [y]), opset_imports=[helper.make_opsetid("", 18)]
    )
    x = np.array([1, 2, 3, 4], np.float32)
    x.view(np.uint32)[1] = 0x7FC12345  # a NaN with a payload
    before = x.copy()
    (result,) = session_for(model, mode=ExecutionMode.EXACT).run(None, {"x": x, **extra})
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))
    assert np.isnan(result.reshape(-1)[1])


def test_run_into_writes_the_callers_array_and_checks_it_first(mlp):
    session = session_for(mlp)
    out = np.full((5, 4), np.nan, np.float32)
    (y,) = session.run_into({"x": X}, {"y": out})
    assert y is out
    np.testing.assert_allclose(out, reference_mlp(mlp, X), rtol=1e-5, atol=1e-6)
    with pytest.raises(SessionError, match=r"output buffer is float32\[3, 4\]") as error:
        session.run_into({"x": X}, {"y": np.empty((3, 4), np.float32)})
    assert error.value.kind is ErrorKind.INVALID_INPUT


def test_run_single_takes_and_returns_one_array(mlp):
    y = session_for(mlp).run_single(X)
    np.testing.assert_allclose(y, reference_mlp(mlp, X), rtol=1e-5, atol=1e-6)


def test_outputs_do_not_alias_between_runs(mlp):
    session = session_for(mlp)
    (first,) = session.run(None, {"x": X})
    kept = first.copy()
    session.run(None, {"x": X * 2})
    np.testing.assert_array_equal(first, kept)


def test_plans_are_cached_per_shape_and_the_oldest_dropped(mlp):
    session = session_for(mlp, max_cached_plans=2)
    for batch in (1, 2, 1, 3):
        session.run(None, {"x": X[:batch]})
    assert session.plan_count() == 2
    (y,) = session.run(None, {"x": X[:1]})  # evicted earlier: made again, same answer
    np.testing.assert_allclose(y, reference_mlp(mlp, X[:1]), rtol=1e-5, atol=1e-6)


def test_a_closed_session_refuses_runs(mlp):
    session = session_for(mlp)
    with session:
        session.run(None, {"x": X})
    with pytest.raises(SessionError, match="closed") as error:
        session.run(None, {"x": X})
    assert error.value.kind is ErrorKind.DISPOSED


def test_all_unsupported_operators_are_reported_together():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("FancyOp", ["x"], ["t"], domain="example.com"),
        helper.make_node("Frobnicate", ["t"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.com", 1)],
    )
    with pytest.raises(SessionError) as error:
        session_for(model)
    assert error.value.kind is ErrorKind.UNSUPPORTED_OPERATOR
    assert error.value.operators == ("example.com.FancyOp (opset 1)", "Frobnicate (opset 17)")
    assert "FancyOp (opset 1), Frobnicate (opset 17)" in str(error.value)


def test_exact_mode_names_every_operator_without_an_exact_kernel():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [  # random by definition: no exact kernel (docs/operators.md)
        helper.make_node("RandomUniformLike", ["x"], ["t"]),
        helper.make_node("RandomNormalLike", ["t"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    with pytest.raises(SessionError, match="RandomNormalLike, RandomUniformLike") as error:
        session_for(model, mode=ExecutionMode.EXACT)
    assert error.value.kind is ErrorKind.EXACT_MODE_UNAVAILABLE
    assert error.value.operators == ("RandomNormalLike", "RandomUniformLike")


def test_exact_mode_runs_the_mlp(mlp):
    (y,) = session_for(mlp, mode=ExecutionMode.EXACT).run(None, {"x": X})
    np.testing.assert_allclose(y, reference_mlp(mlp, X), rtol=1e-5, atol=1e-6)


def test_a_malformed_model_is_invalid():
    with pytest.raises(SessionError) as error:
        Session.load(b"\x08\x07garbage")
    assert error.value.kind is ErrorKind.INVALID_MODEL


def test_an_unavailable_backend_is_unsupported(mlp):
    with pytest.raises(SessionError, match="unknown kernel path") as error:
        session_for(mlp, backend="tpu")
    assert error.value.kind is ErrorKind.UNSUPPORTED


def test_a_plan_beyond_two_gigabytes_is_refused():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    # Without passes: fusing Relu and Neg would leave too little in the slab to exceed 2 GiB.
    session = session_for(
        helper.make_model(helper.make_graph(nodes, "g", [x], [y])),
        optimization_level=OptimizationLevel.NONE,
    )
    big = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (300_000_000,), (0,))
    with pytest.raises(SessionError, match="slab") as error:
        session.run(None, {"x": big})
    assert error.value.kind is ErrorKind.UNSUPPORTED


def test_shape_gather_concat_reshape_chains_become_constants():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 24])
    init = [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    init.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    session = session_for(helper.make_model(helper.make_graph(nodes, "g", [x], [y], init)))
    values = np.arange(3 * 24, dtype=np.float32).reshape(3, 4, 6)
    (out,) = session.run(None, {"x": values})
    np.testing.assert_array_equal(out, values.reshape(3, 24))
    (plan,) = session.plans()
    assert [(s.kind, s.node.info.op_type) for s in plan.steps] == [(StepKind.VIEW, "Reshape")]


def test_eight_threads_times_a_thousand_runs_give_the_bits_of_one(mlp):
    session = session_for(mlp)
    inputs = [
        np.random.default_rng(i).standard_normal((7, 16)).astype(np.float32) for i in range(8)
    ]
    expected = [session.run(None, {"x": x})[0] for x in inputs]
    mismatches = []

    def work(index: int) -> None:
        for _ in range(1000):
            (y,) = session.run(None, {"x": inputs[index]})
            if not np.array_equal(y.view(np.uint32), expected[index].view(np.uint32)):
                mismatches.append(index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert mismatches == []


MODELS = Path(__file__).parent / "models"
ITERATION_BUFFERS = 64 * 1024  # NumPy's ufunc loops may buffer 8192 elements at a time


@pytest.mark.parametrize(
    ("model", "feeds", "largest_intermediate"),
    [
        pytest.param(
            lambda: model_from_proto(mlp_model(features=256, hidden=512, classes=256)),
            {"x": np.random.default_rng(3).standard_normal((256, 256)).astype(np.float32)},
            256 * 512 * 4,
            id="example-mlp",
        ),
        pytest.param(
            lambda: load_model(MODELS / "cnn.onnx"),
            {"image": np.random.default_rng(4).standard_normal((8, 3, 32, 32), np.float32)},
            8 * 16 * 32 * 32 * 4,
            id="exported-cnn",
        ),
    ],
)
def test_a_warm_run_allocates_no_array_data_besides_its_outputs(model, feeds, largest_intermediate):
    session = Session.create(model())
    for _ in range(3):
        session.run(None, feeds)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        outputs = session.run(None, feeds)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    allowed = sum(o.nbytes for o in outputs) + ITERATION_BUFFERS
    assert largest_intermediate > 4 * ITERATION_BUFFERS  # a temporary would show
    assert peak - before < allowed


def test_sequences_are_lists_in_and_out():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    out = helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "g", [seq], [out])
    )
    session = session_for(model)
    values = [np.ones(2, np.float32), np.zeros((1, 3), np.float32)]
    (result,) = session.run(None, {"s": values})
    assert [r.tolist() for r in result] == [v.tolist() for v in values]
    assert all(r is not v for r, v in zip(result, values, strict=True))
    with pytest.raises(SessionError, match="expects a sequence") as error:
        session.run(None, {"s": values[0]})
    assert error.value.kind is ErrorKind.INVALID_INPUT


def test_dynamic_steps_are_shaped_in_every_run_and_outputs_stay_the_callers():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("Neg", ["r"], ["y"]),
    ]
    session = session_for(helper.make_model(helper.make_graph(nodes, "g", [x, shape], [y])))
    values = np.arange(6, dtype=np.float32)
    (first,) = session.run(None, {"x": values, "shape": np.array([2, 3])})
    (second,) = session.run(None, {"x": values + 1, "shape": np.array([3, 2])})
    np.testing.assert_array_equal(first, -values.reshape(2, 3))
    np.testing.assert_array_equal(second, -(values + 1).reshape(3, 2))
    (plan,) = session.plans()
    assert {step.kind for step in plan.steps} == {StepKind.DYNAMIC}
    with pytest.raises(SessionError, match="Reshape") as error:
        session.run(None, {"x": values, "shape": np.array([4, 2])})
    assert error.value.kind is ErrorKind.INVALID_INPUT


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize(
    "holder",
    [
        [helper.make_node("Reshape", ["a", "shape"], ["v"])],
        [
            helper.make_node("Optional", ["a"], ["o"]),
            helper.make_node("OptionalGetElement", ["o"], ["v"]),
        ],
    ],
    ids=["dynamic-view", "optional"],
)  # fmt: skip
def test_a_value_held_past_its_planned_readers_keeps_its_block(holder, checked: bool) -> None:
    """`a` lives in the slab; a view of it made in the run (Reshape by a fed shape) or an
    optional holding it outlives the steps that read `a` itself. Its block must not go to `b`
    (or be poisoned, in checked mode) before `v` is read: c once came out as b + b."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [1])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Add", ["x", "one"], ["a"]),
        *holder,
        helper.make_node("Mul", ["x", "three"], ["b"]),
        helper.make_node("Add", ["v", "b"], ["c"]),
    ]
    constants = [
        numpy_helper.from_array(np.float32(1), "one"),
        numpy_helper.from_array(np.float32(3), "three"),
    ]
    graph = helper.make_graph(nodes, "g", [x, shape], [c], constants)
    session = session_for(
        helper.make_model(graph), optimization_level=OptimizationLevel.NONE, checked=checked
    )
    values = np.arange(4, dtype=np.float32)
    (result,) = session.run(None, {"x": values, "shape": np.array([4])})
    np.testing.assert_array_equal(result, (values + 1) + 3 * values)


def test_scalar_inputs_keep_rank_zero():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    session = session_for(helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y])))  # fmt: skip
    (out,) = session.run(None, {"x": np.float32(2.5)})
    assert out.shape == () and out == -2.5


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        (helper.make_attribute("alpha", [1.0, 2.0]), "attribute 'alpha' holds list"),
        (helper.make_attribute("transA", "yes"), "attribute 'transA' holds str"),
    ],
)
def test_attributes_of_the_wrong_kind_make_the_model_invalid(attribute, message):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    node = helper.make_node("Gemm", ["a", "a"], ["y"], name="gemm")
    node.attribute.append(attribute)
    with pytest.raises(SessionError, match=message) as error:
        session_for(helper.make_model(helper.make_graph([node], "g", [a], [y])))
    assert error.value.kind is ErrorKind.INVALID_MODEL and error.value.node == "gemm"


def test_an_unknown_element_type_makes_the_model_invalid():
    x = helper.make_tensor_value_info("x", 29, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g", [x], [y])
    )
    with pytest.raises(SessionError, match="element type 29") as error:
        session_for(model)
    assert error.value.kind is ErrorKind.INVALID_MODEL and error.value.value == "x"


def test_exact_mode_writes_every_nan_as_0x7fc00000():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    model = helper.make_model(
        helper.make_graph([helper.make_node("Div", ["a", "b"], ["y"])], "g", [a, b], [y])
    )
    numerators = np.array([0.0, -0.0, np.inf, 1.0], np.float32)
    denominators = np.array([0.0, 0.0, -np.inf, 2.0], np.float32)
    feeds = {"a": numerators, "b": denominators}
    (fast,) = session_for(model).run(None, feeds)
    (exact,) = session_for(model, mode=ExecutionMode.EXACT).run(None, feeds)
    assert np.isnan(fast[:3]).all()
    assert exact.view(np.uint32)[:3].tolist() == [0x7FC00000] * 3
    assert exact[3] == fast[3] == 0.5


@pytest.mark.parametrize("extra", ["outputs", "inputs"])
def test_more_inputs_or_outputs_than_the_schema_allows_is_an_invalid_model(extra):
    """Found by tests/fuzzing.py (seed 31): a Relu with two outputs reached planning."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    inputs, outputs = (["x", "x"], ["y"]) if extra == "inputs" else (["x"], ["y", "spare"])
    node = helper.make_node("Relu", inputs, outputs, name="act")
    with pytest.raises(SessionError, match=f"has 2 {extra}") as error:
        session_for(helper.make_model(helper.make_graph([node], "g", [x], [y])))
    assert error.value.kind is ErrorKind.INVALID_MODEL and error.value.node == "act"


def test_sessions_of_one_imported_model_share_its_read_only_weights(mlp):
    model = model_from_proto(mlp)
    first, second = Session.create(model), Session.create(model)
    for value_id, weight in first._graph.weights.items():
        assert not weight.flags.writeable
        assert np.shares_memory(weight, second._graph.weights[value_id])
