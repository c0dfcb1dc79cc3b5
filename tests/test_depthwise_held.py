"""The held depthwise forms (numpy_cpu/channels_last_taps.py, numpy_cpu/shifted_columns.py)
against a float64 direct sum, the rule that picks them, and a bound step's bits against an
unbound run's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel.backends import KernelPaths
from onemodel.backends.numpy_cpu import channels_last_taps, depthwise, shifted_columns
from onemodel.backends.numpy_cpu.channel_scale import ChannelScale
from onemodel.backends.numpy_cpu.channels_last_taps import ChannelsLastTaps
from onemodel.backends.numpy_cpu.shifted_columns import ShiftedColumns, fits_output_planes
from onemodel.graph.run_state import RunState

CASES = {
    # name: x shape, kernel, strides, pads (begin + end), dilations
    "3x3": ((1, 5, 9, 8), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3/2 even plane": ((1, 4, 12, 10), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "3x3/2 odd plane": ((2, 3, 11, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "5x5 batch 3": ((3, 4, 10, 10), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),
    "5x5/2": ((1, 6, 14, 14), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1)),
    "dilation 2": ((1, 3, 12, 11), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),
    "dilation 2 stride 2": ((1, 3, 13, 12), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2)),
    "asymmetric pads": ((1, 4, 9, 9), (3, 3), (1, 1), (0, 2, 2, 0), (1, 1)),
    "asymmetric strides and pads": ((2, 3, 10, 11), (3, 3), (2, 1), (1, 0, 0, 2), (1, 1)),
    "3x2 kernel": ((1, 3, 8, 9), (3, 2), (1, 1), (1, 0, 1, 1), (1, 1)),
    "1x1 plane": ((1, 4, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "2x3 plane": ((3, 5, 2, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "2x3 plane strided": ((1, 3, 2, 3), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "pads past the plane": ((1, 2, 3, 4), (3, 3), (1, 1), (3, 1, 2, 4), (1, 1)),
    "unpadded": ((1, 3, 7, 6), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1)),
}
TOLERANCE = {np.float32: 1e-5, np.float64: 1e-12}


def direct_depthwise(x, w, strides, pads, dilations):
    """Output channel m = input channel m // (M / C) correlated with filter m: a float64 sum
    over the taps of strided windows of the zero-padded input."""
    (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], strides, dilations
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    out_h = (padded.shape[2] - (kh - 1) * dh - 1) // sh + 1
    out_w = (padded.shape[3] - (kw - 1) * dw - 1) // sw + 1
    sources = padded[:, np.arange(w.shape[0]) // (w.shape[0] // x.shape[1])]
    out = np.zeros((x.shape[0], w.shape[0], out_h, out_w))
    for i, j in itertools.product(range(kh), range(kw)):
        rows = slice(i * dh, i * dh + (out_h - 1) * sh + 1, sh)
        cols = slice(j * dw, j * dw + (out_w - 1) * sw + 1, sw)
        out += sources[:, :, rows, cols] * w[None, :, 0, i, j, None, None].astype(np.float64)
    return out


def _operands(name, dtype, multiplier=1):
    x_shape, kernel, *_ = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal((x_shape[1] * multiplier, 1, *kernel)).astype(dtype)
    b = rng.standard_normal(x_shape[1] * multiplier).astype(dtype)
    return x, w, b


def _force(monkeypatch, form: str) -> None:
    """held_grouped takes the NumPy `form` wherever it applies: every plane channels last, or
    none (the compiled form, tests/test_compiled_taps.py, switched off)."""
    monkeypatch.setattr(depthwise, "COMPILED", False)
    planes = 1 << 30 if form == "channels last" else -1
    monkeypatch.setattr(depthwise, "CHANNELS_LAST_PIXELS", planes)
    monkeypatch.setattr(depthwise, "WIDE_KERNEL_PIXELS", planes)


def _conv(x, w, out, case, bias):
    _, _, strides, pads, dilations = case
    group = x.shape[1]
    KernelPaths.get("numpy").conv_arrays(x, w, out, strides, pads[:2], dilations, group, bias=bias)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("form", ["channels last", "shifted columns"])
@pytest.mark.parametrize("name", CASES)
def test_each_held_form_matches_the_direct_sum(name, form, with_bias, dtype, monkeypatch):
    """Through the fast kernels' conv_arrays with `form` forced; the shifted columns take the
    cases whose phases fit the output planes, and the rest go to the planar layouts."""
    _force(monkeypatch, form)
    monkeypatch.setattr(channels_last_taps, "_CHUNK_ELEMENTS", 1)  # one image an einsum
    monkeypatch.setattr(shifted_columns, "_BLOCK_ELEMENTS", 1)  # one channel a block
    case = CASES[name]
    x, w, b = _operands(name, dtype)
    bias = b if with_bias else None
    expected = direct_depthwise(x, w, *case[2:])
    expected += b.reshape(-1, 1, 1) if with_bias else 0
    held = depthwise.held_grouped(x.shape, w.reshape(w.shape[0], -1), expected.shape, *case[1:])
    fits = fits_output_planes(x.shape, expected.shape, *case[1:])
    kind = ChannelsLastTaps if form == "channels last" else ShiftedColumns if fits else None
    assert held is None if kind is None else isinstance(held, kind)
    out = np.full(expected.shape, np.nan, dtype)
    _conv(x, w, out, case, bias)
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("form", ["channels last", "shifted columns"])
@pytest.mark.parametrize("name", ["3x3", "3x3/2 odd plane", "5x5 batch 3"])
def test_a_non_contiguous_output_gets_the_direct_sum_and_nothing_else(name, form, monkeypatch):
    """out a channel slice of a larger array (as a Concat's input is): the held form writes it
    (channels last) or declines and a planar layout does (shifted columns); the channels
    beside it stay as they were."""
    _force(monkeypatch, form)
    case = CASES[name]
    x, w, b = _operands(name, np.float32)
    expected = direct_depthwise(x, w, *case[2:]) + b.reshape(-1, 1, 1)
    batch, channels, *plane = expected.shape
    whole = np.full((batch, channels + 2, *plane), np.nan, np.float32)
    _conv(x, w, whole[:, 1 : 1 + channels], case, b)
    np.testing.assert_allclose(whole[:, 1 : 1 + channels], expected, rtol=1e-5, atol=1e-5)
    assert np.isnan(whole[:, [0, -1]]).all()


def test_a_depthwise_1x1_filter_is_a_scale_per_channel():
    """FastViT's and MobileOne's conv_scale branches: x · w_c + b_c in one multiply and one
    add, over every s-th pixel at a stride; padded 1×1 filters keep the other paths."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    w = rng.standard_normal((6, 1, 1, 1)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    geometry = ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))
    held = depthwise.held_grouped(x.shape, w.reshape(6, 1), x.shape, *geometry)
    assert isinstance(held, ChannelScale)
    for source in (x, x.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)):  # any layout
        out = np.full(x.shape, np.nan, np.float32)
        assert held(source, out, b)
        np.testing.assert_array_equal(out, x * w.reshape(1, 6, 1, 1) + b.reshape(1, 6, 1, 1))
    strided = ((1, 1), (2, 2), (0, 0, 0, 0), (1, 1))
    held = depthwise.held_grouped(x.shape, w.reshape(6, 1), (2, 6, 3, 4), *strided)
    out = np.full((2, 6, 3, 4), np.nan, np.float32)
    assert isinstance(held, ChannelScale) and held(x, out, None)
    np.testing.assert_array_equal(out, x[..., ::2, ::2] * w.reshape(1, 6, 1, 1))
    padded = ((1, 1), (1, 1), (1, 0, 0, 0), (1, 1))
    assert depthwise.held_grouped(x.shape, w.reshape(6, 1), (2, 6, 6, 7), *padded) is None


