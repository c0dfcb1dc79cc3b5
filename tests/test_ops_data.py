"""Data-movement and value-making operators: views, Transpose, Concat/Split, Slice, the Gather and
Scatter family, Expand/Tile, Shape/Size, the constant makers and Pad.

The conformance test runs every single-node ONNX backend case of these operators through
`run_node`; the unit tests cover what the cases do not (old opsets, edge bounds, errors),
checked against onnxruntime where it has the case.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import onnx
import pytest
from conformance_cases import case_params, node_cases, run_case
from operator_harness import assert_same, one_node_model, onnxruntime_run, run_node

from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.errors import ErrorKind, SessionError
from onemodel.graph.operators.base import NeedsRunTimeValues

OPS = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND",
    "Expand", "Tile", "Shape", "Size", "Constant", "ConstantOfShape", "Range", "EyeLike",
    "OneHot", "Pad",
})  # fmt: skip

EXPECTED_FAILURES = {
    # Identity of a sequence / an optional: the runtime holds tensors only (for now).
    "test_identity_sequence",
    "test_identity_opt",
}


# --- ONNX backend conformance cases ------------------------------------------------------------

CASES = node_cases(OPS)


def _assert_same(actual: np.ndarray, expected: np.ndarray, label: str) -> None:
    assert_same(actual, expected, rtol=1e-3, atol=1e-7, label=label)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance_case(name: str, backend: str) -> None:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    case = CASES[name]
    if backend == "cupy" and any(
        isinstance(x, np.ndarray) and x.dtype == ml_dtypes.bfloat16
        for x in [*case.inputs, *case.outputs]
    ):
        pytest.skip("the harness moves arrays with xp.asarray, and CuPy has no bfloat16")
    run_case(case, backend=backend)


def test_conformance_cases_cover_every_op() -> None:
    covered = {case.op_type for case in CASES.values()}
    assert covered == OPS


# --- onnxruntime as the oracle -----------------------------------------------------------------


def ort_run(op_type, inputs, attributes=None, *, opset=17, outputs=1) -> list[np.ndarray]:
    """One node through onnxruntime; None inputs are absent optional inputs."""
    model, feeds = one_node_model(op_type, inputs, attributes, opset=opset, outputs=outputs)
    model = onnx.shape_inference.infer_shapes(model)  # the output types ONNX defines
    return onnxruntime_run(model, feeds)


def check_against_ort(op_type, inputs, attributes=None, *, opset=17, outputs=1, exact=True) -> None:
    """Same types and shapes as onnxruntime, and the same values (within tolerance if not
    `exact`)."""
    ours = run_node(op_type, inputs, attributes, opset=opset, outputs=outputs)
    theirs = ort_run(op_type, inputs, attributes, opset=opset, outputs=outputs)
    for actual, expected in zip(ours, theirs, strict=True):
        _assert_same(actual, expected, op_type)
        if exact:
            np.testing.assert_array_equal(actual, expected)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


@contextlib.contextmanager
def bad_input(fragment: str) -> Iterator[pytest.ExceptionInfo[SessionError]]:
    """Expect an INVALID_INPUT SessionError whose message holds `fragment`."""
    with pytest.raises(SessionError, match=fragment) as info:
        yield info
    assert info.value.kind is ErrorKind.INVALID_INPUT


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


# --- Views -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "allowzero"),
    [(i64(4, 0, -1), 0), (i64(0, 0, 0), 1), (i64(-1), 0), (i64(3, 2, 4), 0), (i64(6, -1), 0)],
)
def test_reshape_matches_onnxruntime(shape, allowzero) -> None:
    data = np.zeros((2, 3, 0), np.float32) if allowzero else X
    if allowzero:
        shape = i64(0, 3, 2)
    check_against_ort("Reshape", [data, shape], {"allowzero": allowzero}, opset=14)


def test_reshape_copies_zero_extents_before_opset_14_and_takes_an_attribute_before_5() -> None:
    (out,) = run_node("Reshape", [X, i64(0, -1)], {"allowzero": 1}, opset=13)
    assert out.shape == (2, 12)
    (out,) = run_node("Reshape", [X], {"shape": [4, -1]}, opset=4)
    assert out.shape == (4, 6)


@pytest.mark.parametrize(
    ("shape", "fragment"),
    [(i64(5, -1), "cannot fill"), (i64(-1, -1), "more than one"), (i64(-2, 12), "negative"),
     (i64(7), "do not fill"), (i64(1, 1, 1, 0), "no input extent")],
)  # fmt: skip
def test_reshape_refuses_bad_shapes(shape, fragment) -> None:
    with bad_input(fragment) as info:
        run_node("Reshape", [X, shape])
    assert info.value.value == "in1" and "[2, 3, 4]" in str(info.value)


def test_reshape_waits_for_a_shape_computed_at_run_time() -> None:
    with pytest.raises(NeedsRunTimeValues):
        run_node("Reshape", [X, i64(-1)], known=[True, False])


def test_reshape_refuses_zero_and_minus_one_with_allowzero() -> None:
    with bad_input("cannot both"):
        run_node("Reshape", [X, i64(0, -1)], {"allowzero": 1}, opset=14)


def test_flatten_axes_and_their_range() -> None:
    assert run_node("Flatten", [X], {"axis": 0})[0].shape == (1, 24)
    assert run_node("Flatten", [X], {"axis": -1})[0].shape == (6, 4)
    assert run_node("Flatten", [X], {"axis": 3})[0].shape == (24, 1)
    with bad_input("out of range"):
        run_node("Flatten", [X], {"axis": -4})
    with bad_input(r"out of range \[0, 3\]"):
        run_node("Flatten", [X], {"axis": -1}, opset=9)


def test_squeeze_and_unsqueeze_take_axes_as_attribute_before_13_and_input_after() -> None:
    data = np.zeros((1, 3, 1), np.float32)
    assert run_node("Squeeze", [data], opset=13)[0].shape == (3,)
    assert run_node("Squeeze", [data, i64(-1)], opset=13)[0].shape == (1, 3)
    assert run_node("Squeeze", [data], {"axes": [0]}, opset=11)[0].shape == (3, 1)
    assert run_node("Unsqueeze", [data, i64(0, -1)], opset=13)[0].shape == (1, 1, 3, 1, 1)
    assert run_node("Unsqueeze", [data], {"axes": [1]}, opset=1)[0].shape == (1, 1, 3, 1)
    check_against_ort("Unsqueeze", [X, i64(4, 0)], opset=13)


def test_squeeze_and_unsqueeze_refuse_bad_axes() -> None:
    with bad_input("extent 3, not 1"):
        run_node("Squeeze", [np.zeros((1, 3), np.float32), i64(1)], opset=13)
    with bad_input("repeat"):
        run_node("Unsqueeze", [X, i64(0, -5)], opset=13)
    with bad_input("out of range"):
        run_node("Unsqueeze", [X, i64(5)], opset=13)
    with pytest.raises(SessionError, match="axes"):
        run_node("Unsqueeze", [X], opset=11)


def test_identity_keeps_shape_and_values() -> None:
    np.testing.assert_array_equal(run_node("Identity", [X])[0], X)


# --- Transpose, Concat, Split ------------------------------------------------------------------


def test_transpose_default_and_explicit_permutations() -> None:
    data = X.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run_node("Transpose", [data])[0], data.T)
    check_against_ort("Transpose", [X], {"perm": [1, 2, 0]})
    with bad_input("does not fit"):
        run_node("Transpose", [X], {"perm": [1, 0]})
    with pytest.raises(SessionError, match="not a permutation"):
        run_node("Transpose", [X], {"perm": [0, 0, 1]})


def test_concat_joins_and_refuses_mismatched_shapes() -> None:
    check_against_ort("Concat", [X, X[:, :1], np.zeros((2, 0, 4), np.float32)], {"axis": -2})
    (out,) = run_node("Concat", [X, X], opset=1)  # axis 1 by default
    assert out.shape == (2, 6, 4)
    with bad_input("other axes"):
        run_node("Concat", [X, X[:1]], {"axis": 1})


def test_concat_skips_empty_inputs_beside_full_ones_as_onnxruntime_does() -> None:
    """onnxruntime checks no shape of an empty input when another has elements (its Concat
    after GitHub issue 8020); a valid model's empty inputs are empty along the axis anyway."""
    for empty in (np.zeros((0,), np.float32), np.zeros((2, 0, 5), np.float32)):
        (out,) = run_node("Concat", [X, empty, X[:, :1]], {"axis": 1})
        np.testing.assert_array_equal(out, np.concatenate([X, X[:, :1]], axis=1))
    (out,) = run_node("Concat", [np.zeros((0, 3), np.float32), X[0]], {"axis": 0})
    np.testing.assert_array_equal(out, X[0])
    with bad_input("other axes"):  # nothing to go by when every input is empty
        run_node("Concat", [np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32)],
                 {"axis": 0})  # fmt: skip


