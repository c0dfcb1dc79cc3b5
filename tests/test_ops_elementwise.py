"""Element-wise operators: binary.py, unary.py, activations.py, where.py and cast.py.

The ONNX backend conformance node cases of these operators run through `run_node` first; then
unit tests pin down what the conformance cases do not reach (integer semantics, legacy
broadcasting, errors, in-place runs, float16/bfloat16) with onnxruntime as the oracle where it
implements the case.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conformance_cases import case_params, node_cases, run_case
from onnx import TensorProto
from operator_harness import one_node_model, onnxruntime_run, refused, run_node

from onemodel.backends import KernelPaths
from onemodel.errors import ErrorKind
from onemodel.graph.operators import optable
from onemodel.graph.operators.base import InferContext, NodeInfo, RunContext, TensorSpec
from onemodel.graph.operators.unary import erfc
from onemodel.tensors import onnx_code_for_numpy

BINARY = "Add Sub Mul Div Pow Mod BitShift And Or Xor Equal Less Greater LessOrEqual "
BINARY += "GreaterOrEqual BitwiseAnd BitwiseOr BitwiseXor Max Min Sum Mean"
UNARY = "Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Round Sign Sin Cos Tan Asin Acos Atan Sinh "
UNARY += "Cosh Asinh Acosh Atanh Erf Not IsNaN IsInf BitwiseNot"
ACTIVATIONS = "Relu LeakyRelu PRelu Sigmoid HardSigmoid HardSwish Tanh Elu Selu Celu Softplus "
ACTIVATIONS += "Softsign Gelu Mish ThresholdedRelu Clip Shrink"
OPS = frozenset(f"{BINARY} {UNARY} {ACTIVATIONS} Where Cast CastLike".split())

# Conformance cases these operators do not pass yet, each with its reason.
EXPECTED_FAILURES: dict[str, str] = {}


# --- ONNX conformance node cases ----------------------------------------------------------------

CASES = node_cases(OPS)


@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance_node_case(name: str) -> None:
    run_case(CASES[name])


def test_conformance_cases_cover_every_operator() -> None:
    covered = {case.op_type for case in CASES.values()}
    assert covered == OPS


# --- helpers -------------------------------------------------------------------------------------


def ort_run(
    op_type: str,
    inputs: list[np.ndarray],
    attributes: dict[str, Any] | None = None,
    opset: int = 17,
) -> np.ndarray:
    """onnxruntime's result for one node."""
    (result,) = onnxruntime_run(*one_node_model(op_type, inputs, attributes, opset=opset))
    return result


def run_in_place(
    op_type: str, inputs: list[np.ndarray], attributes: dict[str, Any] | None = None, opset=17
) -> np.ndarray:
    """Run one node with its output in the memory of the input its operator names."""
    definition = optable.resolve("", op_type, opset)
    assert definition is not None
    node = NodeInfo(
        "n", op_type, "", opset, tuple(f"in{i}" for i in range(len(inputs))), ("out",),
        attributes or {},
    )  # fmt: skip
    operator = definition.factory(node)
    index = operator.in_place_input
    assert index is not None
    specs = [TensorSpec(onnx_code_for_numpy(x.dtype), x.shape) for x in inputs]
    (spec,) = operator.infer(InferContext(node, specs, list(inputs)))
    assert spec == specs[index]
    inputs = [x.copy() for x in inputs]
    shared = inputs[index]
    operator.run(RunContext(KernelPaths.get("numpy"), False), inputs, [shared])
    return shared


