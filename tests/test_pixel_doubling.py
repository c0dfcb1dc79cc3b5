"""Nearest x2 upsampling by integer moves (backends/pixel_doubling.py): bits against np.repeat
(NaN payloads and -0 included) for every element width it takes, a strided output, and
Resize/Upsample models against onnxruntime, where the bound step takes it."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel.backends import pixel_doubling

RNG = np.random.default_rng(8)


def _doubled(x: np.ndarray) -> np.ndarray:
    return np.repeat(np.repeat(x, 2, axis=-2), 2, axis=-1)


def _scratch(shape, dtype):
    return np.full(shape, 0xA5, dtype)  # contents unspecified


@pytest.mark.parametrize("host", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8, np.int16])
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 4, 1, 1), (6, 8, 9)])
def test_the_moves_repeat_every_bit(host, dtype, shape):
    bits = RNG.integers(0, 256, (*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    x = bits.view(dtype).reshape(shape)  # every pattern: NaN payloads, -0, subnormals
    out = np.empty(_doubled(x).shape, dtype)
    if host:
        assert pixel_doubling.double_last_axes_host(x, out, _scratch)
    else:
        assert pixel_doubling.double_last_axes(np, x, out)
    assert out.tobytes() == _doubled(x).tobytes()


def test_a_strided_output_and_input_and_the_types_it_leaves():
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)[:, ::2]  # channel-strided
    wide = np.full((1, 10, 12, 12), np.nan, np.float32)  # a Concat's output
    assert pixel_doubling.double_last_axes_host(x, wide[:, 3:7], _scratch)  # the shared form
    np.testing.assert_array_equal(wide[:, 3:7], _doubled(x))
    assert np.isnan(wide[:, :3]).all() and np.isnan(wide[:, 7:]).all()
    wide64 = np.empty((1, 4, 12, 12))
    assert not pixel_doubling.double_last_axes(np, x.astype(np.float64), wide64)
    columns = RNG.standard_normal((1, 4, 6, 12)).astype(np.float32)[..., ::2]
    assert not pixel_doubling.double_last_axes(np, columns, np.empty((1, 4, 12, 12), np.float32))


def test_only_a_doubling_of_the_last_two_axes_is_recognised():
    rows, cols = np.arange(8) // 2, np.arange(10) // 2
    assert pixel_doubling.doubles_last_axes((1, 2, 4, 5), (1, 2, 8, 10), rows, cols)
    assert not pixel_doubling.doubles_last_axes((1, 2, 4, 5), (1, 2, 8, 10), rows, cols[::-1])
    assert not pixel_doubling.doubles_last_axes((1, 2, 4, 5), (1, 4, 8, 10), rows, cols)
    assert not pixel_doubling.doubles_last_axes((4, 5), (8, 10), rows, cols)


def _resize_model(elem: int, opset: int, **attrs) -> bytes:
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    if opset >= 11:
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest", **attrs)
    else:
        node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
    graph = helper.make_graph(
        [node], "up",
        [helper.make_tensor_value_info("x", elem, [1, 16, 20, 24])],
        [helper.make_tensor_value_info("y", elem, None)], [scales],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)])
    return model.SerializeToString()


@pytest.mark.parametrize(
    "elem, opset, attrs",
    [
        (TensorProto.FLOAT, 13, {"coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"}),
        (TensorProto.FLOAT, 13, {}),  # half_pixel, round_prefer_floor
        (TensorProto.FLOAT, 9, {}),  # Upsample
        (TensorProto.UINT8, 13, {"coordinate_transformation_mode": "asymmetric",
                                 "nearest_mode": "floor"}),
    ],
)  # fmt: skip
def test_resize_nearest_x2_takes_the_moves_and_matches_onnxruntime(monkeypatch, elem, opset, attrs):
    calls = []
    real = pixel_doubling.double_last_axes_host

    def spy(*args):
        calls.append(real(*args))
        return calls[-1]

    monkeypatch.setattr("onemodel.backends.numpy_cpu.fast.double_last_axes_host", spy)
    model = _resize_model(elem, opset, **attrs)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.uint8
    x = (RNG.standard_normal((1, 16, 20, 24)) * 50).astype(dtype)
    ours = onemodel.Session.load(model).run(None, {"x": x})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(ours, theirs[0])
    assert calls == [True]