@pytest.mark.parametrize(
    ("opset", "inputs", "attributes", "outputs"),
    [
        (13, [X, i64(1, 0, 2)], {"axis": 1}, 3),
        (18, [X], {"axis": -2, "num_outputs": 2}, 2),
        (18, [np.arange(7, dtype=np.int32)], {"num_outputs": 4}, 4),
        (11, [X], {"axis": 2, "split": [3, 1]}, 2),
        (11, [X], {"axis": 1}, 3),
    ],
)
def test_split_matches_onnxruntime(opset, inputs, attributes, outputs) -> None:
    check_against_ort("Split", inputs, attributes, opset=opset, outputs=outputs)


def test_split_num_outputs_may_leave_an_empty_last_chunk() -> None:
    """As onnx's reference and onnxruntime 1.32 do (1.30 refused it)."""
    outs = run_node("Split", [np.arange(4)], {"num_outputs": 3}, opset=18, outputs=3)
    assert [o.shape for o in outs] == [(2,), (2,), (0,)]


def test_split_refuses_sizes_that_do_not_fit() -> None:
    with bad_input("summing to"):
        run_node("Split", [X, i64(1, 1)], {"axis": 1}, opset=13, outputs=2)
    with bad_input("equal parts"):
        run_node("Split", [X], {"axis": 1}, opset=13, outputs=2)
    with bad_input("chunks"):
        run_node("Split", [np.zeros(5, np.float32)], {"num_outputs": 4}, opset=18, outputs=4)


