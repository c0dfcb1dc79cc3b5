"""Resampling and spatial operators: resize.py (Resize, Upsample, GridSample, AffineGrid,
RoiAlign) and spatial.py (DepthToSpace, SpaceToDepth, Col2Im, MaxUnpool, CenterCropPad,
ReverseSequence, Trilu).

The ONNX backend conformance node cases of these operators run through `run_node` first; then
unit tests compare with onnxruntime where it implements the case (and with PyTorch where
onnxruntime does not), and pin down the choices where the two oracles and the reference differ.
"""

from __future__ import annotations

import itertools
from typing import Any

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from conformance_cases import case_params, node_cases, run_case
from onnx import TensorProto, helper, numpy_helper
from operator_harness import assert_matches_onnxruntime, onnxruntime_outputs, refused, run_node

import onemodel
from onemodel.errors import ErrorKind
from onemodel.graph.operators import resize
from onemodel.graph.operators.base import NeedsRunTimeValues

RESAMPLING = {"Resize", "Upsample", "GridSample", "AffineGrid", "RoiAlign"}
REARRANGING = {"DepthToSpace", "SpaceToDepth", "Col2Im", "MaxUnpool", "CenterCropPad"}
OPS = frozenset(RESAMPLING | REARRANGING | {"ReverseSequence", "Trilu"})

# Conformance cases these operators do not pass yet, each with its reason.
EXPECTED_FAILURES: dict[str, str] = {}


# --- ONNX conformance node cases ----------------------------------------------------------------

CASES = node_cases(OPS)


@pytest.mark.parametrize("name", case_params(CASES, EXPECTED_FAILURES))
def test_conformance(name: str) -> None:
    run_case(CASES[name])


def test_conformance_cases_cover_every_op() -> None:
    covered = {case.op_type for case in CASES.values()}
    assert covered == OPS


# --- helpers ------------------------------------------------------------------------------------

RNG = np.random.default_rng(20261130)


def normal(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def check_against_ort(
    op_type: str, inputs: list, attributes: dict | None = None, *, opset: int, atol: float = 1e-5
) -> np.ndarray:
    (result,) = assert_matches_onnxruntime(op_type, inputs, attributes, opset=opset, atol=atol)
    return result


# --- Resize and Upsample ------------------------------------------------------------------------

X4 = normal(2, 3, 5, 7)
TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric"]


@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.45), (1, 1, 1.7, 0.8)])
@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(("mode", "exclude"), [("linear", 0), ("cubic", 0), ("cubic", 1)])
def test_resize_filters_match_onnxruntime(mode: str, exclude: int, transform: str,
                                          scales: tuple) -> None:  # fmt: skip
    attributes = dict(
        mode=mode, coordinate_transformation_mode=transform, exclude_outside=exclude,
        cubic_coeff_a=-0.5,
    )  # fmt: skip
    check_against_ort("Resize", [X4, None, f32(*scales)], attributes, opset=19, atol=1e-4)


