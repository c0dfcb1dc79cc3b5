"""The optimizer steps of ai.onnx.preview.training (Adagrad, Adam, Momentum) and the imaging
operators (DeformConv, ImageDecoder): onnx's conformance node cases, onnx's reference
implementation and onnxruntime as oracles, and the refusals."""

from __future__ import annotations

import importlib.util
import io
import itertools
import math
import sys

import ml_dtypes
import numpy as np
import onnx
import pytest
from conformance_cases import case_params, node_cases, run_case
from onnx.reference import ReferenceEvaluator
from operator_harness import one_node_model, onnxruntime_run, refused, run_node

from onemodel.errors import ErrorKind

TRAINING = "ai.onnx.preview.training"
RNG = np.random.default_rng(20240611)
needs_pillow = pytest.mark.skipif(
    importlib.util.find_spec("PIL") is None, reason="ImageDecoder needs Pillow"
)


def normal(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# -- the ONNX backend conformance node cases ------------------------------------------------

OP_TYPES = frozenset({"Adagrad", "Adam", "Momentum", "DeformConv", "ImageDecoder"})

# ImageDecoder's cases are encoded and decoded again by Pillow where it is installed, else
# frozen bytes.
CASES = node_cases(OP_TYPES)


@pytest.mark.parametrize(
    "name",
    case_params(
        CASES, marks=lambda name: [needs_pillow] if name.startswith("test_image_decoder") else []
    ),
)
def test_conformance(name: str) -> None:
    run_case(CASES[name])


def test_every_operator_has_conformance_cases() -> None:
    assert {case.op_type for case in CASES.values()} == OP_TYPES


# -- optimizers ------------------------------------------------------------------------------


def reference_step(op_type: str, inputs: list, attributes: dict, outputs: int) -> list:
    """onnx's reference implementation of one optimizer node."""
    model, feeds = one_node_model(
        op_type, inputs, attributes, opset=1, domain=TRAINING, outputs=outputs
    )
    return ReferenceEvaluator(model).run(None, feeds)


# op type, state tensors per optimized tensor, attributes
OPTIMIZERS = [
    ("Adagrad", 1, {"norm_coefficient": 0.01, "epsilon": 1e-5, "decay_factor": 0.1}),
    ("Adam", 2, {"norm_coefficient": 0.01, "alpha": 0.9, "beta": 0.99, "epsilon": 1e-6}),
    ("Adam", 2, {"norm_coefficient_post": 0.02}),
    ("Momentum", 1, {"norm_coefficient": 0.01, "alpha": 0.9, "beta": 0.5, "mode": "standard"}),
    ("Momentum", 1, {"norm_coefficient": 0.01, "alpha": 0.9, "beta": 0.5, "mode": "nesterov"}),
]


def optimizer_inputs(states: int, shapes: list, dtype: type, step: int) -> list[np.ndarray]:
    """R, T, then every X, every G and every state tensor (states kept positive: H ≥ 0)."""
    tensors = [[normal(*s, dtype=dtype) for s in shapes] for _ in range(2)]
    tensors += [[np.abs(normal(*s, dtype=dtype)) for s in shapes] for _ in range(states)]
    rate = np.array(0.05, dtype=np.float32)
    return [rate, np.array(step, dtype=np.int64), *itertools.chain(*tensors)]


@pytest.mark.parametrize(("op_type", "states", "attributes"), OPTIMIZERS)
@pytest.mark.parametrize("step", [0, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_optimizer_matches_reference(
    op_type: str, states: int, attributes: dict, step: int, dtype: type
) -> None:
    shapes = [(3,), (2, 4), ()]
    inputs = optimizer_inputs(states, shapes, dtype, step)
    outputs = len(shapes) * (1 + states)
    results = run_node(op_type, inputs, attributes, domain=TRAINING, opset=1, outputs=outputs)
    expected = reference_step(op_type, inputs, attributes, outputs)
    for result, wanted in zip(results, expected, strict=True):
        assert (result.dtype, result.shape) == (np.dtype(dtype), np.shape(wanted))
        np.testing.assert_allclose(result, wanted, rtol=1e-5, atol=1e-6)


def test_adam_corrects_its_moving_averages_only_after_the_first_step() -> None:
    x, g, v, h = np.array([1.0]), np.array([0.5]), np.array([0.2]), np.array([0.1])
    for step, correction in [(0, 1.0), (2, math.sqrt(1 - 0.99**2) / (1 - 0.9**2))]:
        inputs = [np.array(0.1), np.array(step, dtype=np.int64), x, g, v, h]
        (x_new, v_new, h_new) = run_node(
            "Adam", inputs, {"alpha": 0.9, "beta": 0.99}, domain=TRAINING, opset=1, outputs=3
        )
        np.testing.assert_allclose(v_new, 0.9 * v + 0.1 * g)
        np.testing.assert_allclose(h_new, 0.99 * h + 0.01 * g * g)
        step_size = 0.1 * correction * v_new / (np.sqrt(h_new) + 1e-6)
        np.testing.assert_allclose(x_new, x - step_size)


def test_optimizer_refusals() -> None:
    scalars = [np.array(0.1, dtype=np.float32), np.array(1, dtype=np.int64)]
    x = normal(3)
    options = {"domain": TRAINING, "opset": 1}
    momentum = {"alpha": 0.9, "beta": 0.1, "norm_coefficient": 0.0, "mode": "standard"}
    refused(ErrorKind.INVALID_MODEL, "Adagrad", [*scalars, x, x], outputs=2, **options)
    refused(ErrorKind.INVALID_MODEL, "Adagrad", [*scalars, x, x, x], outputs=3, **options)
    refused(
        ErrorKind.INVALID_MODEL,
        "Momentum",
        [*scalars, x, x, x],
        {**momentum, "mode": "x"},
        outputs=2,
        **options,
    )
    without_alpha = {k: v for k, v in momentum.items() if k != "alpha"}
    refused(
        ErrorKind.INVALID_MODEL,
        "Momentum",
        [*scalars, x, x, x],
        without_alpha,
        outputs=2,
        **options,
    )
    refused(
        ErrorKind.INVALID_MODEL,
        "Adagrad",
        [*scalars, x, x.astype(np.float64), x],
        outputs=2,
        **options,
    )
    refused(
        ErrorKind.INVALID_MODEL,
        "Adagrad",
        [scalars[0], np.array(1, dtype=np.int32), x, x, x],
        outputs=2,
        **options,
    )
    refused(ErrorKind.INVALID_INPUT, "Adagrad", [*scalars, x, normal(4), x], outputs=2, **options)
    refused(
        ErrorKind.INVALID_INPUT,
        "Adagrad",
        [np.zeros(2, np.float32), scalars[1], x, x, x],
        outputs=2,
        **options,
    )


# -- DeformConv ------------------------------------------------------------------------------


def onnxruntime_deform_conv(inputs: list, attributes: dict, opset: int = 19) -> np.ndarray:
    model, feeds = one_node_model(
        "DeformConv", inputs, attributes, opset=opset, output_types=onnx.TensorProto.FLOAT
    )
    return onnxruntime_run(model, feeds)[0]


def deform_conv_inputs(
    x_shape: tuple,
    out_channels: int,
    kernel: tuple,
    out_spatial: tuple,
    group: int,
    offset_group: int,
) -> list[np.ndarray]:
    batch, channels = x_shape[:2]
    taps = offset_group * math.prod(kernel)
    return [
        normal(*x_shape),
        normal(out_channels, channels // group, *kernel),
        normal(batch, taps * len(kernel), *out_spatial) * 1.5,  # often past the input's edge
        normal(out_channels),
        RNG.random((batch, taps, *out_spatial)).astype(np.float32),
    ]


@pytest.mark.parametrize(
    ("x_shape", "out_channels", "attributes", "out_spatial"),
    [
        ((1, 2, 5, 5), 3, {"kernel_shape": [3, 3]}, (3, 3)),
        ((2, 4, 6, 5), 4, {"group": 2, "offset_group": 2, "pads": [1, 0, 2, 1]}, (8, 4)),
        ((1, 4, 7, 7), 2, {"strides": [2, 1], "dilations": [1, 2], "offset_group": 4}, (3, 3)),
    ],
)
@pytest.mark.parametrize("with_optional", [False, True])
def test_deform_conv_matches_onnxruntime(
    x_shape: tuple, out_channels: int, attributes: dict, out_spatial: tuple, with_optional: bool
) -> None:
    kernel = (3, 3) if "kernel_shape" in attributes else (2, 3)
    inputs = deform_conv_inputs(
        x_shape,
        out_channels,
        kernel,
        out_spatial,
        attributes.get("group", 1),
        attributes.get("offset_group", 1),
    )
    if not with_optional:
        inputs = inputs[:3]
    (result,) = run_node("DeformConv", inputs, attributes, opset=19)
    np.testing.assert_allclose(
        result, onnxruntime_deform_conv(inputs, attributes), rtol=1e-5, atol=1e-5
    )


def naive_deform_conv(
    x: np.ndarray,
    w: np.ndarray,
    offset: np.ndarray,
    mask: np.ndarray,
    pads: tuple,
    out_spatial: tuple,
) -> np.ndarray:
    """Strides and dilations 1, one group and one offset group: sample by sample, in float64."""
    rank, kernel = x.ndim - 2, w.shape[2:]
    offset = offset.reshape(x.shape[0], *kernel, rank, *out_spatial)
    mask = mask.reshape(x.shape[0], *kernel, *out_spatial)
    y = np.zeros((x.shape[0], w.shape[0], *out_spatial))
    for n, p, k in itertools.product(
        range(x.shape[0]), np.ndindex(out_spatial), np.ndindex(kernel)
    ):
        at = np.array(p) + np.array(k) - pads + offset[(n, *k, slice(None), *p)]
        sample = np.zeros(x.shape[1])
        for corner in itertools.product((0, 1), repeat=rank):
            index = np.floor(at).astype(int) + corner
            if np.all(index >= 0) and np.all(index < x.shape[2:]):
                weight = np.prod(1 - np.abs(at - index))
                sample += weight * x[(n, slice(None), *index)]
        y[(n, slice(None), *p)] += mask[(n, *k, *p)] * (w[(slice(None), slice(None), *k)] @ sample)
    return y


@pytest.mark.parametrize(("x_shape", "kernel"), [((2, 2, 6), (3,)), ((1, 2, 3, 4, 3), (2, 2, 2))])
def test_deform_conv_in_other_ranks(x_shape: tuple, kernel: tuple) -> None:
    pads = (1,) * len(kernel)
    out_spatial = tuple(s + 2 - k + 1 for s, k in zip(x_shape[2:], kernel, strict=True))
    x, w, offset, _, mask = deform_conv_inputs(x_shape, 3, kernel, out_spatial, 1, 1)
    (result,) = run_node(
        "DeformConv", [x, w, offset, None, mask], {"pads": list(pads) * 2}, opset=22
    )
    expected = naive_deform_conv(x.astype(np.float64), w, offset, mask, pads, out_spatial)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_deform_conv_keeps_the_input_type(dtype: type) -> None:
    """Narrow floats are computed in float32 and rounded once; double in double."""
    inputs = deform_conv_inputs((1, 2, 4, 4), 2, (2, 2), (3, 3), 1, 1)
    rounded = [x.astype(dtype) for x in inputs]
    (result,) = run_node("DeformConv", rounded, opset=22)
    (wide,) = run_node("DeformConv", [x.astype(np.float32) for x in rounded], opset=22)
    assert result.dtype == dtype
    if dtype == np.float64:
        np.testing.assert_allclose(result, wide, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(result, wide.astype(dtype))


def test_deform_conv_refusals() -> None:
    x, w, offset, bias, mask = deform_conv_inputs((1, 2, 4, 4), 2, (2, 2), (3, 3), 1, 1)
    refused(ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset[:, :, :2]], opset=19)
    refused(ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset, bias, mask[:, :2]], opset=19)
    refused(ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset, bias[:1]], opset=19)
    refused(ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset], {"group": 2}, opset=19)
    refused(ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset], {"offset_group": 3}, opset=19)
    refused(
        ErrorKind.INVALID_INPUT, "DeformConv", [x, w, offset], {"kernel_shape": [3, 3]}, opset=19
    )
    refused(ErrorKind.INVALID_MODEL, "DeformConv", [x, w.astype(np.float64), offset], opset=19)
    refused(ErrorKind.INVALID_MODEL, "DeformConv", [x.astype(ml_dtypes.bfloat16)] * 3, opset=19)
    refused(ErrorKind.INVALID_MODEL, "DeformConv", [x, w, offset], {"offset_group": 0}, opset=19)


