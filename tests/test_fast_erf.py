"""Fast mode's float32 Erf and Gelu (backends/activations.py: erf as tanh of a fitted odd
polynomial, evaluated in float32) against math.erf.

The error is measured in float32 (or float16) ulps of the true value, which the oracle
computes in float64 from Python's math.erf / math.erfc, over a dense sweep that covers the
fit's end at ±3.92 and Gelu's negative tail down to float32 underflow. The stated bounds: Erf
within 4 float32 ulps; Gelu within 5 ulps where x > -1 (Φ(x) > 0.15) and, everywhere, within an
absolute 4·2⁻²⁴·|x| (the erf's absolute error times x/2: in the negative tail, where Φ(x)
is small, the error is not relative to the result, as in onnxruntime's x·(1 + erf(x/√2))/2).
float16 results round those once more: within one float16 ulp where the float32 bound is.
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
ERF_ULPS = {np.float32: 4.0, np.float16: 1.0}
GELU_ULPS = {np.float32: 5.0, np.float16: 1.0}
GELU_TAIL = 4.0 * 2.0**-24  # absolute, times |x|


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


def _run(op_type: str, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (got,) = _session(op_type, x.dtype.type).run(None, {"x": x})
    assert got.dtype == x.dtype
    assert np.all(np.isfinite(got))
    return got


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_erf_within_its_stated_ulps_over_a_dense_sweep(dtype) -> None:
    x = _sweep(dtype)
    got, truth = _run("Erf", x), _erf(x)
    worst = _ulps(got, truth, dtype)
    assert worst.max() <= ERF_ULPS[dtype], (x[worst.argmax()], got[worst.argmax()])
    assert np.all(np.abs(got) <= 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_within_its_stated_bounds_over_a_dense_sweep(dtype) -> None:
    x = _sweep(dtype)
    got, truth = _run("Gelu", x), _gelu(x)
    ulps = _ulps(got, truth, dtype)
    central = x > -1
    assert ulps[central].max() <= GELU_ULPS[dtype], x[central][ulps[central].argmax()]
    spacing = np.spacing(np.abs(truth.astype(dtype))).astype(np.float64)
    allowed = GELU_TAIL * np.abs(x.astype(np.float64)) + GELU_ULPS[dtype] * spacing
    excess = np.abs(got.astype(np.float64) - truth) / allowed
    assert excess.max() <= 1.0, x[excess.argmax()]


def test_the_bounds_are_tight_enough_to_fail() -> None:
    """The sweep sees errors near the bounds: a bound much looser than the kernel would hide
    a worse fit."""
    x = _sweep(np.float32)
    worst = _ulps(_run("Erf", x), _erf(x), np.float32).max()
    assert ERF_ULPS[np.float32] - 2 < worst <= ERF_ULPS[np.float32]


@pytest.mark.parametrize("op_type", ["Erf", "Gelu"])
def test_special_values_match_the_float64_path(op_type) -> None:
    # Gelu(-inf) is -inf·0: NaN on the float32 path (as in onnxruntime), -inf on the float64 one.
    special = np.array([np.inf, np.nan, 0.0, -0.0, 1e30, -1e30, 50.0, -50.0])
    special = special if op_type == "Gelu" else np.append(special, -np.inf)
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
        spacing = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
        allowed = ERF_ULPS[np.float32] * spacing + GELU_TAIL * np.abs(x.astype(np.float64))
        assert np.all(np.abs(got - truth) <= allowed), op_type