@pytest.mark.parametrize("transform", [*TRANSFORMS, "align_corners", "tf_crop_and_resize"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_to_sizes_matches_onnxruntime(mode: str, transform: str) -> None:
    roi = f32(0, 0, 0.1, 0.2, 1, 1, 0.9, 1.1) if transform == "tf_crop_and_resize" else None
    attributes = dict(mode=mode, coordinate_transformation_mode=transform, extrapolation_value=-3.0)
    check_against_ort("Resize", [X4, roi, None, i64(2, 3, 4, 9)], attributes, opset=19, atol=1e-4)


@pytest.mark.parametrize(
    "nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
)
@pytest.mark.parametrize("transform", ["half_pixel", "asymmetric", "align_corners"])
def test_resize_nearest_modes_match_onnxruntime(nearest_mode: str, transform: str) -> None:
    attributes = dict(coordinate_transformation_mode=transform, nearest_mode=nearest_mode)
    for sizes in (i64(2, 3, 3, 10), i64(1, 3, 9, 4)):
        check_against_ort("Resize", [X4, None, None, sizes], attributes, opset=13)


def test_resize_nearest_from_sizes_is_exact_where_the_reference_rounds_wrong() -> None:
    """7 -> 9 with half_pixel maps output 4 to exactly 3.0; y / (9 / 7) lands just below, and
    floor would take 2 (as the reference does)."""
    x = np.arange(7, dtype=np.float32)
    attributes = dict(nearest_mode="floor")
    (result,) = run_node("Resize", [x, None, None, i64(9)], attributes, opset=13)
    np.testing.assert_array_equal(result, [0, 0, 1, 2, 3, 3, 4, 5, 6])


@pytest.mark.parametrize("transform", ["align_corners", "tf_crop_and_resize"])
def test_resize_fractional_output_length_follows_the_reference(transform: str) -> None:
    """With scales the reference divides by `scale * length` (2.4 here), not by the integral
    output length as onnxruntime does; the conformance data follow the reference."""
    x = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    roi = f32(0, 0, 1, 1) if transform == "tf_crop_and_resize" else None
    attributes = dict(mode="linear", coordinate_transformation_mode=transform)
    (result,) = run_node("Resize", [x, roi, f32(0.6, 0.6)], attributes, opset=13)
    np.testing.assert_allclose(result, [[1, 1 + 3 / 1.4]], rtol=1e-6)


def test_resize_pytorch_half_pixel_maps_one_output_to_zero() -> None:
    x = np.array([[1, 2, 30, 4]], dtype=np.float32)
    attributes = dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel")
    (result,) = run_node("Resize", [x, None, None, i64(1, 1)], attributes, opset=13)
    np.testing.assert_array_equal(result, [[1]])
    check_against_ort("Resize", [x, None, None, i64(1, 1)], attributes, opset=13)


@pytest.mark.parametrize("target", [(1, 1, 0.5, 0.3), (1, 1, 0.8, 1.4), i64(1, 2, 4, 3)])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_matches_onnxruntime(mode: str, target: Any) -> None:
    x = normal(1, 2, 9, 11)
    inputs = [x, None, None, target] if isinstance(target, np.ndarray) else [x, None, f32(*target)]
    check_against_ort("Resize", inputs, dict(mode=mode, antialias=1), opset=18, atol=1e-4)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_axes_and_aspect_ratio_match_onnxruntime(mode: str, policy: str) -> None:
    x = normal(1, 2, 9, 11)
    attributes = dict(mode=mode, axes=[2, 3], keep_aspect_ratio_policy=policy)
    check_against_ort("Resize", [x, None, None, i64(5, 7)], attributes, opset=18)


def test_resize_axes_may_be_negative_and_unordered() -> None:
    """onnxruntime mishandles negative axes with a keep_aspect_ratio_policy; the result equals
    the same resize with the axes written out."""
    x = normal(1, 2, 9, 11)
    sizes = i64(5, 7)
    policy = dict(keep_aspect_ratio_policy="not_smaller", mode="linear")
    (result,) = run_node("Resize", [x, None, None, sizes], dict(axes=[-1, 2], **policy), opset=19)
    (written,) = run_node("Resize", [x, None, None, i64(7, 5)], dict(axes=[2, 3], **policy),
                          opset=19)  # fmt: skip
    assert result.shape == (1, 2, 7, 9)
    np.testing.assert_array_equal(result, written)
    check_against_ort("Resize", [x, None, f32(1.5, 0.7)], dict(mode="cubic", axes=[3, 2]),
                      opset=18)  # fmt: skip


@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 1.5, 2.5), (1, 1, 0.6, 0.5)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_and_upsample_match_onnxruntime(mode: str, scales: tuple) -> None:
    """Asymmetric coordinates; nearest truncates when enlarging and rounds up when shrinking."""
    check_against_ort("Resize", [X4, f32(*scales)], dict(mode=mode), opset=10)
    if min(scales) >= 1:
        check_against_ort("Upsample", [X4, f32(*scales)], dict(mode=mode), opset=9)
        check_against_ort(
            "Upsample", [X4], dict(mode=mode, scales=[float(s) for s in scales]), opset=7
        )


def test_upsample_refuses_scales_below_one() -> None:
    refused(ErrorKind.INVALID_INPUT, "Upsample", [X4, f32(1, 1, 0.5, 2)], opset=9)
    refused(ErrorKind.INVALID_MODEL, "Upsample", [X4], dict(scales=[1, 1, 0.5, 2.0]), opset=7)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
def test_resize_integers_round_half_to_even_and_saturate(dtype: type) -> None:
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 3, 4, info.max, 0], dtype=dtype).reshape(1, 6)
    attributes = dict(mode="cubic", coordinate_transformation_mode="asymmetric")
    (result,) = run_node("Resize", [x, None, f32(1, 2)], attributes, opset=13)
    wide = x.astype(np.float64)
    (exact,) = run_node("Resize", [wide, None, f32(1, 2)], attributes, opset=13)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result, np.clip(np.rint(exact), info.min, info.max).astype(dtype))


