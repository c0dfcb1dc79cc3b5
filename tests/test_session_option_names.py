"""SessionOptions take the enum members or their names and values as strings: a string mode
once ran fast mode silently (the session compared the mode by identity), so exact sessions
built with mode="exact" were not exact."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import onemodel
from onemodel import ErrorKind, ExecutionMode, OptimizationLevel, SessionError, SessionOptions
from onemodel.graph.weights import WeightStorage


def _erf_model() -> bytes:
    node = helper.make_node("Erf", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "erf",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("spelling", ["exact", "EXACT", "Exact", ExecutionMode.EXACT])
def test_a_mode_spelled_as_a_string_runs_that_mode(spelling):
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    by_member = onemodel.Session.load(_erf_model(), SessionOptions(mode=ExecutionMode.EXACT))
    by_name = onemodel.Session.load(_erf_model(), SessionOptions(mode=spelling))
    fast = onemodel.Session.load(_erf_model(), SessionOptions(mode="fast"))
    (exact_y,) = by_member.run(None, {"x": x})
    (named_y,) = by_name.run(None, {"x": x})
    (fast_y,) = fast.run(None, {"x": x})
    assert by_name.options.mode is ExecutionMode.EXACT
    assert named_y.tobytes() == exact_y.tobytes()
    assert fast_y.tobytes() != exact_y.tobytes()  # the two modes' Erf differ on this grid


def test_a_mode_set_after_construction_is_read_by_name_too():
    options = SessionOptions()
    options.mode = "exact"
    session = onemodel.Session.load(_erf_model(), options)
    reference = onemodel.Session.load(_erf_model(), SessionOptions(mode=ExecutionMode.EXACT))
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    assert session.run(None, {"x": x})[0].tobytes() == reference.run(None, {"x": x})[0].tobytes()


@pytest.mark.parametrize(
    ("field", "given", "member"),
    [
        ("optimization_level", "none", OptimizationLevel.NONE),
        ("optimization_level", "ALL", OptimizationLevel.ALL),
        ("optimization_level", 1, OptimizationLevel.BASIC),
        ("weight_storage", "binary16", WeightStorage.BINARY16),
        ("weight_storage", "BFLOAT16", WeightStorage.BFLOAT16),
    ],
)
def test_levels_and_storages_take_names_and_values(field, given, member):
    assert getattr(SessionOptions(**{field: given}), field) is member


@pytest.mark.parametrize(
    ("field", "given"),
    [("mode", "fastest"), ("mode", 1), ("optimization_level", "max"), ("weight_storage", "fp8")],
)
def test_an_unknown_name_is_refused_with_the_choices(field, given):
    with pytest.raises(SessionError) as raised:
        SessionOptions(**{field: given})
    assert raised.value.kind is ErrorKind.UNSUPPORTED
    assert field in str(raised.value) and repr(given) in str(raised.value)
