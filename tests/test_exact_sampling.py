"""Exact mode of NonMaxSuppression, RoiAlign and DeformConv (which sample or select at
data-dependent places) and of FlexAttention (whose modifiers are subgraphs). Each gives
numpy-reference's bits on "numpy" and on the flushing checked-device stand-in (CuPy under the
gpu mark), with inputs that reach the float32 subnormal range where the operator multiplies;
NonMaxSuppression also equals a plain-Python oracle of its documented float64 IoU test
(docs/exact-mode.md).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.operator_harness import one_node_model
from tests.test_exact_operators import assert_bits, exact_run

PATHS = ["numpy", "checked-device", pytest.param("cupy", marks=pytest.mark.gpu)]


def _boxes(rng: np.random.Generator, count: int) -> np.ndarray:
    corners = rng.uniform(0, 1, (1, count, 2)).astype(np.float32)
    sizes = rng.uniform(0.05, 0.5, (1, count, 2)).astype(np.float32)
    return np.concatenate([corners, corners + sizes], axis=-1)


def _cases() -> dict[str, tuple[str, list, dict, int, int]]:
    rng = np.random.default_rng(18)

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    boxes, scores = _boxes(rng, 40), rng.uniform(0, 1, (1, 2, 40)).astype(np.float32)
    limits = [np.array([10], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
    image = normal(2, 3, 9, 9)
    rois = np.array([[0, 0, 6, 6], [1.3, 2.7, 8.2, 7.9], [4, 4, 4.5, 9]], np.float32)
    deform_offset = normal(1, 2 * 2 * 3 * 3, 6, 6, scale=0.7)
    return {
        "nms": ("NonMaxSuppression", [boxes, scores, *limits], {}, 11, TensorProto.INT64),
        "nms_center": (
            "NonMaxSuppression",
            [boxes, scores, *limits],
            {"center_point_box": 1},
            11,
            TensorProto.INT64,
        ),
        "roi_align_avg": (
            "RoiAlign",
            [image, rois, np.array([0, 1, 1], np.int64)],
            {"output_height": 3, "output_width": 2, "sampling_ratio": 0, "spatial_scale": 0.9},
            16,
            TensorProto.FLOAT,
        ),
        "roi_align_max": (
            "RoiAlign",
            [image * np.float32(1e-36), rois, np.array([1, 0, 1], np.int64)],
            {"mode": "max", "output_height": 2, "output_width": 2, "sampling_ratio": 2},
            16,
            TensorProto.FLOAT,
        ),
        "deform_conv": (
            "DeformConv",
            [
                normal(1, 4, 8, 8),
                normal(6, 2, 3, 3),
                deform_offset,
                normal(6),
                rng.uniform(0, 1, (1, 2 * 9, 6, 6)).astype(np.float32),
            ],
            {"group": 2, "offset_group": 2, "kernel_shape": [3, 3]},
            19,
            TensorProto.FLOAT,
        ),
        "deform_conv_tiny": (
            "DeformConv",
            [
                normal(1, 2, 5, 5, scale=1e-20),
                normal(3, 2, 2, 2, scale=1e-19),
                normal(1, 2 * 4, 4, 4, scale=0.4),
            ],
            {"kernel_shape": [2, 2]},
            19,
            TensorProto.FLOAT,
        ),
        "flex_attention_gqa": (
            "FlexAttention",
            [normal(1, 4, 5, 8), normal(1, 2, 7, 8), normal(1, 2, 7, 6)],
            {"scale": 0.3},
            1,
            TensorProto.FLOAT,
        ),
        "flex_attention_score_mod": (
            "FlexAttention",
            [normal(2, 2, 3, 4, scale=3.0), normal(2, 2, 6, 4), normal(2, 2, 6, 4)],
            {"score_mod": _tanh_body()},
            1,
            TensorProto.FLOAT,
        ),
    }


def _tanh_body() -> onnx.GraphProto:
    """A score_mod that soft-caps the scores: tanh(s)."""
    return helper.make_graph(
        [helper.make_node("Tanh", ["s"], ["t"])],
        "score_mod",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )


CASES = _cases()


def _run(name: str, backend: str) -> list[np.ndarray]:
    op_type, inputs, attributes, opset, output_type = CASES[name]
    domain = "ai.onnx.preview" if op_type == "FlexAttention" else ""
    model, feeds = one_node_model(
        op_type, inputs, attributes, opset=opset, domain=domain, output_types=[output_type]
    )
    if domain:  # a modifier body's nodes are of the default domain
        model.opset_import.append(helper.make_opsetid("", 23))
    return exact_run(model, feeds, backend)


@pytest.mark.parametrize("backend", PATHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_path_gives_the_reference_bits(name: str, backend: str) -> None:
    want, got = _run(name, "numpy-reference"), _run(name, backend)
    for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
        assert_bits(result, wanted, f"{name} output {index} on {backend}")


def _nms_oracle(boxes: np.ndarray, scores: np.ndarray, limit: int, iou: float, score: float):
    """Greedy NMS with the documented float64 IoU, one Python float operation at a time."""
    kept_rows = []
    for cls, row in enumerate(scores[0]):
        order = sorted((i for i in range(len(row)) if float(row[i]) > score), key=lambda i: -row[i])
        kept: list[int] = []
        for i in order:
            if len(kept) == limit:
                break
            if not any(_suppresses(boxes[0, j], boxes[0, i], iou) for j in kept):
                kept.append(i)
        kept_rows += [(0, cls, i) for i in kept]
    return np.array(kept_rows, np.int64).reshape(-1, 3)


def _suppresses(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = (map(float, a), map(float, b))
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    ex = max(min(ax1, bx1) - max(ax0, bx0), 0.0)
    ey = max(min(ay1, by1) - max(ay0, by0), 0.0)
    overlap = ex * ey
    union = (area_a + area_b) - overlap
    return overlap > 0 and area_a > 0 and area_b > 0 and union > 0 and overlap / union > threshold


def test_nms_keeps_what_the_float64_iou_oracle_keeps() -> None:
    _, (boxes, scores, limit, iou, score), _, _, _ = CASES["nms"]
    (got,) = _run("nms", "numpy-reference")
    want = _nms_oracle(boxes, scores, int(limit[0]), float(iou[0]), float(score[0]))
    assert got.shape[0] > 4 and np.array_equal(got, want)
