"""Subgraphs in plans: an If whose condition the plan knows is replaced by its branch, bodies
run through cached plans and pooled run states, and profiles and traces name body nodes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onemodel import Session, SessionOptions
from onemodel.graph.importer import model_from_proto
from onemodel.graph.plan import StepKind

F = TensorProto.FLOAT


def _branch(name: str, op_type: str) -> onnx.GraphProto:
    """y = op(x, x) + w, reading the outer x; w is the branch's own initializer."""
    nodes = [
        helper.make_node(op_type, ["x", "x"], [f"{name}_t"], name=f"{name}_op"),
        helper.make_node("Add", [f"{name}_t", f"{name}_w"], [f"{name}_y"], name=f"{name}_add"),
    ]
    weight = helper.make_tensor(f"{name}_w", F, [1], [0.5])
    out = helper.make_tensor_value_info(f"{name}_y", F, None)
    return helper.make_graph(nodes, name, [], [out], [weight])


def if_model(condition: str) -> onnx.ModelProto:
    """An If over `condition`: "input" (a bool input), or "shape" (x's first extent is 2,
    known when the plan is made)."""
    nodes, inputs = [], [helper.make_tensor_value_info("x", F, ["n", 3])]
    if condition == "input":
        inputs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        nodes += [
            helper.make_node("Shape", ["x"], ["shape"], start=0, end=1),
            helper.make_node("Equal", ["shape", "two"], ["c"]),
        ]
    then, other = _branch("then", "Mul"), _branch("else", "Sub")
    nodes.append(
        helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then, else_branch=other)
    )
    two = helper.make_tensor("two", TensorProto.INT64, [1], [2])
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)], [two]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def session(model: onnx.ModelProto) -> Session:
    return Session.create(model_from_proto(model), SessionOptions(optimization_level=0))


X2 = np.arange(6, dtype=np.float32).reshape(2, 3)
X3 = np.arange(9, dtype=np.float32).reshape(3, 3)


def test_an_if_the_plan_can_decide_is_replaced_by_its_branch():
    s = session(if_model("shape"))
    (y2,) = s.run(None, {"x": X2})
    (y3,) = s.run(None, {"x": X3})
    np.testing.assert_array_equal(y2, X2 * X2 + 0.5)  # first extent 2: then
    np.testing.assert_array_equal(y3, X3 - X3 + 0.5)  # otherwise: else
    first, second = s.plans()
    assert [(st.node.info.op_type, st.name) for st in first.steps] == [
        ("Mul", "choose/then_op"),
        ("Add", "choose/then_add"),
    ]
    assert [st.node.info.op_type for st in second.steps] == ["Sub", "Add"]
    assert all(st.kind is StepKind.STATIC for st in (*first.steps, *second.steps))


def test_an_if_on_a_run_time_condition_stays_a_step_and_takes_either_branch():
    s = session(if_model("input"))
    for _ in range(3):  # warm: the branches' plans and run states are reused
        (then,) = s.run(None, {"x": X2, "c": np.array(True)})
        (other,) = s.run(None, {"x": X2, "c": np.array(False)})
    np.testing.assert_array_equal(then, X2 * X2 + 0.5)
    np.testing.assert_array_equal(other, np.full_like(X2, 0.5))
    (plan,) = s.plans()
    assert [(st.kind, st.node.info.op_type) for st in plan.steps] == [(StepKind.DYNAMIC, "If")]
    operator = plan.steps[0].node.operator
    assert operator.then_branch.plan_count() == operator.else_branch.plan_count() == 1


@pytest.mark.parametrize("condition", ["input", "shape"])
def test_profiles_and_traces_name_the_nodes_inside_an_if(condition):
    s = session(if_model(condition))
    feeds = {"x": X2} | ({"c": np.array(True)} if condition == "input" else {})
    profile: dict[str, list[float]] = {}
    trace: list[tuple] = []
    s.run(None, feeds, profile=profile, trace=trace)
    names = [record[0] for record in trace]
    assert "choose/then_op" in names and "choose/then_add" in names
    assert {"If/Mul", "If/Add"} <= set(profile)
    assert all(seconds >= 0 for times in profile.values() for seconds in times)
    if condition == "input":  # the If itself is a row too, timed around its branch
        assert "If" in profile and names[-1] == "choose"


