"""Graph passes: each fires on a small graph, keeps results (bit for bit when it claims to),
and leaves alone what it must not touch; the light models shrink; the optimised graph saves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from operator_harness import onnxruntime_run

from onemodel import ExecutionMode, OptimizationLevel, Session, SessionOptions
from onemodel.bench_models import light_directory
from onemodel.graph.importer import model_from_proto
from onemodel.graph.passes.table import PASSES, selected
from onemodel.graph.weights import WeightStorage
from onemodel.runner import generated_inputs

F = TensorProto.FLOAT
RNG = np.random.default_rng(5)
MODELS = Path(__file__).parent / "models"


def model_of(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def session(proto, level=OptimizationLevel.ALL, **options):
    return Session.create(
        model_from_proto(proto), SessionOptions(optimization_level=level, **options)
    )


def op_types(sess):
    return [node.info.op_type for node in sess._graph.nodes]


def results(proto, feeds, level):
    return session(proto, level).run(None, feeds)


def assert_same_bits(proto, feeds, level=OptimizationLevel.ALL):
    plain, optimised = results(proto, feeds, OptimizationLevel.NONE), results(proto, feeds, level)
    for a, b in zip(plain, optimised, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def test_the_table_orders_passes_and_exact_mode_skips_those_that_change_bits():
    names = [p.name for p in PASSES]
    assert names[-1] == "fuse-elementwise" and len(set(names)) == len(names)
    assert selected(OptimizationLevel.NONE, exact=False) == []
    basic = selected(OptimizationLevel.BASIC, exact=False)
    assert all(p.min_level <= OptimizationLevel.BASIC for p in basic)
    assert "fuse-elementwise" not in [p.name for p in basic]
    exact = selected(OptimizationLevel.ALL, exact=True)
    assert all(p.preserves_bits for p in exact)
    assert "fold-batch-normalization" not in [p.name for p in exact]


def test_no_ops_are_removed_including_one_that_produces_a_graph_output():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Identity", ["a"], ["b"]),
        helper.make_node("Cast", ["b"], ["c"], to=F),
        helper.make_node("Dropout", ["c"], ["d"]),
        helper.make_node("Identity", ["d"], ["y"]),
    ]
    proto = model_of(nodes, [tensor("x", [3])], [tensor("y", [3])])
    sess = session(proto, OptimizationLevel.BASIC)
    assert op_types(sess) == ["Relu"]
    x = RNG.standard_normal(3).astype(np.float32)
    assert_same_bits(proto, {"x": x}, OptimizationLevel.BASIC)


def test_a_cast_to_another_type_stays():
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)]
    proto = model_of(nodes, [tensor("x", [2])], [tensor("y", [2], TensorProto.DOUBLE)])
    assert op_types(session(proto)) == ["Cast"]


def test_constant_subgraphs_fold_once_with_the_run_bits():
    nodes = [
        helper.make_node("Constant", [], ["k"], value=const("v", np.float32([0.1, 0.2, 0.3]))),
        helper.make_node("Mul", ["k", "w"], ["kw"]),
        helper.make_node("Sqrt", ["kw"], ["s"]),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    proto = model_of(
        nodes, [tensor("x", [3])], [tensor("y", [3])], [const("w", np.float32([3, 5, 7]))]
    )
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Add"]
    assert_same_bits(proto, {"x": RNG.standard_normal(3).astype(np.float32)})


def test_a_generated_weight_folds_up_to_the_session_limit(monkeypatch):
    """A ConstantOfShape weight (the light models' fully connected layers reach 151 MB) folds,
    so runs stop allocating and filling it; one above the limit stays a step."""
    from onemodel.graph.passes import fold_constants

    shape = np.int64([5120, 4096])  # 80 MiB
    nodes = [
        helper.make_node("ConstantOfShape", ["s"], ["w"], value=const("v", np.float32([0.5]))),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    proto = model_of(nodes, [tensor("x", [1, 5120])], [tensor("y", [1, 4096])], [const("s", shape)])
    x = RNG.standard_normal((1, 5120)).astype(np.float32)
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["MatMul"]
    # A MatMul's fast form may differ by a rounding with a weight known at load (a product
    # with the weight prepared once) and without; exact mode's bits may not.
    plain, folded = (
        session(proto, level, mode="exact").run(None, {"x": x})
        for level in (OptimizationLevel.NONE, OptimizationLevel.BASIC)
    )
    assert plain[0].tobytes() == folded[0].tobytes()
    np.testing.assert_allclose(
        results(proto, {"x": x}, OptimizationLevel.BASIC)[0], plain[0], rtol=1e-5, atol=1e-5
    )
    monkeypatch.setattr(fold_constants, "SESSION_FOLD_LIMIT_BYTES", 64 * 1024 * 1024)
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["ConstantOfShape", "MatMul"]


def test_transposes_compose_and_cancel():
    x = tensor("x", [2, 3, 4])
    composing = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["a"], ["y"], perm=[0, 2, 1]),
    ]
    proto = model_of(composing, [x], [tensor("y", [3, 4, 2])])
    sess = session(proto, OptimizationLevel.BASIC)
    assert op_types(sess) == ["Transpose"]
    assert list(sess._graph.nodes[0].info.attributes["perm"]) == [1, 2, 0]
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    assert_same_bits(proto, {"x": data}, OptimizationLevel.BASIC)
    cancelling = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["a"], perm=[2, 0, 1]),
        helper.make_node("Transpose", ["a"], ["y"], perm=[1, 2, 0]),
    ]
    proto = model_of(cancelling, [x], [tensor("y", [2, 3, 4])])
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Relu"]
    assert_same_bits(proto, {"x": data}, OptimizationLevel.BASIC)


def test_reshapes_collapse_unless_a_zero_copies_an_extent():
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["a"]),
        helper.make_node("Reshape", ["a", "s2"], ["y"]),
    ]
    inits = [const("s1", np.int64([6, 4])), const("s2", np.int64([4, -1]))]
    proto = model_of(nodes, [tensor("x", [2, 3, 4])], [tensor("y", [4, 6])], inits)
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Reshape"]
    assert_same_bits(proto, {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)})
    inits = [const("s1", np.int64([6, 4])), const("s2", np.int64([0, 2, 2]))]
    proto = model_of(nodes, [tensor("x", [2, 3, 4])], [tensor("y", [6, 2, 2])], inits)
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Reshape", "Reshape"]


def conv_model(tail, initializers, out_shape=(1, 4, 5, 5)):
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), *tail]
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    return model_of(
        nodes, [tensor("x", [1, 3, 5, 5])], [tensor("y", list(out_shape))],
        [const("w", w), *initializers],
    )  # fmt: skip


@pytest.mark.parametrize("shape", [(4, 1, 1), (1, 4, 1, 1)])
def test_a_per_channel_add_becomes_the_conv_bias_with_the_same_bits(shape):
    bias = RNG.standard_normal(shape).astype(np.float32)
    proto = conv_model([helper.make_node("Add", ["c", "b"], ["y"])], [const("b", bias)])
    sess = session(proto, OptimizationLevel.BASIC)
    assert op_types(sess) == ["Conv"] and len(sess._graph.nodes[0].inputs) == 3
    assert_same_bits(proto, {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)})


def test_an_add_over_the_last_axis_is_not_a_conv_bias():
    bias = RNG.standard_normal(5).astype(np.float32)  # [O]-like, but broadcasts over width
    proto = conv_model([helper.make_node("Add", ["c", "b"], ["y"])], [const("b", bias)])
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Conv", "Add"]


def batch_norm_inputs():
    return [
        const("scale", RNG.uniform(0.5, 2, 4).astype(np.float32)),
        const("beta", RNG.standard_normal(4).astype(np.float32)),
        const("mean", RNG.standard_normal(4).astype(np.float32)),
        const("var", RNG.uniform(0.5, 2, 4).astype(np.float32)),
    ]


def test_batch_normalization_folds_into_a_conv_within_rounding():
    norm = helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"])
    proto = conv_model([norm], batch_norm_inputs())
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Conv"]
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    plain = results(proto, {"x": x}, OptimizationLevel.NONE)[0]
    folded = results(proto, {"x": x}, OptimizationLevel.BASIC)[0]
    np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group, with_bias", [(1, False), (1, True), (2, True)])
def test_batch_normalization_folds_into_a_conv_transpose_within_rounding(group, with_bias):
    inputs = ["x", "w", "b"] if with_bias else ["x", "w"]
    nodes = [
        helper.make_node("ConvTranspose", inputs, ["c"], strides=[2, 2], group=group),
        helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"]),
    ]
    w = RNG.standard_normal((6, 4 // group, 2, 2)).astype(np.float32)
    inits = [const("w", w), const("b", RNG.standard_normal(4).astype(np.float32))]
    proto = model_of(
        nodes, [tensor("x", [1, 6, 5, 5])], [tensor("y", [1, 4, 10, 10])],
        inits[: len(inputs) - 1] + batch_norm_inputs(),
    )  # fmt: skip
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["ConvTranspose"]
    x = RNG.standard_normal((1, 6, 5, 5)).astype(np.float32)
    plain = results(proto, {"x": x}, OptimizationLevel.NONE)[0]
    folded = results(proto, {"x": x}, OptimizationLevel.BASIC)[0]
    np.testing.assert_allclose(folded, plain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(folded, onnxruntime_run(proto, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batch_normalization_folds_into_a_gemm(trans_b):
    b = RNG.standard_normal((4, 6) if trans_b else (6, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["x", "b", "c"], ["g"], transB=trans_b, alpha=0.5, beta=2.0),
        helper.make_node("BatchNormalization", ["g", "scale", "beta", "mean", "var"], ["y"]),
    ]
    inits = [const("b", b), const("c", RNG.standard_normal(4).astype(np.float32))]
    proto = model_of(
        nodes, [tensor("x", [3, 6])], [tensor("y", [3, 4])], inits + batch_norm_inputs()
    )
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Gemm"]
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    plain = results(proto, {"x": x}, OptimizationLevel.NONE)[0]
    np.testing.assert_allclose(
        results(proto, {"x": x}, OptimizationLevel.BASIC)[0], plain, rtol=1e-5, atol=1e-5
    )


def test_a_transposed_gemm_weight_is_laid_out_once_unless_shared():
    b = RNG.standard_normal((5, 6)).astype(np.float32)
    c = RNG.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "b", "c"], ["y"], transB=1, alpha=0.5)]
    proto = model_of(
        nodes, [tensor("x", [3, 6])], [tensor("y", [3, 5])], [const("b", b), const("c", c)]
    )
    sess = session(proto, OptimizationLevel.BASIC)
    (gemm,) = sess._graph.nodes
    assert gemm.info.attributes["transB"] == 0
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(
        sess.run(None, {"x": x})[0], onnxruntime_run(proto, {"x": x})[0], rtol=1e-5, atol=1e-5
    )
    exact = session(proto, OptimizationLevel.BASIC, mode=ExecutionMode.EXACT)
    assert exact._graph.nodes[0].info.attributes["transB"] == 1
    shared = [*nodes, helper.make_node("Gemm", ["x", "b"], ["z"], transB=1)]
    proto = model_of(
        shared,
        [tensor("x", [3, 6])],
        [tensor("y", [3, 5]), tensor("z", [3, 5])],
        [const("b", b), const("c", c)],
    )
    assert [
        n.info.attributes["transB"] for n in session(proto, OptimizationLevel.BASIC)._graph.nodes
    ] == [1, 1]


def test_matmul_add_and_activation_fuse_into_one_step_with_the_same_bits():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="proj"),
        helper.make_node("Add", ["m", "b"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "half"], ["y"]),
    ]
    inits = [
        const("w", RNG.standard_normal((2, 6, 5)).astype(np.float32)),
        const("b", RNG.standard_normal(5).astype(np.float32)),
        const("half", np.float32(0.5)),
    ]
    proto = model_of(nodes, [tensor("x", [2, 3, 6])], [tensor("y", [2, 3, 5])], inits)
    sess = session(proto)
    assert op_types(sess) == ["fused(MatMul+Add+Relu+Mul)"]
    assert sess._graph.nodes[0].info.name == "proj"  # errors still name a node of the model
    assert_same_bits(proto, {"x": RNG.standard_normal((2, 3, 6)).astype(np.float32)})


def test_a_chain_stops_at_a_value_read_twice_and_handles_broadcasts_that_grow():
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Add", ["e", "row"], ["grown"]),  # [3, 1] + [1, 4] -> [3, 4]
        helper.make_node("Tanh", ["grown"], ["t"]),
        helper.make_node("Sub", ["t", "e"], ["y"]),  # e has a second reader: the chain stops
    ]
    inits = [const("row", RNG.standard_normal((1, 4)).astype(np.float32))]
    proto = model_of(nodes, [tensor("x", [3, 1])], [tensor("y", [3, 4])], inits)
    assert op_types(session(proto)) == ["Exp", "fused(Add+Tanh+Sub)"]
    assert_same_bits(proto, {"x": RNG.standard_normal((3, 1)).astype(np.float32)})


def test_fusion_follows_plans_of_other_shapes_and_runs_in_exact_mode():
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Abs", ["n"], ["y"])]
    proto = model_of(nodes, [tensor("x", ["n"])], [tensor("y", ["n"])])
    sess = session(proto, mode=ExecutionMode.EXACT)
    assert op_types(sess) == ["fused(Neg+Abs)"]
    for size in (3, 7, 3):
        x = RNG.standard_normal(size).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.abs(x))


LIGHT = sorted(light_directory().glob("light_*.onnx"))


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_the_light_models_lose_nodes(path):
    plain = Session.load(str(path), SessionOptions(optimization_level=OptimizationLevel.NONE))
    optimised = Session.load(str(path))
    before, after = len(plain._graph.nodes), len(optimised._graph.nodes)
    summary = optimised.graph_summary
    assert summary["nodes"] == after and summary["nodes_before_passes"] == before
    assert after < before / 2, (before, after)


@pytest.mark.parametrize("name", ["light_squeezenet.onnx", "light_shufflenet.onnx"])
def test_light_models_give_the_same_results_optimised(name):
    path = str(light_directory() / name)
    plain = Session.load(path, SessionOptions(optimization_level=OptimizationLevel.NONE))
    feeds = generated_inputs(plain.inputs)
    optimised = Session.load(path)
    np.testing.assert_allclose(
        optimised.run(None, feeds)[0], plain.run(None, feeds)[0], rtol=1e-4, atol=1e-6
    )


@pytest.mark.parametrize("level", [OptimizationLevel.NONE, OptimizationLevel.BASIC])
def test_the_optimised_graph_saves_as_onnx_that_onnxruntime_runs_the_same(tmp_path, level):
    norm = helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"])
    proto = conv_model([norm, helper.make_node("Identity", ["n"], ["y"])], batch_norm_inputs())
    path = tmp_path / "optimised.onnx"
    sess = session(proto, level, optimized_model_path=str(path))
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved)
    assert len(saved.graph.node) == len(sess._graph.nodes)
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    theirs = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(
        theirs.run(None, {"x": x})[0], sess.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5
    )


def test_fused_steps_save_as_internal_nodes_with_their_members_as_body(tmp_path):
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Abs", ["n"], ["y"])]
    proto = model_of(nodes, [tensor("x", [2])], [tensor("y", [2])])
    path = tmp_path / "fused.onnx"
    session(proto, optimized_model_path=str(path))
    (node,) = onnx.load(str(path)).graph.node
    assert (node.op_type, node.domain) == ("Fused", "onemodel.internal")
    body = helper.get_attribute_value(node.attribute[0])
    assert [n.op_type for n in body.node] == ["Neg", "Abs"]


@pytest.mark.parametrize(
    ("storage", "rtol"), [(WeightStorage.BINARY16, 2e-3), (WeightStorage.BFLOAT16, 2e-2)]
)
def test_reduced_weight_storage_halves_weight_memory_and_stays_close(storage, rtol):
    data = np.load(MODELS / "cnn.inputs.npz")
    feeds = {k: data[k] for k in data.files if not k.startswith("output:")}
    original = Session.load(str(MODELS / "cnn.onnx"))
    reduced = Session.load(str(MODELS / "cnn.onnx"), SessionOptions(weight_storage=storage))
    before, after = original.graph_summary, reduced.graph_summary
    assert after["weight_storage"] == storage.value
    assert after["weight_bytes"] < 0.55 * before["weight_bytes"]
    assert op_types(reduced).count("Widen") > 0
    got, want = reduced.run(None, feeds)[0], original.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    assert not np.array_equal(got, want)  # the weights really were rounded


def test_reduced_weights_widen_to_the_rounded_values_with_the_same_bits_on_both_numpy_paths():
    """Exact mode accepts reduced weights: the Widen conversion is exact and written out."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    w = (RNG.integers(-8, 8, (64, 32)) + RNG.uniform(0, 1, (64, 32))).astype(np.float32)
    x = RNG.integers(-4, 4, (2, 64)).astype(np.float32)
    proto = model_of(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [tensor("x", [2, 64])], [tensor("y", [2, 32])], [const("w", w)],
    )  # fmt: skip
    outputs = [
        session(
            proto, weight_storage=WeightStorage.BFLOAT16, backend=backend,
            mode=ExecutionMode.EXACT,
        ).run(None, {"x": x})[0]
        for backend in ("numpy-reference", "numpy")
    ]  # fmt: skip
    assert outputs[0].tobytes() == outputs[1].tobytes()
    # bfloat16 values times small integers sum exactly in float64: one rounding at the end.
    rounded = w.astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(outputs[0], (x.astype(np.float64) @ rounded).astype(np.float32))


def test_weight_storage_measured_by_tracemalloc():
    """The weights a session holds, counted by NumPy's own allocation tracing."""
    import tracemalloc

    proto = onnx.load(str(MODELS / "cnn.onnx"))
    held = {}
    for storage in (WeightStorage.ORIGINAL, WeightStorage.BINARY16):
        tracemalloc.start()
        sess = Session.create(model_from_proto(proto), SessionOptions(weight_storage=storage))
        held[storage], _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del sess
    saved = held[WeightStorage.ORIGINAL] - held[WeightStorage.BINARY16]
    assert saved > 0.4 * Session.create(model_from_proto(proto)).graph_summary["weight_bytes"]


def test_per_channel_mul_and_add_after_a_conv_fold_into_its_weights():
    norm = helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"])
    tail = [
        norm,
        helper.make_node("Mul", ["n", "m"], ["scaled"]),
        helper.make_node("Add", ["a", "scaled"], ["shifted"]),
        helper.make_node("Relu", ["shifted"], ["y"]),
    ]
    per_channel = [const(n, RNG.uniform(0.5, 2, (4, 1, 1)).astype(np.float32)) for n in "ma"]
    proto = conv_model(tail, [*batch_norm_inputs(), *per_channel])
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Conv", "Relu"]
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    plain = results(proto, {"x": x}, OptimizationLevel.NONE)[0]
    np.testing.assert_allclose(
        results(proto, {"x": x}, OptimizationLevel.ALL)[0], plain, rtol=1e-5, atol=1e-5
    )
    exact = session(proto, mode=ExecutionMode.EXACT)
    assert "fold-conv-affine" not in exact.graph_summary["passes"]
    assert "Mul" in "".join(op_types(exact))


def test_a_mul_over_the_last_axis_is_not_folded_into_a_conv():
    proto = conv_model(
        [helper.make_node("Mul", ["c", "m"], ["y"])],
        [const("m", RNG.standard_normal(5).astype(np.float32))],
    )
    assert op_types(session(proto, OptimizationLevel.BASIC)) == ["Conv", "Mul"]


@pytest.mark.parametrize("declared", [[1, 4, 3, 3], None])
def test_per_channel_mul_and_add_fold_into_a_batch_normalization_of_known_rank(declared):
    nodes = [
        helper.make_node("BatchNormalization", ["x", "scale", "beta", "mean", "var"], ["n"]),
        helper.make_node("Mul", ["n", "m"], ["scaled"]),
        helper.make_node("Add", ["scaled", "a"], ["shifted"]),
        helper.make_node("Relu", ["shifted"], ["y"]),
    ]
    per_channel = [const(n, RNG.uniform(0.5, 2, (4, 1, 1)).astype(np.float32)) for n in "ma"]
    x = helper.make_tensor_value_info("x", F, declared)  # None: the rank is not known
    proto = model_of(nodes, [x], [tensor("y", None)], [*batch_norm_inputs(), *per_channel])
    folded = ["BatchNormalization", "Relu"]
    kept = ["BatchNormalization", "Mul", "Add", "Relu"]
    assert op_types(session(proto, OptimizationLevel.BASIC)) == (folded if declared else kept)
    assert op_types(session(proto))[0].startswith("fused(BatchNormalization+")
    data = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32)
    plain = results(proto, {"x": data}, OptimizationLevel.NONE)[0]
    np.testing.assert_allclose(
        results(proto, {"x": data}, OptimizationLevel.ALL)[0], plain, rtol=1e-5, atol=1e-5
    )