def test_resize_int64_nearest_is_exact_and_filters_saturate() -> None:
    x = np.array([[2**62 + 1, -(2**62) - 1, 2**63 - 1]], dtype=np.int64)
    (nearest,) = run_node("Resize", [x, None, f32(1, 2)], dict(mode="nearest"), opset=13)
    np.testing.assert_array_equal(nearest, np.repeat(x, 2, axis=1))
    attributes = dict(mode="cubic", coordinate_transformation_mode="asymmetric")
    (cubic,) = run_node("Resize", [x, None, f32(1, 2)], attributes, opset=13)
    assert cubic.dtype == np.int64 and cubic.max() > 2**62


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_resize_narrow_and_wide_floats(dtype: type) -> None:
    x = normal(1, 1, 4, 5).astype(dtype)
    attributes = dict(mode="linear")
    (result,) = run_node("Resize", [x, None, f32(1, 1, 1.5, 0.6)], attributes, opset=19)
    (wide,) = run_node("Resize", [x.astype(np.float64), None, f32(1, 1, 1.5, 0.6)], attributes,
                       opset=19)  # fmt: skip
    assert result.dtype == dtype
    np.testing.assert_array_equal(
        result, wide.astype(np.float32).astype(dtype) if dtype != np.float64 else wide
    )


def test_resize_nearest_copies_booleans_and_refuses_filtering_them() -> None:
    x = np.array([[True, False, True]])
    (result,) = run_node("Resize", [x, None, None, i64(2, 6)], {}, opset=13)
    np.testing.assert_array_equal(result, np.repeat(np.repeat(x, 2, axis=0), 2, axis=1))
    refused(ErrorKind.INVALID_MODEL, "Resize", [x, None, f32(1, 2)], dict(mode="linear"), opset=13)


def test_resize_extrapolates_nearest_too() -> None:
    x = np.arange(4, dtype=np.int32).reshape(1, 4)
    attributes = dict(coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7)
    (result,) = run_node("Resize", [x, f32(0, -0.5, 1, 1.5), None, i64(1, 5)], attributes,
                         opset=13)  # fmt: skip
    np.testing.assert_array_equal(result, [[-7, 0, 1, 3, -7]])  # at -1.5, 0, 1.5, 3, 4.5


CROP = dict(coordinate_transformation_mode="tf_crop_and_resize")


@pytest.mark.parametrize(
    ("inputs", "attributes", "fragment"),
    [
        ([X4, None, f32(1, 2), None], {}, "4 scales"),
        ([X4, None, f32(1, 1, 1, 2), i64(1, 1, 1, 2)], {}, "exactly one"),
        ([X4, None, None, None], {}, "exactly one"),
        ([X4, None, f32(1, 1, 0, 2)], {}, "positive"),
        ([X4, None, None, i64(1, 1, -1, 2)], {}, "non-negative sizes"),
        ([X4, f32(0, 1), f32(1, 1, 1, 2)], CROP, "roi"),
    ],
)  # fmt: skip
def test_resize_refuses_bad_inputs(inputs: list, attributes: dict, fragment: str) -> None:
    error = refused(ErrorKind.INVALID_INPUT, "Resize", inputs, attributes, opset=13)
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("attributes", "opset"),
    [
        (dict(mode="cubic"), 10),
        (dict(mode="area"), 13),
        (dict(coordinate_transformation_mode="centre"), 13),
        (dict(nearest_mode="round"), 13),
        (dict(keep_aspect_ratio_policy="fit"), 18),
    ],
)
def test_resize_refuses_bad_attributes(attributes: dict, opset: int) -> None:
    refused(ErrorKind.INVALID_MODEL, "Resize", [X4, f32(1, 1, 1, 2)], attributes, opset=opset)