# -- ImageDecoder ----------------------------------------------------------------------------


def encoded(pixels: np.ndarray, image_format: str) -> np.ndarray:
    from PIL import Image

    with io.BytesIO() as stream:
        Image.fromarray(pixels).save(stream, format=image_format)
        return np.frombuffer(stream.getvalue(), dtype=np.uint8)


def decode(data: np.ndarray, pixel_format: str = "RGB") -> np.ndarray:
    (pixels,) = run_node("ImageDecoder", [data], {"pixel_format": pixel_format}, opset=20)
    return pixels


@needs_pillow
@pytest.mark.parametrize("image_format", ["PNG", "BMP", "TIFF", "PPM"])
def test_image_decoder_is_lossless_where_the_format_is(image_format: str) -> None:
    image = RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    data = encoded(image, image_format)
    np.testing.assert_array_equal(decode(data), image)
    np.testing.assert_array_equal(decode(data, "BGR"), image[:, :, ::-1])
    gray = decode(data, "Grayscale")
    luma = (image.astype(np.int64) * [299, 587, 114]).sum(axis=2) / 1000
    assert gray.shape == (5, 7, 1) and gray.dtype == np.uint8
    assert np.abs(gray[:, :, 0] - luma).max() <= 1


@needs_pillow
def test_image_decoder_gives_three_channels_for_other_modes() -> None:
    rgba = RNG.integers(0, 256, (4, 4, 4), dtype=np.uint8)
    np.testing.assert_array_equal(decode(encoded(rgba, "PNG")), rgba[:, :, :3])
    gray = RNG.integers(0, 256, (4, 4), dtype=np.uint8)
    np.testing.assert_array_equal(decode(encoded(gray, "PNG")), np.repeat(gray[..., None], 3, 2))
    np.testing.assert_array_equal(decode(encoded(gray, "PNG"), "Grayscale"), gray[..., None])