def pad_conv_model(pads, value=None, mode="constant", group=1, opset=17, extra_reader=False):
    """Pad (pads as a constant input, or the opset-2 attribute) then a Conv 3×3/2."""
    channels = 4
    pad_inputs = ["x", "pads"] + ([] if value is None else ["value"])
    initializers = [const("pads", np.array(pads, np.int64))]
    if value is not None:
        initializers.append(const("value", np.array(value, np.float32)))
    attrs = {"mode": mode}
    if opset < 11:
        pad_inputs, initializers, attrs = ["x"], [], {"mode": mode, "pads": pads}
    w = RNG.standard_normal((8, channels // group, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Pad", pad_inputs, ["p"], **attrs),
        helper.make_node("Conv", ["p", "w"], ["y"], strides=[2, 2], pads=[0, 1, 0, 0], group=group),
    ]
    outputs = [tensor("y", None)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["p"], ["r"]))
        outputs.append(tensor("r", None))
    return model_of(
        nodes, [tensor("x", [1, channels, 9, 10])], outputs, [const("w", w), *initializers],
        opset=opset,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("pads", "value", "group", "opset"),
    [
        ([0, 0, 0, 1, 0, 0, 1, 1], None, 1, 17),  # TF SAME at stride 2: the end pads
        ([0, 0, 1, 1, 0, 0, 1, 2], 0.0, 4, 17),  # depthwise, an explicit zero
        ([0, 0, 2, 0, 0, 0, 0, 3], None, 2, 9),  # the pads attribute
    ],
)
def test_a_zero_pad_of_the_planes_becomes_the_conv_pads(pads, value, group, opset):
    proto = pad_conv_model(pads, value, group=group, opset=opset)
    sess = session(proto, OptimizationLevel.BASIC)
    assert op_types(sess) == ["Conv"]
    (conv,) = sess._graph.nodes
    own = [0, 1, 0, 0]
    assert list(conv.info.attributes["pads"]) == [
        a + b for a, b in zip(own, pads[2:4] + pads[6:8], strict=True)
    ]
    x = RNG.standard_normal((1, 4, 9, 10)).astype(np.float32)
    (mine,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(mine, onnxruntime_run(proto, {"x": x})[0], rtol=1e-5, atol=1e-5)
    exact = session(proto, mode=ExecutionMode.EXACT)
    assert "Pad" in op_types(exact)  # exact mode keeps the Pad


@pytest.mark.parametrize(
    ("pads", "value", "mode", "extra_reader"),
    [
        ([0, 0, 0, 1, 0, 0, 1, 1], 1.5, "constant", False),  # not zeros
        ([0, 0, 1, 1, 0, 0, 1, 1], None, "reflect", False),
        ([0, 1, 0, 0, 0, 0, 0, 0], None, "constant", False),  # pads a channel
        ([0, 0, -1, 0, 0, 0, 0, 0], None, "constant", False),  # crops
        ([0, 0, 1, 1, 0, 0, 1, 1], None, "constant", True),  # read by another node too
    ],
)
def test_other_pads_stay_before_the_conv(pads, value, mode, extra_reader):
    proto = pad_conv_model(pads, value, mode=mode, extra_reader=extra_reader)
    assert "Pad" in op_types(session(proto, OptimizationLevel.BASIC))