def _loop_model() -> onnx.ModelProto:
    """Three iterations of s = s * 2 + x (x read from the outer graph)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
            helper.make_node("Mul", ["s_in", "two"], ["doubled"], name="double"),
            helper.make_node("Add", ["doubled", "x"], ["s_out"], name="add_x"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_in", F, None),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("s_out", F, None),
        ],
        [helper.make_tensor("two", F, [], [2.0])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "s0"], ["s"], name="repeat", body=body)],
        "g",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("s0", F, [3]),
            helper.make_tensor_value_info("x", F, [3]),
        ],
        [helper.make_tensor_value_info("s", F, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_loop_bodies_reuse_one_plan_and_profile_their_nodes_per_iteration():
    s = session(_loop_model())
    s0, x = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    feeds = {"n": np.array(3, np.int64), "s0": s0, "x": x}
    profile: dict[str, list[float]] = {}
    trace: list[tuple] = []
    (result,) = s.run(None, feeds, profile=profile, trace=trace)
    expected = s0
    for _ in range(3):
        expected = expected * 2 + x
    np.testing.assert_array_equal(result, expected)
    assert len(profile["Loop/Mul"]) == len(profile["Loop/Add"]) == 3
    assert [r[0] for r in trace].count("repeat/double") == 3
    (plan,) = s.plans()
    assert plan.steps[0].node.operator.loop_body.plan_count() == 1


@pytest.mark.parametrize("level", [0, 2])
def test_bodies_are_optimised_at_their_graph_s_level(level):
    """A Loop body's Mul then Add fuse into one step when the session optimises (a body's
    passes are its graph's), and the result is the same either way."""
    s = Session.create(model_from_proto(_loop_model()), SessionOptions(optimization_level=level))
    s0, x = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    (result,) = s.run(None, {"n": np.array(3, np.int64), "s0": s0, "x": x})
    np.testing.assert_array_equal(result, ((s0 * 2 + x) * 2 + x) * 2 + x)
    (plan,) = s.plans()
    (body_plan,) = plan.steps[0].node.operator.loop_body.plans()
    labels = [step.label for step in body_plan.steps if step.node.info.op_type != "Identity"]
    assert labels == (["fused(Mul+Add)"] if level else ["Mul", "Add"])


def test_an_if_s_result_is_handed_out_without_a_copy_and_outlives_later_runs():
    """The branch's run returns an array nothing else holds, so the graph output is that array
    (no second copy); a later run, of either branch, leaves it as it was."""
    s = session(if_model("input"))
    (kept,) = s.run(None, {"x": X2, "c": np.array(True)})
    (plan,) = s.plans()
    assert plan.output_ids[0] in plan.fresh_outputs
    for condition in (True, False, True):
        (later,) = s.run(None, {"x": X2 + 1, "c": np.array(condition)})
        assert later is not kept and not np.shares_memory(later, kept)
    np.testing.assert_array_equal(kept, X2 * X2 + 0.5)


def test_an_if_keeps_its_branch_entries_per_parent_plan_and_follows_new_shapes():
    """A parent plan that fixed the branches' input shapes enters them without a key: a new
    shape is a new parent plan, with its own branch plans; the old ones still answer."""
    s = session(if_model("input"))
    for x in (X2, X3, X2, X3):
        for condition in (True, False):
            (y,) = s.run(None, {"x": x, "c": np.array(condition)})
            np.testing.assert_array_equal(y, x * x + 0.5 if condition else np.full_like(x, 0.5))
    operator = s.plans()[0].steps[0].node.operator
    assert operator.then_branch.plan_count() == operator.else_branch.plan_count() == 2


def test_an_if_over_a_value_planned_at_run_time_takes_either_branch():
    """NonZero's result has a run-time shape, so the If's branches are keyed by the arrays."""
    then, other = (
        helper.make_graph(
            [helper.make_node(op, ["nz", "nz"], [f"{name}_y"])], name, [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.INT64, None)],
        )
        for name, op in (("then", "Add"), ("else", "Sub"))
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )  # fmt: skip
    s = session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for x in (X2, X2 - 2, X2):
        expected = np.stack(np.nonzero(x))
        for condition in (True, False):
            (y,) = s.run(None, {"x": x, "c": np.array(condition)})
            np.testing.assert_array_equal(y, expected * 2 if condition else expected * 0)


def _carrying_loop(op_type: str) -> onnx.ModelProto:
    """A Loop carrying s: op(s, w) per iteration (Add keeps s's shape, Concat grows it)."""
    attributes = {"axis": 1} if op_type == "Concat" else {}
    body = helper.make_graph(
        [helper.make_node("Identity", ["ci"], ["co"]),
         helper.make_node(op_type, ["si", "w"], ["so"], **attributes)],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("ci", TensorProto.BOOL, []),
         helper.make_tensor_value_info("si", F, None)],
        [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
         helper.make_tensor_value_info("so", F, None)],
        [helper.make_tensor("w", F, [1, 1], [0.5])],
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body)], "g",
        [helper.make_tensor_value_info("n", TensorProto.INT64, []),
         helper.make_tensor_value_info("x", F, [1, 1])],
        [helper.make_tensor_value_info("y", F, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op_type", ["Add", "Concat"])
def test_a_loop_holds_its_body_s_state_only_while_the_carried_shapes_stay(op_type):
    """Add keeps the carried shape (one body plan, its run state held for the iterations);
    Concat grows it (a plan per iteration count, found by key each time)."""
    s = session(_carrying_loop(op_type))
    x = np.ones((1, 1), np.float32)
    for trips in (0, 1, 4, 4):
        (y,) = s.run(None, {"n": np.array(trips, np.int64), "x": x})
        if op_type == "Add":
            np.testing.assert_array_equal(y, x + 0.5 * trips)
        else:
            np.testing.assert_array_equal(y, np.concatenate([x] + [x * 0.5] * trips, axis=1))
    body = s.plans()[0].steps[0].node.operator.loop_body
    assert body.plan_count() == (1 if op_type == "Add" else 4)