def test_resize_waits_for_sizes_known_only_at_run_time() -> None:
    with pytest.raises(NeedsRunTimeValues):
        run_node("Resize", [X4, None, None, i64(2, 3, 4, 4)], {}, opset=13,
                 known=[True, True, True, False])  # fmt: skip


# --- GridSample, AffineGrid, RoiAlign -----------------------------------------------------------

GRID_CASES = list(itertools.product(["linear", "nearest", "cubic"],
                                    ["zeros", "border", "reflection"], [0, 1]))  # fmt: skip


@pytest.mark.parametrize(("mode", "padding", "align_corners"), GRID_CASES)
def test_grid_sample_matches_onnxruntime(mode: str, padding: str, align_corners: int) -> None:
    x, grid = normal(2, 3, 5, 6), RNG.uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)
    attributes = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    check_against_ort("GridSample", [x, grid], attributes, opset=20)
    legacy = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}[mode]
    check_against_ort("GridSample", [x, grid], dict(attributes, mode=legacy), opset=16)


@pytest.mark.parametrize(("mode", "padding", "align_corners"), GRID_CASES)
def test_volumetric_grid_sample_matches_pytorch(
    mode: str, padding: str, align_corners: int
) -> None:
    """onnxruntime has no 3-D cubic; PyTorch (where the operator comes from) has no 3-D cubic
    either, so that one is checked against the 2-D result of a flat third axis."""
    torch = pytest.importorskip("torch")
    x, grid = normal(1, 2, 3, 4, 5), RNG.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    attributes = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    (result,) = run_node("GridSample", [x, grid], attributes, opset=20)
    if mode != "cubic":
        expected = torch.nn.functional.grid_sample(
            torch.from_numpy(x), torch.from_numpy(grid), mode=mode.replace("linear", "bilinear"),
            padding_mode=padding, align_corners=bool(align_corners),
        ).numpy()  # fmt: skip
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
        return
    flat = grid.copy()
    flat[..., 2] = 0  # depth 3: the middle plane exactly
    (volume,) = run_node("GridSample", [x, flat], attributes, opset=20)
    (plane,) = run_node("GridSample", [x[:, :, 1], flat[:, 0, :, :, :2]], attributes, opset=20)
    np.testing.assert_allclose(volume[:, :, 0], plane, rtol=1e-5, atol=1e-5)


def test_grid_sample_nearest_copies_integers_and_pads_with_zeros() -> None:
    x = np.arange(6, dtype=np.int64).reshape(1, 1, 2, 3) + 2**60
    grid = np.array([[[[-1, -1], [1, 1], [3, 0]]]], dtype=np.float64)
    attributes = dict(mode="nearest", align_corners=1)
    (result,) = run_node("GridSample", [x, grid], attributes, opset=20)
    np.testing.assert_array_equal(result, [[[[2**60, 5 + 2**60, 0]]]])