# --- Slice -------------------------------------------------------------------------------------

INT_MAX, INT_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        (i64(INT_MAX), i64(INT_MIN), i64(1), i64(-1)),
        (i64(-1, 0), i64(INT_MIN, INT_MAX), i64(2, 0), i64(-2, 3)),
        (i64(5, -100), i64(-100, 100), None, i64(-1, 1)),
        (i64(1, 1), i64(1, 3), i64(-1, 0), None),
        (i64(0), i64(-1), None, None),
        (i64(-5), i64(-1), i64(1), i64(-1)),
    ],
)
def test_slice_bounds_match_onnxruntime(starts, ends, axes, steps) -> None:
    check_against_ort("Slice", [X, starts, ends, axes, steps], opset=13)


def test_slice_takes_attributes_before_opset_10() -> None:
    (out,) = run_node(
        "Slice", [X], {"starts": [1, -2], "ends": [1000, -1], "axes": [0, 2]}, opset=9
    )
    np.testing.assert_array_equal(out, X[1:, :, -2:-1])


def test_slice_refuses_zero_steps_and_mismatched_lengths() -> None:
    with bad_input("contain 0"):
        run_node("Slice", [X, i64(0), i64(1), i64(0), i64(0)], opset=13)
    with bad_input("differ in length"):
        run_node("Slice", [X, i64(0, 1), i64(1)], opset=13)


def test_slice_reads_its_bounds_again_at_run_time() -> None:
    (out,) = run_node("Slice", [X, i64(1), i64(3), i64(1)], opset=13, known=[True] * 4)
    np.testing.assert_array_equal(out, X[:, 1:3])


# --- Gather and Scatter ------------------------------------------------------------------------


def test_gather_matches_onnxruntime_with_negative_indices() -> None:
    check_against_ort("Gather", [X, np.array([[-1, 0], [1, -2]], np.int32)], {"axis": 1})
    check_against_ort("Gather", [X, np.array(-1, np.int64)], {"axis": -1})


@pytest.mark.parametrize(
    ("op_type", "inputs", "attributes"),
    [
        ("Gather", [X, i64(0, 3)], {"axis": 1}),
        ("Gather", [X, i64(-4)], {"axis": 1}),
        ("GatherElements", [X, np.full((2, 3, 4), 2, np.int64)], {"axis": 0}),
        ("GatherND", [X, i64(1, 3)], {}),
        ("ScatterElements", [X, np.full((1, 1, 1), 9, np.int64), X[:1, :1, :1]], {"axis": 2}),
        ("ScatterND", [X, np.array([[0], [-3]], np.int64), X[:2]], {}),
    ],
)
def test_out_of_range_indices_are_input_errors_naming_the_index(op_type, inputs, attributes):
    with bad_input(r"index -?\d+ is out of range") as info:
        run_node(op_type, inputs, attributes, opset=18)
    assert info.value.value == "in1"