def rng_values(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    """Values that exercise signs, zeros and (for floats) fractions of the given type."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100), shape, endpoint=True).astype(
            dtype
        )
    return (rng.standard_normal(shape) * 3).astype(dtype)


# --- against onnxruntime -------------------------------------------------------------------------

INTEGER_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_TYPES = [np.float16, np.float32, np.float64]


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint8, *FLOAT_TYPES])
@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_arithmetic_matches_onnxruntime(op_type: str, dtype: Any) -> None:
    a = rng_values((3, 4, 5), dtype, 1)
    b = rng_values((4, 1), dtype, 2)
    if op_type == "Div" and np.dtype(dtype).kind in "iu":
        b[b == 0] = 7  # onnxruntime leaves integer division by zero undefined
    (ours,) = run_node(op_type, [a, b], opset=14 if op_type not in ("Max", "Min") else 13)
    theirs = ort_run(op_type, [a, b], opset=14 if op_type not in ("Max", "Min") else 13)
    assert ours.dtype == theirs.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, *FLOAT_TYPES])
@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_match_onnxruntime(op_type: str, dtype: Any) -> None:
    a = rng_values((2, 3, 4), dtype, 3)
    b = np.round(rng_values((3, 1), dtype, 4))
    a[0, 0, 0] = b[0, 0]
    (ours,) = run_node(op_type, [a, b], opset=16)
    assert ours.dtype == np.bool_
    np.testing.assert_array_equal(ours, ort_run(op_type, [a, b], opset=16))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_matches_onnxruntime(fmod: int, dtype: Any) -> None:
    if fmod == 0 and np.dtype(dtype).kind == "f":
        pytest.skip("onnxruntime refuses fmod=0 for floats")
    a = rng_values((4, 5), dtype, 5)
    b = rng_values((5,), dtype, 6)
    b[b == 0] = 3
    (ours,) = run_node("Mod", [a, b], {"fmod": fmod}, opset=13)
    np.testing.assert_array_equal(ours, ort_run("Mod", [a, b], {"fmod": fmod}, opset=13))


@pytest.mark.parametrize(
    ("base", "exponent"),
    [
        (np.float32, np.float32),
        (np.float32, np.int64),
        (np.float64, np.float32),
        (np.int32, np.int32),
        (np.int64, np.int64),
        (np.int32, np.float32),
        (np.float16, np.float16),
    ],
)
def test_pow_keeps_the_base_type_and_matches_onnxruntime(base: Any, exponent: Any) -> None:
    x = np.abs(rng_values((3, 4), base, 7)) + base(1)
    y = np.array([[0, 1, 2, 3]]).astype(exponent)
    (ours,) = run_node("Pow", [x, y], opset=15)
    theirs = ort_run("Pow", [x, y], opset=15)
    assert ours.dtype == np.dtype(base)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6 if base != np.float16 else 1e-3)


UNARY_FLOAT_OPS = [
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin",
    "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf",
    "Relu", "Sigmoid", "Tanh", "Softplus", "Softsign", "Elu", "Selu", "HardSigmoid",
    "HardSwish", "LeakyRelu", "ThresholdedRelu", "Mish", "IsNaN", "IsInf",
]  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("op_type", UNARY_FLOAT_OPS)
def test_float_functions_match_onnxruntime(op_type: str, dtype: Any) -> None:
    x = np.concatenate(
        [
            rng_values((40,), np.float64, 8) / 3,
            [0.5, 1.5, 2.5, -0.5, -2.5, 0.0, -0.0, 20.0, -20.0, np.inf, -np.inf, np.nan],
        ]
    ).astype(dtype)
    opset = 18
    try:
        theirs = ort_run(op_type, [x], opset=opset)
    except Exception as error:  # onnxruntime lacks some type/op pairs
        pytest.skip(f"onnxruntime: {type(error).__name__}")
    (ours,) = run_node(op_type, [x], opset=opset)
    if op_type == "Sign" and dtype == np.float16:  # onnxruntime: Sign(NaN) is 0 in float16 only
        theirs[np.isnan(x)] = np.nan
    assert ours.dtype == theirs.dtype
    tolerance = 2e-3 if dtype == np.float16 else 2e-6
    np.testing.assert_allclose(ours, theirs, rtol=tolerance, atol=1e-6, equal_nan=True)


def test_gelu_is_accurate_and_matches_onnxruntime_where_it_is() -> None:
    x = np.concatenate([rng_values((50,), np.float64, 9), -np.geomspace(1, 35, 50)])
    (ours,) = run_node("Gelu", [x], opset=20)
    oracle = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
    # Rounding x/√2 costs up to 2·(x/√2)² ulp of relative accuracy deep in the tail.
    np.testing.assert_allclose(ours, oracle, rtol=1e-12, atol=0)
    x32 = x.astype(np.float32)
    (ours32,) = run_node("Gelu", [x32], opset=20)
    # Both evaluate x·(1 + erf(x/√2))/2 in float32, which loses relative accuracy in the tail
    # where 1 + erf cancels: they agree within the erfs' absolute errors times |x|/2 (ours is
    # within 4·2⁻²⁴·|x|, tests/test_fast_erf.py).
    gap = np.abs(ours32.astype(np.float64) - ort_run("Gelu", [x32], opset=20))
    assert np.all(gap <= 1e-5 * np.abs(ours32) + 5 * 2.0**-24 * np.abs(x))
    tanh = {"approximate": "tanh"}
    (ours32,) = run_node("Gelu", [x32], tanh, opset=20)
    wide = x32.astype(np.float64)
    inner = math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3)
    with np.errstate(over="ignore"):
        oracle = wide / (1 + np.exp(-2 * inner))  # x/2·(1 + tanh(u)) without cancellation
    # Fast mode evaluates x/2·(1 + tanh(u)) as onnxruntime does: within 4 ulps where the result
    # is not small, and where 1 + tanh(u) cancels (x very negative) within tanh's absolute error
    # times |x|/2, which 2⁻²⁴·|x| bounds.
    spacing = np.spacing(np.abs(oracle).astype(np.float32)).astype(np.float64)
    allowed = 4 * spacing + 2.0**-24 * np.abs(wide)
    assert np.all(np.abs(ours32 - oracle) <= allowed)
    assert np.all(np.abs(ours32 - ort_run("Gelu", [x32], tanh, opset=20)) <= 2 * allowed)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
def test_clip_matches_onnxruntime(dtype: Any) -> None:
    x = rng_values((3, 7), dtype, 10)
    low, high = np.array(-1, dtype=dtype), np.array(2, dtype=dtype)
    (ours,) = run_node("Clip", [x, low, high], opset=13)
    np.testing.assert_array_equal(ours, ort_run("Clip", [x, low, high], opset=13))


# --- erf -----------------------------------------------------------------------------------------


def test_erf_is_accurate_in_float64_and_within_4_ulps_in_float32() -> None:
    x = np.concatenate(
        [
            np.linspace(-7, 7, 20001),
            np.geomspace(1e-300, 1e-3, 200),
            -np.geomspace(1e-300, 1e-3, 200),
            [0.46875, 0.46875 + 1e-16, 4.0, 4.0 + 1e-15, 5.9, 6.0, 6.1],
        ]
    )
    oracle = np.array([math.erf(v) for v in x])
    (ours,) = run_node("Erf", [x], opset=13)
    np.testing.assert_allclose(ours, oracle, rtol=1e-15, atol=0)
    x32 = x.astype(np.float32)
    (ours32,) = run_node("Erf", [x32], opset=13)
    oracle32 = np.array([math.erf(v) for v in x32.astype(np.float64)])
    # fast mode's float32 erf: tanh of a fitted odd polynomial, within 4 float32 ulps
    # (tests/test_fast_erf.py)
    ulps = np.abs(ours32 - oracle32) / np.spacing(np.abs(oracle32).astype(np.float32))
    assert np.max(ulps) <= 4


def test_erfc_keeps_its_relative_accuracy_in_the_tail() -> None:
    x = np.concatenate([np.linspace(-6, 27, 3301), [0.46875, -0.46875, 4.0]])
    oracle = np.array([math.erfc(v) for v in x])
    with np.errstate(all="ignore"):  # unselected branches divide by zero, as in a run
        ours = erfc(np, x)
    np.testing.assert_allclose(ours, oracle, rtol=2e-14, atol=0)


def test_erf_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    (ours,) = run_node("Erf", [x], opset=13)
    np.testing.assert_array_equal(ours, [0.0, -0.0, 1.0, -1.0, np.nan])
    assert np.signbit(ours[1])


# --- integer semantics ---------------------------------------------------------------------------


def test_integer_division_truncates_toward_zero_and_x_over_zero_is_zero() -> None:
    a = np.array([-7, 7, -7, 7, 5, -128], dtype=np.int8)
    b = np.array([2, 2, -2, -2, 0, -1], dtype=np.int8)
    (ours,) = run_node("Div", [a, b], opset=14)
    np.testing.assert_array_equal(ours, [-3, 3, 3, -3, 0, -128])
    assert ours.dtype == np.int8


def test_mod_follows_the_divisor_sign_by_default_and_the_dividend_sign_with_fmod() -> None:
    a = np.array([-7, 7, -7, 7], dtype=np.int32)
    b = np.array([3, 3, -3, -3], dtype=np.int32)
    np.testing.assert_array_equal(run_node("Mod", [a, b], opset=13)[0], [2, 1, -1, -2])
    np.testing.assert_array_equal(run_node("Mod", [a, b], {"fmod": 1})[0], [-1, 1, -1, 1])
    refused(ErrorKind.INVALID_MODEL, "Mod", [a, b], {"fmod": 2}, match="fmod")


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16])
def test_float_floor_mod_special_values_match_numpy_bit_for_bit(dtype: Any) -> None:
    """Opset 28's special cases (signed zeros, infinities, NaN) are NumPy's remainder; the
    kernel builds it from fmod so that CuPy, whose remainder differs there, agrees."""
    values = [0.0, -0.0, 1.5, -1.5, 3.0, -3.0, 7.25, -7.25, np.inf, -np.inf, np.nan, 1e-30]
    a, b = (v.astype(dtype) for v in np.meshgrid(values, values))
    (ours,) = run_node("Mod", [a, b], opset=28)
    with np.errstate(all="ignore"):
        expected = np.remainder(a, b)
    wide, want = ours.astype(np.float64), expected.astype(np.float64)
    same_bits = wide.view(np.uint64) == want.view(np.uint64)
    assert (same_bits | (np.isnan(wide) & np.isnan(want))).all()


def test_integer_pow_is_exact_and_negative_exponents_truncate() -> None:
    base = np.array([3, -1, -1, 1, 2, 0, 7], dtype=np.int64)
    exponent = np.array([39, -3, -4, -5, -1, 3, 0], dtype=np.int32)
    (ours,) = run_node("Pow", [base, exponent], opset=15)
    np.testing.assert_array_equal(ours, [3**39, -1, 1, 1, 0, 0, 1])
    assert ours.dtype == np.int64


def test_bitshift_amounts_outside_the_width() -> None:
    x = np.array([1, -128, -1, 64], dtype=np.int8)
    amount = np.array([8, 9, -1, 1], dtype=np.int8)
    left = run_node("BitShift", [x, amount], {"direction": "LEFT"}, opset=28)[0]
    right = run_node("BitShift", [x, amount], {"direction": "RIGHT"}, opset=28)[0]
    np.testing.assert_array_equal(left, [0, 0, 0, -128])
    np.testing.assert_array_equal(right, [0, -1, -1, 32])
    refused(ErrorKind.INVALID_MODEL, "BitShift", [x, amount], {"direction": "UP"})


def test_bitwise_and_logical_operators() -> None:
    a = np.array([0b1100, 0b1010], dtype=np.uint8)
    b = np.array([0b1010], dtype=np.uint8)
    assert run_node("BitwiseAnd", [a, b], opset=18)[0].tolist() == [0b1000, 0b1010]
    assert run_node("BitwiseOr", [a, b], opset=18)[0].tolist() == [0b1110, 0b1010]
    assert run_node("BitwiseXor", [a, b], opset=18)[0].tolist() == [0b0110, 0]
    assert run_node("BitwiseNot", [a], opset=18)[0].tolist() == [0b11110011, 0b11110101]
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    assert run_node("And", [p, q])[0].tolist() == [True, False, False, False]
    assert run_node("Or", [p, q])[0].tolist() == [True, True, True, False]
    assert run_node("Xor", [p, q])[0].tolist() == [False, True, True, False]
    assert run_node("Not", [p])[0].tolist() == [False, False, True, True]


# --- shapes, types and errors --------------------------------------------------------------------


def test_shapes_that_do_not_broadcast_are_bad_input_naming_the_shapes() -> None:
    a, b = np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)
    error = refused(ErrorKind.INVALID_INPUT, "Add", [a, b], match=r"\(2, 3\), \(4,\)")
    assert error.value == "in1"
    c = np.zeros((3,), np.bool_)
    refused(ErrorKind.INVALID_INPUT, "Where", [c, a, b], opset=16, match="broadcast")
    refused(ErrorKind.INVALID_INPUT, "Sum", [a, a, b], opset=13, match="broadcast")


def test_mismatched_and_undefined_types_are_invalid_models() -> None:
    a, b = np.zeros(3, np.float32), np.zeros(3, np.float64)
    refused(ErrorKind.INVALID_MODEL, "Add", [a, b], match="one element type")
    refused(ErrorKind.INVALID_MODEL, "Exp", [np.zeros(3, np.int32)], match="INT32")
    refused(ErrorKind.INVALID_MODEL, "And", [a, a], match="FLOAT")
    refused(ErrorKind.INVALID_MODEL, "Cast", [a], {"to": TensorProto.STRING})


def test_legacy_broadcast_attributes_before_opset_7() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    middle = np.array([10, 20, 30], dtype=np.float32)
    (ours,) = run_node("Add", [a, middle], {"broadcast": 1, "axis": 1}, opset=6)
    np.testing.assert_array_equal(ours, a + middle[:, None])
    last = np.arange(4, dtype=np.float32)
    (ours,) = run_node("Mul", [a, last], {"broadcast": 1}, opset=6)
    np.testing.assert_array_equal(ours, a * last)
    refused(ErrorKind.INVALID_INPUT, "Add", [a, last], opset=6, match="broadcast=1")
    refused(ErrorKind.INVALID_INPUT, "Add", [a, middle], {"broadcast": 1}, opset=6, match="axis 2")
    (ours,) = run_node("Less", [a, last], {"broadcast": 1}, opset=1)
    np.testing.assert_array_equal(ours, a < last)


def test_variadic_operators_broadcast_from_opset_8_only() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, 10, -1], dtype=np.float32)
    c = np.array([[100], [-100]], dtype=np.float32)
    np.testing.assert_array_equal(run_node("Sum", [a, b, c], opset=13)[0], a + b + c)
    np.testing.assert_array_equal(
        run_node("Max", [a, b, c], opset=13)[0], np.maximum(np.maximum(a, b), c)
    )
    np.testing.assert_allclose(run_node("Mean", [a, b, c], opset=13)[0], (a + b + c) / 3)
    np.testing.assert_array_equal(run_node("Min", [a], opset=13)[0], a)
    refused(ErrorKind.INVALID_INPUT, "Sum", [a, b], opset=6, match="one shape")


def test_max_and_min_propagate_nan() -> None:
    a = np.array([np.nan, 1.0, 2.0], dtype=np.float32)
    b = np.array([0.0, np.nan, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(run_node("Max", [a, b], opset=13)[0], [np.nan, np.nan, 2.0])
    np.testing.assert_array_equal(run_node("Min", [a, b], opset=13)[0], [np.nan, np.nan, 1.0])


def test_prelu_slope_broadcasts_unidirectionally() -> None:
    x = rng_values((2, 3, 4), np.float32, 11)
    slope = np.array([[0.1], [0.2], [0.3]], dtype=np.float32)
    (ours,) = run_node("PRelu", [x, slope], opset=16)
    np.testing.assert_allclose(ours, np.where(x < 0, x * slope, x))
    wide = np.zeros((5, 2, 3, 4), np.float32)
    refused(ErrorKind.INVALID_INPUT, "PRelu", [x, wide], opset=16, match="unidirectional")


def test_prelu_before_opset_7_takes_a_slope_per_channel() -> None:
    x = rng_values((2, 3, 4), np.float32, 11)
    slope = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    (ours,) = run_node("PRelu", [x, slope], opset=6)
    np.testing.assert_allclose(ours, np.where(x < 0, x * slope[:, None], x))
    (shared,) = run_node("PRelu", [x, slope[:1]], opset=6)
    np.testing.assert_allclose(shared, np.where(x < 0, x * slope[0], x))
    four = np.zeros(4, np.float32)  # not a channel count: the later rule (x's last axis)
    np.testing.assert_array_equal(run_node("PRelu", [x, four], opset=6)[0], np.maximum(x, 0))


def test_clip_bounds_by_attribute_and_by_input() -> None:
    x = np.array([-3.0, -0.5, 0.5, 3.0], dtype=np.float32)
    (ours,) = run_node("Clip", [x], {"min": -1.0, "max": 1.0}, opset=6)
    np.testing.assert_array_equal(ours, [-1.0, -0.5, 0.5, 1.0])
    (ours,) = run_node("Clip", [x, None, np.array(0.0, np.float32)], opset=13)
    np.testing.assert_array_equal(ours, [-3.0, -0.5, 0.0, 0.0])
    (ours,) = run_node("Clip", [x, np.array(2.0, np.float32), np.array(1.0, np.float32)])
    np.testing.assert_array_equal(ours, [1.0, 1.0, 1.0, 1.0])  # min > max gives max
    refused(ErrorKind.INVALID_INPUT, "Clip", [x, np.zeros(2, np.float32)], opset=13, match="scalar")


def test_relu_turns_negative_zero_into_zero_and_keeps_nan() -> None:
    (ours,) = run_node("Relu", [np.array([-0.0, np.nan, -1.0, 2.0], np.float32)], opset=14)
    np.testing.assert_array_equal(ours, [0.0, np.nan, 0.0, 2.0])
    assert not np.signbit(ours[0])


def test_isinf_detects_the_requested_signs() -> None:
    x = np.array([np.inf, -np.inf, 1.0, np.nan], np.float32)
    assert run_node("IsInf", [x], opset=20)[0].tolist() == [True, True, False, False]
    only_negative = {"detect_positive": 0}
    assert run_node("IsInf", [x], only_negative, opset=20)[0].tolist() == [0, 1, 0, 0]
    only_positive = {"detect_negative": 0}
    assert run_node("IsInf", [x], only_positive, opset=20)[0].tolist() == [1, 0, 0, 0]


def test_round_halves_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, 2.6], np.float32)
    np.testing.assert_array_equal(run_node("Round", [x], opset=22)[0], [0, 2, 2, -0, -2, 2, 3])


def test_where_three_way_broadcasting() -> None:
    condition = np.array([[True], [False]])
    x = np.array([1, 2, 3], dtype=np.int64)
    y = np.array(-1, dtype=np.int64)
    (ours,) = run_node("Where", [condition, x, y], opset=16)
    np.testing.assert_array_equal(ours, [[1, 2, 3], [-1, -1, -1]])


def test_shrink_on_integers_truncates_the_float_result() -> None:
    x = np.array([-5, -1, 0, 1, 5], dtype=np.int32)
    (ours,) = run_node("Shrink", [x], {"lambd": 1.5, "bias": 1.5}, opset=9)
    np.testing.assert_array_equal(ours, [-3, 0, 0, 0, 3])


# --- 16-bit floats --------------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Add", "Mul", "Div", "Pow", "Max", "Sum"])
def test_bfloat16_binary_ops_keep_bfloat16_and_round_once(op_type: str) -> None:
    a = rng_values((20,), np.float32, 12).astype(ml_dtypes.bfloat16)
    b = (np.abs(rng_values((20,), np.float32, 13)) + 0.5).astype(ml_dtypes.bfloat16)
    a = np.abs(a) if op_type == "Pow" else a
    (ours,) = run_node(op_type, [a, b], opset=15 if op_type != "Max" and op_type != "Sum" else 13)
    assert ours.dtype == ml_dtypes.bfloat16
    wide = {"Add": np.add, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}.get(
        op_type, np.maximum if op_type == "Max" else np.add
    )(a.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(ours, wide.astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("op_type", ["Exp", "Sigmoid", "Gelu", "Erf", "Softplus", "Tanh", "Relu"])
def test_bfloat16_functions_keep_bfloat16(op_type: str) -> None:
    x = rng_values((30,), np.float32, 14).astype(ml_dtypes.bfloat16)
    (ours,) = run_node(op_type, [x], opset=22)
    assert ours.dtype == ml_dtypes.bfloat16
    (wide,) = run_node(op_type, [x.astype(np.float32)], opset=22)
    np.testing.assert_array_equal(ours, wide.astype(ml_dtypes.bfloat16))


# --- in place -------------------------------------------------------------------------------------

IN_PLACE_BINARY = [
    ("Add", np.float32, {}), ("Sub", np.int32, {}), ("Mul", np.float16, {}),
    ("Div", np.int32, {}), ("Div", np.float32, {}), ("Pow", np.int64, {}),
    ("Pow", np.float32, {}), ("Mod", np.int32, {}), ("Mod", np.float32, {"fmod": 1}),
    ("BitShift", np.int16, {"direction": "RIGHT"}), ("BitwiseXor", np.uint8, {}),
    ("Equal", np.bool_, {}), ("And", np.bool_, {}), ("Max", np.float32, {}),
    ("Sum", np.float64, {}), ("Mean", np.float32, {}), ("PRelu", np.float32, {}),
]  # fmt: skip


@pytest.mark.parametrize(("op_type", "dtype", "attributes"), IN_PLACE_BINARY)
def test_in_place_binary_runs_agree_with_separate_outputs(
    op_type: str, dtype: Any, attributes: dict[str, Any]
) -> None:
    a = rng_values((3, 4), dtype, 15)
    b = rng_values((4,), dtype, 16)
    if np.dtype(dtype).kind in "iu" and op_type != "BitShift":
        b[b == 0] = 3
    if op_type == "BitShift":
        b = np.abs(b) % 20
    (expected,) = run_node(op_type, [a, b], attributes, opset=28 if op_type != "PRelu" else 16)
    for second in (b, a):  # also with input 1 the very array the output shares
        if op_type == "PRelu" and second is a:
            continue
        (separate,) = run_node(
            op_type, [a, second], attributes, opset=28 if op_type != "PRelu" else 16
        )
        shared = run_in_place(
            op_type, [a, second], attributes, opset=28 if op_type != "PRelu" else 16
        )
        np.testing.assert_array_equal(shared, separate)
    assert expected.shape == a.shape


def test_in_place_variadic_with_input_0_repeated() -> None:
    a = np.array([1.0, 2.0], np.float32)
    b = np.array([10.0, 20.0], np.float32)
    definition = optable.resolve("", "Sum", 13)
    assert definition is not None
    node = NodeInfo("n", "Sum", "", 13, ("a", "b", "a"), ("out",), {})
    shared = a.copy()
    definition.factory(node).run(
        RunContext(KernelPaths.get("numpy"), False), [shared, b, shared], [shared]
    )
    np.testing.assert_array_equal(shared, [12.0, 24.0])


@pytest.mark.parametrize(
    "op_type", ["Abs", "Exp", "Erf", "Relu", "Sigmoid", "Gelu", "Clip", "Selu", "Shrink"]
)
def test_in_place_unary_runs_agree_with_separate_outputs(op_type: str) -> None:
    x = rng_values((5, 6), np.float32, 17)
    opset = 20
    (separate,) = run_node(op_type, [x], opset=opset)
    np.testing.assert_array_equal(run_in_place(op_type, [x], opset=opset), separate)


def test_in_place_where_takes_the_memory_of_x() -> None:
    condition = rng_values((3, 4), np.bool_, 18)
    x, y = rng_values((3, 4), np.float32, 19), rng_values((4,), np.float32, 20)
    shared = run_in_place("Where", [condition, x, y], opset=16)
    np.testing.assert_array_equal(shared, np.where(condition, x, y))


# --- cast -----------------------------------------------------------------------------------------


def test_cast_between_tensor_layer_types_uses_the_reference_rules() -> None:
    x = np.array([1.5, -1.5, 3e9, -3e9, np.nan, np.inf, 65520.0, 1e-8], dtype=np.float64)
    (to_int,) = run_node("Cast", [x], {"to": TensorProto.INT32}, opset=13)
    np.testing.assert_array_equal(to_int, [1, -1, 2**31 - 1, -(2**31), 0, 2**31 - 1, 65520, 0])
    (to_half,) = run_node("Cast", [x], {"to": TensorProto.FLOAT16}, opset=13)
    np.testing.assert_array_equal(
        to_half, np.array([1.5, -1.5, np.inf, -np.inf, np.nan, np.inf, np.inf, 0], np.float16)
    )
    # float64 rounds to the 16-bit floats by way of float32, as onnxruntime does (NumPy and the
    # onnx reference round once: 1.000977 here).
    twice = np.array([1 + 2**-11 + 2**-40])
    assert run_node("Cast", [twice], {"to": TensorProto.FLOAT16}, opset=13)[0] == 1.0
    assert ort_run("Cast", [twice], {"to": TensorProto.FLOAT16}, opset=13) == 1.0
    big = np.array([2**62 + 2**38 + 1], dtype=np.int64)  # rounds once, up, to float32
    (single,) = run_node("Cast", [big], {"to": TensorProto.FLOAT}, opset=13)
    assert single[0] == np.float32(2**62 + 2**39)


def test_cast_opset_1_names_the_type() -> None:
    (ours,) = run_node("Cast", [np.array([1.7, -2.0], np.float32)], {"to": "int64"}, opset=1)
    assert ours.dtype == np.int64
    assert ours.tolist() == [1, -2]


def test_cast_to_float8_saturates_unless_told_not_to() -> None:
    x = np.array([1000.0, -np.inf, np.nan, 0.3], np.float32)
    to = TensorProto.FLOAT8E4M3FN
    (saturated,) = run_node("Cast", [x], {"to": to}, opset=19)
    assert saturated.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(saturated.astype(np.float32)[:2], [448.0, -448.0])
    (raw,) = run_node("Cast", [x], {"to": to, "saturate": 0}, opset=19)
    assert np.isnan(raw.astype(np.float32)[:3]).all()


def test_cast_to_float8e8m0_rounds_the_exponent() -> None:
    x = np.array([1.0, 1.1, 3.0, np.inf, np.nan], np.float32)
    e8m0 = TensorProto.FLOAT8E8M0
    (up,) = run_node("Cast", [x], {"to": e8m0}, opset=24)
    np.testing.assert_array_equal(up.astype(np.float32)[:3], [1.0, 2.0, 4.0])
    assert up.view(np.uint8)[3] == 0xFE and np.isnan(up.astype(np.float32)[4])
    (down,) = run_node("Cast", [x], {"to": e8m0, "round_mode": "down"}, opset=24)
    np.testing.assert_array_equal(down.astype(np.float32)[:3], [1.0, 1.0, 2.0])


def test_castlike_takes_the_type_of_its_second_input() -> None:
    x = np.array([1.25, 300.0], np.float32)
    (ours,) = run_node("CastLike", [x, np.zeros(0, np.uint8)], opset=15)
    assert ours.dtype == np.uint8
    assert ours.tolist() == [1, 255]