@pytest.mark.parametrize(("mode", "padding", "align_corners"), GRID_CASES)
@pytest.mark.parametrize("exact", [False, True])
def test_grid_sample_places_nan_coordinates_where_pytorch_clamps_them(
    mode: str, padding: str, align_corners: int, exact: bool
) -> None:
    """A NaN in the grid (paddle2onnx's GroupNorm at opset 17 writes a garbage epsilon that
    makes one) used to cast to index -2^63 and fail the run with an IndexError. It lies
    outside with zeros padding (0: PyTorch's nearest agrees, its interpolating modes give NaN)
    and at the first position otherwise, where PyTorch's clamp puts it."""
    x = np.arange(24, dtype=np.float32).reshape(2, 1, 3, 4)
    grid = np.zeros((2, 2, 2, 2), np.float32)
    grid[0, 0, 0] = np.nan
    grid[1, 1, 1] = [np.nan, -0.5]
    grid[0, 1, 0] = [0.3, -0.2]
    attributes = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    (result,) = run_node("GridSample", [x, grid], attributes, opset=20, exact=exact)
    finite = np.isfinite(grid).all(axis=-1)
    (reference,) = run_node("GridSample", [x, np.where(finite[..., None], grid, 0)], attributes,
                            opset=20, exact=exact)  # fmt: skip
    np.testing.assert_array_equal(result[:, 0][finite], reference[:, 0][finite])
    if padding == "zeros":
        assert (result[:, 0][~finite] == 0).all()
    else:
        assert result[0, 0, 0, 0] == 0.0  # both coordinates at the first position of image 0
    torch = pytest.importorskip("torch")
    if mode == "nearest" or (mode == "linear" and padding != "zeros"):
        expected = torch.nn.functional.grid_sample(
            torch.from_numpy(x), torch.from_numpy(grid), mode=mode.replace("linear", "bilinear"),
            padding_mode=padding, align_corners=bool(align_corners),
        ).numpy()  # fmt: skip
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


def test_grid_sample_refuses_a_grid_of_the_wrong_shape() -> None:
    error = refused(ErrorKind.INVALID_INPUT, "GridSample", [normal(1, 1, 4, 4), normal(1, 3, 3, 3)],
                    opset=20)  # fmt: skip
    assert "grid of shape" in str(error)


@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_matches_onnxruntime(align_corners: int) -> None:
    attributes = dict(align_corners=align_corners)
    check_against_ort("AffineGrid", [normal(2, 2, 3), i64(2, 3, 4, 5)], attributes, opset=20)
    check_against_ort("AffineGrid", [normal(2, 3, 4), i64(2, 3, 4, 5, 6)], attributes, opset=20)


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid")
def test_affine_grid_puts_a_single_position_at_the_centre_as_pytorch_does() -> None:
    torch = pytest.importorskip("torch")
    theta = normal(1, 2, 3)
    (result,) = run_node("AffineGrid", [theta, i64(1, 1, 1, 3)], dict(align_corners=1), opset=20)
    expected = torch.nn.functional.affine_grid(torch.from_numpy(theta), [1, 1, 1, 3], True)
    np.testing.assert_allclose(result, expected.numpy(), rtol=1e-6, atol=1e-6)


def test_affine_grid_keeps_double_and_refuses_mismatched_theta() -> None:
    (result,) = run_node("AffineGrid", [normal(1, 2, 3, dtype=np.float64), i64(1, 1, 2, 2)],
                         opset=20)  # fmt: skip
    assert result.dtype == np.float64 and result.shape == (1, 2, 2, 2)
    refused(ErrorKind.INVALID_INPUT, "AffineGrid", [normal(1, 2, 3), i64(1, 1, 2, 2, 2)], opset=20)


ROIS = np.array([[0, 0, 9, 9], [1.3, 2.2, 7.7, 5.1], [-2, -1, 4, 13], [5, 5, 5.5, 5.2],
                 [11, 0, 14, 3], [6, 6, 2, 2]], dtype=np.float32)  # fmt: skip


@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize(("opset", "transform"), [(10, None), (16, "half_pixel"),
                                                  (16, "output_half_pixel")])  # fmt: skip
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_matches_onnxruntime(mode: str, opset: int, transform: str | None,
                                       sampling_ratio: int) -> None:  # fmt: skip
    x = normal(2, 3, 10, 12)
    attributes = dict(mode=mode, output_height=3, output_width=4, sampling_ratio=sampling_ratio,
                      spatial_scale=0.9)  # fmt: skip
    if transform is not None:
        attributes["coordinate_transformation_mode"] = transform
    check_against_ort("RoiAlign", [x, ROIS, i64(0, 1, 1, 0, 1, 0)], attributes, opset=opset)


def test_roi_align_refuses_batch_indices_out_of_range() -> None:
    error = refused(ErrorKind.INVALID_INPUT, "RoiAlign", [normal(2, 1, 4, 4), ROIS[:2], i64(0, 2)],
                    opset=16)  # fmt: skip
    assert "batch_indices" in str(error)