def test_a_channel_multiplier_takes_the_grouped_shifted_columns_and_gets_the_direct_sum():
    """Two filters per input channel: C groups of one channel and two outputs, the shifted
    columns' grouped form (one matmul per block of groups), as held and unbound."""
    case = CASES["3x3"]
    x, w, b = _operands("3x3", np.float32, multiplier=2)
    expected = direct_depthwise(x, w, *case[2:]) + b.reshape(-1, 1, 1)
    taps = w.reshape(w.shape[0], -1)
    held = depthwise.held_grouped(x.shape, taps, expected.shape, *case[1:])
    assert isinstance(held, ShiftedColumns)
    out = np.full(expected.shape, np.nan, np.float32)
    assert held(x, out, b)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    out = np.full(expected.shape, np.nan, np.float32)
    _conv(x, w, out, case, b)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("x_shape", "kernel", "stride", "form"),
    [
        ((1, 960, 7, 7), 3, 1, ChannelsLastTaps),
        ((1, 1152, 7, 7), 5, 1, ChannelsLastTaps),
        ((1, 240, 28, 28), 5, 1, ChannelsLastTaps),
        ((1, 192, 28, 28), 3, 1, ShiftedColumns),
        ((1, 576, 14, 14), 3, 2, ChannelsLastTaps),
        ((1, 240, 28, 28), 3, 2, ChannelsLastTaps),
        ((1, 144, 56, 56), 3, 1, ShiftedColumns),
        ((1, 32, 112, 112), 3, 1, ShiftedColumns),
        ((1, 96, 112, 112), 3, 2, ShiftedColumns),
        ((1, 144, 56, 56), 5, 2, ChannelsLastTaps),
        ((1, 96, 56, 56), 7, 1, ChannelsLastTaps),
        ((1, 32, 224, 224), 5, 1, ShiftedColumns),
    ],
)
def test_the_held_form_follows_the_plane_size_rule(x_shape, kernel, stride, form, monkeypatch):
    """MobileNet's and EfficientNet's layers without numba: channels last up to 256 output
    pixels a plane (1024 for a 5×5 kernel at unit strides), the shifted columns above."""
    monkeypatch.setattr(depthwise, "COMPILED", False)
    pad = kernel // 2
    out_side = (x_shape[2] + 2 * pad - kernel) // stride + 1
    taps = np.zeros((x_shape[1], kernel * kernel), np.float32)
    out_shape = (1, x_shape[1], out_side, out_side)
    window = ((kernel,) * 2, (stride,) * 2, (pad,) * 2, (1, 1))
    assert isinstance(depthwise.held_grouped(x_shape, taps, out_shape, *window), form)