def test_gather_elements_and_gather_nd_match_onnxruntime() -> None:
    indices = np.array([[[1, 0, -1, 2]], [[0, 0, 2, -3]]], np.int64)
    check_against_ort("GatherElements", [X, indices], {"axis": 1})
    check_against_ort("GatherND", [X, np.array([[1, -1], [0, 2]], np.int64)])
    check_against_ort("GatherND", [X, np.array([[[2]], [[0]]], np.int64)], {"batch_dims": 1})
    check_against_ort("GatherND", [X, np.zeros((2, 0, 2), np.int64)], {"batch_dims": 1})


def test_gather_family_refuses_bad_shapes() -> None:
    with bad_input("one rank"):
        run_node("GatherElements", [X, i64(0)])
    with bad_input("do not address"):
        run_node("GatherND", [X, np.zeros((1, 4), np.int64)])
    with bad_input("batch axes"):
        run_node("GatherND", [X, np.zeros((3, 1), np.int64)], {"batch_dims": 1})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters_match_onnxruntime(reduction) -> None:
    rng = np.random.default_rng(1)
    updates = rng.standard_normal((2, 3, 2)).astype(np.float32)
    indices = np.array([[[0, -1]] * 3, [[1, 2]] * 3], np.int64)
    attributes = {"axis": -1, "reduction": reduction}
    check_against_ort("ScatterElements", [X, indices, updates], attributes, opset=18)
    tuples = np.array([[1, 0], [0, -1], [1, 0]], np.int64)
    rows = rng.standard_normal((3, 4)).astype(np.float32)
    if reduction == "none":
        tuples = tuples[:2]
        rows = rows[:2]
    check_against_ort("ScatterND", [X, tuples, rows], {"reduction": reduction}, opset=18)


def test_scatter_reductions_follow_their_opsets() -> None:
    with pytest.raises(SessionError, match="reduction 'max'"):
        run_node("ScatterND", [X, i64(0).reshape(1, 1), X[:1]], {"reduction": "max"}, opset=16)
    (out,) = run_node("Scatter", [X, np.zeros((1, 1, 1), np.int64), X[:1, :1, :1] + 100], opset=9)
    assert out[0, 0, 0] == 100


# --- Expand and Tile ---------------------------------------------------------------------------


def test_expand_broadcasts_both_ways() -> None:
    check_against_ort("Expand", [np.arange(3, dtype=np.int8).reshape(3, 1), i64(2, 1, 4)])
    check_against_ort("Expand", [X, i64(3, 1)[1:]])
    check_against_ort("Expand", [np.zeros((1, 3), np.float32), i64(0, 1)])
    with bad_input("cannot broadcast"):
        run_node("Expand", [X, i64(2, 1)])
    with bad_input("cannot broadcast"):
        run_node("Expand", [X, i64(-1, 1)])


def test_tile_repeats_and_refuses_bad_repeats() -> None:
    check_against_ort("Tile", [X, i64(2, 1, 3)])
    check_against_ort("Tile", [np.zeros((0, 2), np.float32), i64(3, 0)])
    with bad_input("non-negative"):
        run_node("Tile", [X, i64(1, -1, 1)])
    with bad_input("per axis"):
        run_node("Tile", [X, i64(2)])


# --- Shape and Size ----------------------------------------------------------------------------


def test_shape_and_size_are_known_without_the_values() -> None:
    (shape,) = run_node("Shape", [X], {"start": -2, "end": 100}, opset=15, known=[False])
    np.testing.assert_array_equal(shape, i64(3, 4))
    (shape,) = run_node("Shape", [X], {"start": -2}, opset=13)  # no slicing before 15
    np.testing.assert_array_equal(shape, i64(2, 3, 4))
    (size,) = run_node("Size", [X], known=[False])
    assert size.dtype == np.int64 and size.shape == () and size == 24


# --- Constants ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"value_float": 1.5}, np.array(1.5, np.float32)),
        ({"value_ints": [1, 2]}, i64(1, 2)),
        ({"value": np.eye(2, dtype=np.float16)}, np.eye(2, dtype=np.float16)),
        ({"sparse_value": np.zeros(3, np.int32)}, np.zeros(3, np.int32)),
    ],
)
def test_constant_attributes(attributes, expected) -> None:
    (out,) = run_node("Constant", [], attributes, opset=13)
    _assert_same(out, expected, "Constant")


@pytest.mark.parametrize(
    "attributes", [{}, {"value_string": "x"}, {"value_int": 1, "value_float": 1.0}]
)
def test_constant_refuses_strings_and_ambiguity(attributes) -> None:
    with pytest.raises(SessionError) as info:
        run_node("Constant", [], attributes, opset=13)
    assert info.value.kind is ErrorKind.INVALID_MODEL


