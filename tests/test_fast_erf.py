"""Fast mode's float32 Erf and Gelu (unary.float32_erf / float32_gelu) against math.erf.

The error is measured in float32 (or float16) ulps of the true value, which the oracle
computes in float64 from Python's math.erf / math.erfc, over a dense sweep that covers both
branches of erf, the cut between them and Gelu's negative tail down to float32 underflow.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import Session
from onemodel.graph.importer import model_from_proto

ELEMENT = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
ONE_ULP = 1.0


def _session(op_type: str, dtype: type) -> Session:
    x = helper.make_tensor_value_info("x", ELEMENT[dtype], [None])
    y = helper.make_tensor_value_info("y", ELEMENT[dtype], [None])
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"])], op_type, [x], [y])
    opset = helper.make_operatorsetid("", 20)
    return Session(model_from_proto(helper.make_model(graph, opset_imports=[opset])))


def _sweep(dtype: type) -> np.ndarray:
    """Every 2**-12 step over [-16, 16] plus a geometric sweep of both signs from the smallest
    normal number to 1e4 (beyond which erf is ±1 and Gelu x or -0)."""
    linear = np.arange(-16.0, 16.0, 2.0**-12)
    tiny = np.finfo(dtype).smallest_normal
    geometric = np.geomspace(float(tiny), 1e4, 20_000)
    return np.unique(np.concatenate([linear, geometric, -geometric]).astype(dtype))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(v) for v in x.astype(np.float64).tolist()])


def _gelu(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64).tolist()
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in wide])


def _ulps(got: np.ndarray, truth: np.ndarray, dtype: type) -> np.ndarray:
    """|got - truth| in units of the spacing of `dtype` at truth (subnormal spacing below)."""
    spacing = np.spacing(np.abs(truth.astype(dtype))).astype(np.float64)
    return np.abs(got.astype(np.float64) - truth) / spacing


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("op_type", "oracle"), [("Erf", _erf), ("Gelu", _gelu)])
def test_within_one_ulp_over_a_dense_sweep(op_type, oracle, dtype) -> None:
    x = _sweep(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (got,) = _session(op_type, dtype).run(None, {"x": x})
    truth = oracle(x)
    assert got.dtype == dtype
    assert np.all(np.isfinite(got))
    worst = _ulps(got, truth, dtype)
    assert worst.max() <= ONE_ULP, (x[worst.argmax()], got[worst.argmax()], truth[worst.argmax()])


@pytest.mark.parametrize("op_type", ["Erf", "Gelu"])
def test_special_values_match_the_float64_path(op_type) -> None:
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 50.0, -50.0])
    (wide,) = _session(op_type, np.float32).run(None, {"x": special.astype(np.float32)})
    x64 = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [None])
    y64 = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [None])
    graph = helper.make_graph([helper.make_node(op_type, ["x"], ["y"])], "g", [x64], [y64])
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 20)])
    (accurate,) = Session(model_from_proto(model)).run(None, {"x": special})
    np.testing.assert_array_equal(wide, accurate.astype(np.float32))
    np.testing.assert_array_equal(np.signbit(wide), np.signbit(accurate))


def test_an_input_shared_with_the_output_is_read_before_it_is_written() -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 33)) * 4).astype(np.float32)
    for op_type, oracle in (("Erf", _erf), ("Gelu", _gelu)):
        nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node(op_type, ["n"], ["y"])]
        value = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 33])
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 33])
        graph = helper.make_graph(nodes, op_type, [value], [out])
        model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 20)])
        (got,) = Session(model_from_proto(model)).run(None, {"x": x})
        truth = oracle(-x.ravel()).reshape(x.shape)
        assert _ulps(got, truth, np.float32).max() <= ONE_ULP