def _is_bound(call: object) -> bool:
    """Whether a run state's call for a step was made by an operator's `bind`."""
    name = getattr(call, "__qualname__", "")
    return "bind" in name and name.endswith("<locals>.call")


def _depthwise_model(
    channels: int, side: int, kernel: int, stride: int
) -> tuple[bytes, np.ndarray, np.ndarray]:
    """Conv (group = channels, constant W and B) then Clip to [0, 6], as MobileNetV2 has it;
    with W and B."""
    rng = np.random.default_rng(side + kernel + stride)
    w = rng.standard_normal((channels, 1, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    pads = [kernel // 2] * 4
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["c"], group=channels, strides=[stride] * 2, pads=pads
    )
    clip = helper.make_node("Clip", ["c", "lo", "hi"], ["y"])
    constants = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    constants += [numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", 0), ("hi", 6))]
    graph = helper.make_graph(
        [conv, clip],
        "depthwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, channels, side, side])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        constants,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), w, b


@pytest.mark.parametrize(
    ("channels", "side", "kernel", "stride"),
    [(16, 7, 3, 1), (8, 12, 5, 2), (4, 40, 3, 1), (4, 42, 3, 2), (3, 36, 5, 1)],
)
def test_a_bound_depthwise_step_has_the_unbound_bits(channels, side, kernel, stride):
    """A fast session binds the step to its held form; a checked session (which never binds)
    computes the same form over its scratch: the same bits, and the direct sum's values."""
    model, w, b = _depthwise_model(channels, side, kernel, stride)
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    unbound = onemodel.Session.load(
        model, onemodel.SessionOptions(intra_op_threads=1, checked=True)
    )
    x = np.random.default_rng(side).standard_normal((2, channels, side, side)).astype(np.float32)
    (mine,), (reference,) = fast.run(None, {"x": x}), unbound.run(None, {"x": x})
    (plan,) = fast.plans()
    assert [_is_bound(step.call) for step in RunState(plan).steps] == [True]
    assert mine.tobytes() == reference.tobytes()
    expected = direct_depthwise(x, w, (stride,) * 2, [kernel // 2] * 4, (1, 1))
    expected = np.clip(expected + b.reshape(-1, 1, 1), 0, 6)
    np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5)
