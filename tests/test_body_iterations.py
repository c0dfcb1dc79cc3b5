"""Loop and Scan iterations through a held body run state: every iteration's outputs are its
own (the iteration counter is one array rewritten per iteration, and values in the body's slab
are overwritten by the next iteration), and what a run returns outlives later runs, in plain,
guarded, profiled, checked, exact and device runs alike."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel import ExecutionMode, Session, SessionOptions
from onemodel.graph.importer import model_from_proto

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(node: onnx.NodeProto, inputs: list, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def counting_loop() -> onnx.ModelProto:
    """Loop(n) carrying s (s + 1, and the last iteration number), scanning the iteration
    number (through an Identity, and the body input itself), the condition, 2 * s through a
    Reshape of a value in the body's slab, and 3 * s (a step's output, which the body writes
    straight into the stacked result: the condition passes through, so n iterations run)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["s_in", "one"], ["s_out"]),
            helper.make_node("Identity", ["i"], ["last"]),
            helper.make_node("Identity", ["i"], ["i_copy"]),
            helper.make_node("Mul", ["s_out", "two"], ["doubled"]),  # in the slab
            helper.make_node("Reshape", ["doubled", "flat"], ["doubled_flat"]),  # its view
            helper.make_node("Mul", ["s_out", "three"], ["tripled"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", BOOL, []),
            helper.make_tensor_value_info("s_in", F, [1, 2]),
            helper.make_tensor_value_info("last_in", I64, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", BOOL, []),
            helper.make_tensor_value_info("s_out", F, [1, 2]),
            helper.make_tensor_value_info("last", I64, []),
            helper.make_tensor_value_info("i_copy", I64, []),
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", BOOL, []),
            helper.make_tensor_value_info("doubled_flat", F, [2]),
            helper.make_tensor_value_info("tripled", F, [1, 2]),
        ],
        [
            helper.make_tensor("one", F, [], [1.0]),
            helper.make_tensor("two", F, [], [2.0]),
            helper.make_tensor("three", F, [], [3.0]),
            helper.make_tensor("flat", I64, [1], [2]),
        ],
    )
    node = helper.make_node(
        "Loop", ["n", "", "s0", "last0"],
        ["s", "last", "counts", "inputs", "conds", "twice", "thrice"], name="count", body=body,
    )  # fmt: skip
    return _model(
        node,
        [helper.make_tensor_value_info("n", I64, []),
         helper.make_tensor_value_info("s0", F, [1, 2]),
         helper.make_tensor_value_info("last0", I64, [])],
        [helper.make_tensor_value_info(name, elem, None) for name, elem in
         (("s", F), ("last", I64), ("counts", I64), ("inputs", I64), ("conds", BOOL),
          ("twice", F), ("thrice", F))],
    )  # fmt: skip


def _loop_feeds(trips: int, start: float) -> dict[str, np.ndarray]:
    return {
        "n": np.array(trips, np.int64),
        "s0": np.full((1, 2), start, np.float32),
        "last0": np.array(-1, np.int64),
    }


def _expected_loop(trips: int, start: float) -> list[np.ndarray]:
    s = start + np.arange(1, trips + 1, dtype=np.float32)
    counts = np.arange(trips, dtype=np.int64)
    return [
        np.full((1, 2), start + trips, np.float32),
        np.array(trips - 1, np.int64),
        counts,
        counts,
        np.ones(trips, bool),
        np.repeat(2 * s[:, None], 2, axis=1),
        np.repeat(3 * s[:, None, None], 2, axis=2),
    ]


RUNS = {  # how the node's run goes: plainly, guarded, observed, checked, exact, on a device
    "plain": (SessionOptions(optimization_level=0), {}),
    "optimised": (SessionOptions(), {}),
    "guarded": (SessionOptions(optimization_level=0), {"timeout": 60.0}),
    "profiled": (SessionOptions(optimization_level=0), {"profile": {}, "trace": []}),
    "checked": (SessionOptions(optimization_level=0, checked=True), {}),
    "exact": (SessionOptions(optimization_level=0, mode=ExecutionMode.EXACT), {}),
    "device": (  # CuPy's rules: what the loops do to arrays exists on a GPU too
        SessionOptions(optimization_level=0, backend="checked-device", outputs_as="numpy"),
        {},
    ),
}


@pytest.mark.parametrize("how", RUNS)
def test_each_loop_iteration_s_outputs_are_its_own_and_outlive_later_runs(how):
    options, keywords = RUNS[how]
    s = Session.create(model_from_proto(counting_loop()), options)
    kept = s.run(None, _loop_feeds(5, 0.0), **keywords)
    for got, expected in zip(kept, _expected_loop(5, 0.0), strict=True):
        np.testing.assert_array_equal(got, expected)
    for trips, start in ((5, 10.0), (3, -4.0), (1, 7.0), (0, 1.0)):  # warm state, new values
        later = s.run(None, _loop_feeds(trips, start), **keywords)
        for got, expected in zip(later, _expected_loop(trips, start), strict=True):
            np.testing.assert_array_equal(got.reshape(expected.shape), expected)
    for got, expected in zip(kept, _expected_loop(5, 0.0), strict=True):
        np.testing.assert_array_equal(got, expected)  # the first run's results untouched
    if how == "profiled":  # rows for the body's nodes, one per iteration of every run
        assert len(keywords["profile"]["Loop/Add"]) == 5 + 5 + 3 + 1
        assert [r[0] for r in keywords["trace"]].count("count/Mul_4") == 14


def test_a_loop_stopped_by_its_condition_returns_the_values_of_its_last_iteration():
    """Loop(cond) with no trip count: s doubles while s < 40; the condition is a new value
    each iteration, read before the next one starts."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "two"], ["s_out"]),
         helper.make_node("Less", ["s_out", "forty"], ["go"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", BOOL, []),
         helper.make_tensor_value_info("s_in", F, [])],
        [helper.make_tensor_value_info("go", BOOL, []),
         helper.make_tensor_value_info("s_out", F, []),
         helper.make_tensor_value_info("s_out", F, [])],
        [helper.make_tensor("two", F, [], [2.0]), helper.make_tensor("forty", F, [], [40.0])],
    )  # fmt: skip
    node = helper.make_node("Loop", ["", "go0", "s0"], ["s", "all"], body=body)
    model = _model(
        node,
        [helper.make_tensor_value_info("go0", BOOL, []),
         helper.make_tensor_value_info("s0", F, [])],
        [helper.make_tensor_value_info("s", F, []), helper.make_tensor_value_info("all", F, None)],
    )  # fmt: skip
    s = Session.create(model_from_proto(model), SessionOptions(optimization_level=0))
    for _ in range(2):  # warm: the held state again
        last, every = s.run(None, {"go0": np.array(True), "s0": np.array(3.0, np.float32)})
        np.testing.assert_array_equal(last, 48.0)
        np.testing.assert_array_equal(every, [6.0, 12.0, 24.0, 48.0])
    last, every = s.run(None, {"go0": np.array(False), "s0": np.array(3.0, np.float32)})
    np.testing.assert_array_equal(last, 3.0)
    assert every.shape[0] == 0


def scan_model() -> onnx.ModelProto:
    """Scan over a (forward, axis 0) and b (backward, axis 1): the state s + a_t * b_t, scanned
    out forward as s itself and backward along axis 1 as b_t (an Identity of the slice), and
    a_t * b_t backward and -(a_t * b_t) forward along axis 0 (steps' outputs, which the body
    writes straight into the stacked results)."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["a_t", "b_t"], ["product"]),
         helper.make_node("Add", ["s_in", "product"], ["s_out"]),
         helper.make_node("Identity", ["b_t"], ["b_seen"]),
         helper.make_node("Neg", ["product"], ["negated"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [2]),
         helper.make_tensor_value_info("a_t", F, [2]),
         helper.make_tensor_value_info("b_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]),
         helper.make_tensor_value_info("s_out", F, [2]),
         helper.make_tensor_value_info("b_seen", F, [2]),
         helper.make_tensor_value_info("product", F, [2]),
         helper.make_tensor_value_info("negated", F, [2])],
    )  # fmt: skip
    outputs = ("s", "states", "bs", "products", "negated")
    node = helper.make_node(
        "Scan", ["s0", "a", "b"], list(outputs), body=body, num_scan_inputs=2,
        scan_input_axes=[0, 1], scan_input_directions=[0, 1],
        scan_output_axes=[0, 1, 0, -2], scan_output_directions=[0, 1, 1, 0],
    )  # fmt: skip
    return _model(
        node,
        [helper.make_tensor_value_info("s0", F, [2]),
         helper.make_tensor_value_info("a", F, ["t", 2]),
         helper.make_tensor_value_info("b", F, [2, "t"])],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
    )  # fmt: skip


def _expected_scan(s0: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    state, states, seen, products = s0, [], [], []
    for t in range(a.shape[0]):
        b_t = b[:, a.shape[0] - 1 - t]
        products.append(a[t] * b_t)
        state = state + products[-1]
        states.append(state)
        seen.append(b_t)
    products_stacked = np.stack(products)
    return [
        state,
        np.stack(states),
        np.stack(seen[::-1], axis=1),
        products_stacked[::-1],
        -products_stacked,
    ]


@pytest.mark.parametrize("how", RUNS)
def test_each_scan_iteration_s_outputs_are_its_own_and_outlive_later_runs(how):
    options, keywords = RUNS[how]
    s = Session.create(model_from_proto(scan_model()), options)
    rng = np.random.default_rng(5)
    first = [rng.standard_normal(shape).astype(np.float32) for shape in ((2,), (4, 2), (2, 4))]
    kept = s.run(None, dict(zip(("s0", "a", "b"), first, strict=True)), **keywords)
    for steps in (4, 4, 1, 3):
        feeds = [rng.standard_normal(shape).astype(np.float32)
                 for shape in ((2,), (steps, 2), (2, steps))]  # fmt: skip
        got = s.run(None, dict(zip(("s0", "a", "b"), feeds, strict=True)), **keywords)
        for mine, expected in zip(got, _expected_scan(*feeds), strict=True):
            np.testing.assert_allclose(mine, expected, rtol=1e-6)
    for mine, expected in zip(kept, _expected_scan(*first), strict=True):
        np.testing.assert_allclose(mine, expected, rtol=1e-6)
    if how == "profiled":  # rows for the body's nodes, one per iteration of every run
        assert len(keywords["profile"]["Scan/Neg"]) == 4 + 4 + 4 + 1 + 3
        assert [r[0] for r in keywords["trace"]].count("Scan_0/Neg_3") == 16


def test_a_loop_s_and_a_scan_s_results_go_to_the_caller_without_another_copy():
    """Loop and Scan own what they return (new or copied arrays), so their graph outputs are
    handed out as they are; the sequence case: a carried sequence returned after no
    iteration is a new list of new arrays, not the caller's."""
    for model in (counting_loop(), scan_model()):
        s = Session.create(model_from_proto(model), SessionOptions(optimization_level=0))
        feeds = (
            _loop_feeds(3, 0.0)
            if model.graph.node[0].op_type == "Loop"
            else {"s0": np.ones(2, np.float32), "a": np.ones((3, 2), np.float32),
                  "b": np.ones((2, 3), np.float32)}
        )  # fmt: skip
        s.run(None, feeds)
        (plan,) = s.plans()
        assert set(plan.output_ids) <= plan.fresh_outputs
    body = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["c_out"]),
         helper.make_node("Identity", ["seq_in"], ["seq_out"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("c", BOOL, []),
         helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [helper.make_tensor_value_info("c_out", BOOL, []),
         helper.make_tensor_sequence_value_info("seq_out", F, None)],
    )  # fmt: skip
    node = helper.make_node("Loop", ["n", "", "seq0"], ["seq"], body=body)
    model = _model(
        node,
        [helper.make_tensor_value_info("n", I64, []),
         helper.make_tensor_sequence_value_info("seq0", F, None)],
        [helper.make_tensor_sequence_value_info("seq", F, None)],
    )  # fmt: skip
    s = Session.create(model_from_proto(model), SessionOptions(optimization_level=0))
    given = [np.arange(3, dtype=np.float32), np.ones(2, np.float32)]
    for trips in (0, 2):
        (seq,) = s.run(None, {"n": np.array(trips, np.int64), "seq0": given})
        assert len(seq) == 2
        for got, element in zip(seq, given, strict=True):
            np.testing.assert_array_equal(got, element)
            assert not np.shares_memory(got, element)


def test_a_loop_of_no_iterations_stacks_rows_of_the_shape_its_body_plans() -> None:
    """tf2onnx's while loops write untyped body outputs. With no iteration the stacked result
    was [0], which no Concat with the rows before it accepts; onnxruntime's shape inference
    makes it [0, 4], and so does the body's plan for the first iteration's inputs."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("ReduceMax", ["x"], ["row"], axes=[0], keepdims=0)],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", BOOL, [])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("row", F, None)],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", ""], ["rows"], body=body),
         helper.make_node("Concat", ["x", "rows"], ["joined"], axis=0)],
        "loop_rows",
        [helper.make_tensor_value_info("x", F, [3, 4]),
         helper.make_tensor_value_info("n", I64, [])],
        [helper.make_tensor_value_info("rows", F, None),
         helper.make_tensor_value_info("joined", F, None)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for mode in (ExecutionMode.FAST, ExecutionMode.EXACT):
        session = Session.load(model.SerializeToString(), SessionOptions(mode=mode))
        rows, joined = session.run(None, {"x": x, "n": np.array(0, np.int64)})
        assert rows.shape == (0, 4) and rows.dtype == np.float32
        np.testing.assert_array_equal(joined, x)
        rows, joined = session.run(None, {"x": x, "n": np.array(2, np.int64)})
        np.testing.assert_array_equal(rows, np.stack([x.max(axis=0)] * 2))