# --- spatial.py ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("blocksize", "mode"), itertools.product([2, 3], ["DCR", "CRD"]))
def test_depth_to_space_and_space_to_depth_match_onnxruntime(blocksize: int, mode: str) -> None:
    x = normal(2, 2 * blocksize**2, 2, 3)
    result = check_against_ort("DepthToSpace", [x], dict(blocksize=blocksize, mode=mode),
                               opset=13)  # fmt: skip
    check_against_ort("SpaceToDepth", [result], dict(blocksize=blocksize), opset=13)
    # SpaceToDepth takes a mode from opset 28 on: it inverts DepthToSpace of the same mode.
    (back,) = run_node("SpaceToDepth", [result], dict(blocksize=blocksize, mode=mode), opset=28)
    np.testing.assert_array_equal(back, x)


def test_depth_to_space_refuses_channels_that_do_not_divide() -> None:
    refused(ErrorKind.INVALID_INPUT, "DepthToSpace", [normal(1, 6, 2, 2)], dict(blocksize=2))
    refused(ErrorKind.INVALID_INPUT, "SpaceToDepth", [normal(1, 1, 3, 2)], dict(blocksize=2))
    refused(ErrorKind.INVALID_MODEL, "DepthToSpace", [normal(1, 4, 2, 2)],
            dict(blocksize=2, mode="RCD"))  # fmt: skip


COL2IM_CASES = [
    ([5, 5], [2, 2], {}),
    ([6, 7], [3, 2], dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])),
    ([4, 5, 3], [2, 1, 2], dict(strides=[1, 2, 1], pads=[0, 1, 0, 0, 1, 1])),
]