@needs_pillow
def test_image_decoder_decodes_onnx_frozen_images_exactly() -> None:
    """onnx's stored bytes and the pixels Pillow gave when they were made (libjpeg-turbo's
    "fancy" chroma upsampling for JPEG, as the operator specifies)."""
    from onnx.backend.test.case.node import _image_decoder_data as frozen

    for name in dir(frozen):
        if not name.startswith("image_decoder_decode_"):
            continue
        case = getattr(frozen, name)
        pixel_format = {"bgr": "BGR", "grayscale": "Grayscale"}.get(name.rsplit("_", 1)[1], "RGB")
        np.testing.assert_array_equal(decode(case.data, pixel_format), case.output, err_msg=name)


@needs_pillow
def test_image_decoder_gives_an_empty_image_for_undecodable_bytes() -> None:
    gif = encoded(RNG.integers(0, 256, (4, 4), dtype=np.uint8), "GIF")  # not a listed format
    for data in [
        np.frombuffer(b"not an image", np.uint8),
        encoded(np.zeros((4, 4, 3), np.uint8), "PNG")[:40],
        gif,
    ]:
        assert decode(data).shape == (0, 0, 3)
        assert decode(data, "Grayscale").shape == (0, 0, 1)


def test_image_decoder_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    data = np.frombuffer(b"\x89PNG\r\n\x1a\n", dtype=np.uint8)
    refused(ErrorKind.INVALID_MODEL, "ImageDecoder", [data], {"pixel_format": "RGBA"}, opset=20)
    refused(ErrorKind.INVALID_MODEL, "ImageDecoder", [data.astype(np.int8)], opset=20)
    refused(ErrorKind.INVALID_INPUT, "ImageDecoder", [data.reshape(1, -1)], opset=20)
    monkeypatch.setitem(sys.modules, "PIL", None)
    error = refused(ErrorKind.UNSUPPORTED, "ImageDecoder", [data], opset=20)
    assert "pip install onemodel[image]" in str(error)