def test_constant_of_shape_and_eye_like() -> None:
    value = np.array([2.5], ml_dtypes.bfloat16)
    (out,) = run_node("ConstantOfShape", [i64(2, 3)], {"value": value})
    _assert_same(out, np.full((2, 3), 2.5, ml_dtypes.bfloat16), "ConstantOfShape")
    assert run_node("ConstantOfShape", [i64()])[0].shape == ()
    with bad_input("negative"):
        run_node("ConstantOfShape", [i64(2, -3)])
    with pytest.raises(NeedsRunTimeValues):
        run_node("ConstantOfShape", [i64(2)], known=[False])
    check_against_ort("EyeLike", [np.zeros((3, 5), np.int32)], {"k": -1, "dtype": 6})
    check_against_ort("EyeLike", [np.zeros((3, 5), np.float64)], {"k": 4})


@pytest.mark.parametrize(
    "values",
    [(1, 10, 3), (10, 1, -3), (5, 5, 1), (0.5, -1.0, -0.3), (0.0, 1.0, 0.1)],
)
def test_range_matches_onnxruntime(values) -> None:
    """onnxruntime accumulates delta; the spec's start + i * delta may differ in the last bit."""
    dtype = np.float32 if isinstance(values[0], float) else np.int32
    check_against_ort("Range", [np.array(v, dtype) for v in values], opset=11, exact=False)


def test_range_refuses_zero_delta_and_waits_for_values() -> None:
    with bad_input("no finite length"):
        run_node("Range", [np.array(v, np.int64) for v in (0, 5, 0)])
    with pytest.raises(NeedsRunTimeValues):
        run_node("Range", [np.float32(0), np.float32(5), np.float32(1)], known=[1, 0, 1])


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_one_hot_matches_onnxruntime(axis) -> None:
    indices = np.array([[0, 3, -1], [7, -4, 2]], np.float32)
    values = np.array([-1, 5], np.int64)
    check_against_ort("OneHot", [indices, np.array(4, np.int64), values], {"axis": axis}, opset=11)


# --- Pad ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes_match_onnxruntime(mode) -> None:
    pads = i64(1, 0, 2, 0, 2, 1)
    check_against_ort("Pad", [X, pads, np.array(7, np.float32)], {"mode": mode}, opset=19)


def test_pad_negative_pads_crop() -> None:
    pads = i64(0, -1, 1, -1, 2, -2)
    check_against_ort("Pad", [X, pads], opset=18)
    check_against_ort("Pad", [X, i64(-1, 2), None, i64(-1)], {"mode": "edge"}, opset=18)


def test_pad_attributes_before_opset_11() -> None:
    data = X[0]
    (out,) = run_node("Pad", [data], {"pads": [0, 1, 0, 1], "value": 9.0}, opset=2)
    np.testing.assert_array_equal(out, np.pad(data, ((0, 0), (1, 1)), constant_values=9))
    (out,) = run_node("Pad", [data], {"paddings": [1, 0, 0, 0], "mode": "edge"}, opset=1)
    np.testing.assert_array_equal(out, np.pad(data, ((1, 0), (0, 0)), mode="edge"))


def test_pad_refuses_bad_pads() -> None:
    with bad_input("needs 6 pads"):
        run_node("Pad", [X, i64(1, 1)], opset=13)
    with bad_input("cannot pad"):
        run_node("Pad", [X, i64(-3, 0, 0, 0, 0, 0)], opset=13)
    with bad_input("cannot pad"):
        run_node("Pad", [np.zeros((0, 2), np.float32), i64(1, 0, 0, 0)], {"mode": "edge"})
    with pytest.raises(SessionError, match="mode 'circular'"):
        run_node("Pad", [X, i64(0, 0, 0, 0, 0, 0)], {"mode": "circular"}, opset=19)


def test_pad_wraps_before_opset_19_as_torch_exports_circular_padding() -> None:
    """torch.onnx.export(..., opset_version=18) writes F.pad(mode="circular") as Pad mode
    wrap in an opset 18 model; onnxruntime runs it."""
    data = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    (out,) = run_node("Pad", [data, i64(0, 0, 2, 0, 0, 1)], {"mode": "wrap"}, opset=18)
    np.testing.assert_array_equal(out, np.pad(data, ((0, 0), (0, 0), (2, 1)), mode="wrap"))