@pytest.mark.parametrize(("image", "block", "attributes"), COL2IM_CASES)
def test_col2im_matches_onnxruntime(image: list, block: list, attributes: dict) -> None:
    rank = len(image)
    strides = attributes.get("strides", [1] * rank)
    pads = attributes.get("pads", [0] * 2 * rank)
    dilations = attributes.get("dilations", [1] * rank)
    counts = [
        (image[i] + pads[i] + pads[i + rank] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(rank)
    ]
    x = normal(2, 3 * int(np.prod(block)), int(np.prod(counts)))
    check_against_ort("Col2Im", [x, i64(*image), i64(*block)], attributes, opset=18)


def test_col2im_refuses_a_block_count_that_does_not_fit() -> None:
    error = refused(ErrorKind.INVALID_INPUT, "Col2Im", [normal(1, 4, 15), i64(5, 5), i64(2, 2)],
                    opset=18)  # fmt: skip
    assert "cannot fold" in str(error)


def test_max_unpool_inverts_max_pool_as_onnxruntime_does() -> None:
    x = normal(2, 3, 6, 6)
    values, indices = ort_pool(x)
    check_against_ort("MaxUnpool", [values, indices], dict(kernel_shape=[2, 2], strides=[2, 2]),
                      opset=11)  # fmt: skip


def ort_pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, indices = onnxruntime_outputs(
        "MaxPool", [x], dict(kernel_shape=[2, 2], strides=[2, 2]), opset=12,
        output_types=[TensorProto.FLOAT, TensorProto.INT64],
    )  # fmt: skip
    return values, indices


def test_max_unpool_places_the_unpooled_tensor_in_the_corner_of_output_shape() -> None:
    """The conformance data count the indices over the unpooled shape, not over output_shape
    (onnxruntime does the latter)."""
    x, indices = f32(1, 2).reshape(1, 1, 1, 2), i64(1, 2).reshape(1, 1, 1, 2)
    attributes = dict(kernel_shape=[1, 2], strides=[1, 2])
    (result,) = run_node("MaxUnpool", [x, indices, i64(1, 1, 2, 5)], attributes, opset=11)
    np.testing.assert_array_equal(result, [[[[0, 1, 2, 0, 0], [0, 0, 0, 0, 0]]]])


def test_max_unpool_refuses_indices_out_of_range_and_small_output_shapes() -> None:
    x, attributes = f32(1, 2).reshape(1, 1, 1, 2), dict(kernel_shape=[1, 2], strides=[1, 2])
    error = refused(ErrorKind.INVALID_INPUT, "MaxUnpool", [x, i64(1, 4).reshape(1, 1, 1, 2)],
                    attributes, opset=11)  # fmt: skip
    assert "[0, 4)" in str(error)
    indices, small = i64(0, 1).reshape(1, 1, 1, 2), i64(1, 1, 1, 3)
    refused(ErrorKind.INVALID_INPUT, "MaxUnpool", [x, indices, small], attributes, opset=11)


@pytest.mark.parametrize(
    ("shape", "axes"), [([2, 3, 3, 7], None), ([5, 2], [2, 3]), ([1, 6], [-1, 1]), ([2, 0], [0, 2])]
)
def test_center_crop_pad_matches_onnxruntime(shape: list, axes: list | None) -> None:
    attributes = {} if axes is None else dict(axes=axes)
    check_against_ort("CenterCropPad", [normal(2, 3, 4, 5), i64(*shape)], attributes, opset=18)


@pytest.mark.parametrize(("time_axis", "batch_axis", "lengths"), [(0, 1, (4, 0, 2)),
                                                                  (1, 0, (1, 4, 3))])  # fmt: skip
def test_reverse_sequence_matches_onnxruntime(time_axis: int, batch_axis: int,
                                              lengths: tuple) -> None:  # fmt: skip
    x = normal(4, 3, 2) if time_axis == 0 else normal(3, 4, 2)
    attributes = dict(time_axis=time_axis, batch_axis=batch_axis)
    check_against_ort("ReverseSequence", [x, i64(*lengths)], attributes, opset=10)


def test_reverse_sequence_refuses_lengths_beyond_the_time_axis() -> None:
    refused(ErrorKind.INVALID_INPUT, "ReverseSequence", [normal(4, 3), i64(1, 5, 2)], opset=10)
    refused(ErrorKind.INVALID_MODEL, "ReverseSequence", [normal(4, 3), i64(1, 2, 2)],
            dict(time_axis=1, batch_axis=1), opset=10)  # fmt: skip


@pytest.mark.parametrize(("upper", "k"), itertools.product([0, 1], [None, -2, 0, 1, 7]))
def test_trilu_matches_onnxruntime_and_numpy(upper: int, k: int | None) -> None:
    x = normal(2, 4, 5)
    inputs = [x] if k is None else [x, np.array(k, dtype=np.int64)]
    result = check_against_ort("Trilu", inputs, dict(upper=upper), opset=14)
    expected = (np.triu if upper else np.tril)(x, 0 if k is None else k)
    np.testing.assert_array_equal(result, expected)


def test_trilu_keeps_booleans_and_refuses_vectors() -> None:
    (result,) = run_node("Trilu", [np.ones((3, 3), dtype=bool)], dict(upper=0), opset=14)
    np.testing.assert_array_equal(result, np.tril(np.ones((3, 3), dtype=bool)))
    refused(ErrorKind.INVALID_INPUT, "Trilu", [normal(3)], opset=14)


@pytest.mark.parametrize(("mode", "sizes"), [("linear", (2, 3, 40, 24)), ("cubic", (2, 3, 11, 56))])
def test_a_large_bound_resize_in_blocks_keeps_the_per_run_bits(mode, sizes, monkeypatch) -> None:
    """HeldWeights cuts a step whose result is large into blocks of the axes before its own
    (here forced small, so that blocks end unevenly): the same gathers, products and sums, so
    the bits of the checked run, which weighs per run without blocks."""
    monkeypatch.setattr(resize, "_BLOCKED_ABOVE", 1 << 10)
    monkeypatch.setattr(resize, "_BLOCK_BYTES", 5 * 4 * sizes[3] * 4)  # 5 rows of a plane
    x = normal(2, 3, 8, 6)
    node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode=mode)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(sizes, np.int64), "s")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    blocked = onemodel.Session.load(model.SerializeToString())
    per_run = onemodel.Session.load(
        model.SerializeToString(), onemodel.SessionOptions(checked=True)
    )
    (mine,) = blocked.run(None, {"x": x})
    (reference,) = per_run.run(None, {"x": x})
    assert mine.tobytes() == reference.tobytes()
    theirs = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})[0]
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
