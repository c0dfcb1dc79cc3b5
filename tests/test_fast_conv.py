"""The fast convolution paths (1×1 GEMM, banded im2col, grouped, depthwise, dilated, strided,
padded, float16) against a direct float64 sum over kernel taps written here, and the prepared
weights of a Conv whose W is constant or computed."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from operator_harness import onnxruntime_run

import onemodel.backends.convolution as convolution
from onemodel import Session
from onemodel.backends import KernelPaths
from onemodel.backends.numpy_cpu import channels_last_taps, depthwise, shifted_columns
from onemodel.graph.importer import model_from_proto


def direct_conv(x, w, strides, pads, dilations, group):
    """Cross-correlation by definition: a float64 sum over kernel taps of shifted input windows."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    rank = x.ndim - 2
    padded = np.pad(x64, [(0, 0), (0, 0), *zip(pads[:rank], pads[rank:], strict=True)])
    out_spatial = [
        (n - ((k - 1) * d + 1)) // s + 1
        for n, k, d, s in zip(padded.shape[2:], w.shape[2:], dilations, strides, strict=True)
    ]
    m, per_group = w.shape[0], x.shape[1] // group
    out = np.zeros((x.shape[0], m, *out_spatial))
    outputs_per_group = m // group
    for taps in itertools.product(*(range(k) for k in w.shape[2:])):
        window = padded[
            (
                ...,
                *(
                    slice(t * d, t * d + (o - 1) * s + 1, s)
                    for t, d, o, s in zip(taps, dilations, out_spatial, strides, strict=True)
                ),
            )
        ]
        for g in range(group):
            inputs = window[:, g * per_group : (g + 1) * per_group]
            weights = w64[
                (slice(g * outputs_per_group, (g + 1) * outputs_per_group), slice(None), *taps)
            ]
            out[:, g * outputs_per_group : (g + 1) * outputs_per_group] += np.einsum(
                "nc...,mc->nm...", inputs, weights
            )
    return out


CASES = {
    # name: x shape, w shape, strides, pads (begin + end), dilations, group
    "1x1": ((2, 8, 5, 6), (6, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "1x1 grouped": ((1, 8, 5, 5), (4, 4, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2),
    "1x1 strided": ((1, 4, 7, 7), (3, 4, 1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    "1x1 padded": ((1, 4, 5, 5), (3, 4, 1, 1), (1, 1), (1, 0, 0, 1), (1, 1), 1),
    "3x3 padded": ((2, 3, 9, 8), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "strided": ((1, 4, 11, 10), (6, 4, 3, 3), (2, 3), (1, 0, 2, 1), (1, 1), 1),
    "dilated": ((1, 3, 12, 12), (4, 3, 3, 2), (1, 1), (2, 1, 2, 1), (2, 3), 1),
    "grouped": ((2, 6, 7, 7), (9, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),
    "grouped strided dilated": ((1, 8, 13, 12), (6, 4, 3, 3), (2, 1), (1, 2, 2, 1), (2, 3), 2),
    "grouped 16 a group strided": (
        (2, 32, 14, 14),
        (32, 16, 3, 3),
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        2,
    ),
    "grouped 2 a group": ((1, 64, 10, 9), (64, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 32),
    "depthwise": ((1, 5, 8, 8), (5, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 5),
    "depthwise strided": ((2, 4, 9, 9), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),
    # Depthwise tap by tap (numpy_cpu/depthwise.py): phases of strides 2 and 3, dilation,
    # uneven pads, pads wider than the kernel's reach, a 5×5 kernel, an unpadded one.
    "depthwise phases": ((2, 3, 11, 10), (3, 1, 3, 3), (3, 2), (0, 2, 1, 1), (1, 1), 3),
    "depthwise dilated": ((1, 4, 12, 13), (4, 1, 3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 4),
    "depthwise strided dilated": ((1, 2, 15, 15), (2, 1, 3, 3), (2, 2), (2, 1, 2, 1), (2, 3), 2),
    "depthwise wide pads": ((1, 3, 5, 5), (3, 1, 3, 3), (1, 1), (3, 0, 1, 4), (1, 1), 3),
    "depthwise 5x5": ((1, 6, 14, 14), (6, 1, 5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 6),
    "depthwise unpadded": ((1, 6, 9, 7), (6, 1, 3, 2), (1, 1), (0, 0, 0, 0), (1, 1), 6),
    # Gathered columns: a 7×7 filter on a batch of 8, channel multipliers (M = k·C), one
    # with stride 2 and dilation 3 (tap rows 0, 2, 4 in phase 0 step by 3 grid rows), one
    # input channel feeding four filters.
    "depthwise 7x7 batch 8": ((8, 3, 12, 11), (3, 1, 7, 7), (1, 1), (3, 3, 3, 3), (1, 1), 3),
    "depthwise multiplier": ((2, 3, 9, 9), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),
    "depthwise multiplier strided": ((1, 2, 13, 11), (6, 1, 5, 5), (2, 2), (2, 1, 3, 2), (2, 1), 2),
    "depthwise stride 2 dilation 3": (
        (1, 2, 20, 19),
        (2, 1, 5, 3),
        (2, 2),
        (4, 3, 2, 1),
        (3, 3),
        2,
    ),
    "depthwise 1x1": ((2, 5, 6, 7), (5, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 5),
    "depthwise 1x1/2 padded": ((1, 4, 7, 6), (4, 1, 1, 1), (2, 2), (1, 0, 0, 1), (1, 1), 4),
    "depthwise one channel": ((2, 1, 10, 9), (4, 1, 5, 3), (1, 1), (2, 1, 2, 1), (1, 1), 1),
    "1-D": ((2, 3, 17), (4, 3, 5), (2,), (2, 1), (1,), 1),
    "3-D": ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), (1, 2, 1), (1, 0, 1, 1, 1, 0), (1, 1, 2), 1),
    "windows past the input": ((1, 2, 6, 6), (3, 2, 2, 2), (3, 3), (0, 0, 0, 0), (1, 1), 1),
    # Fewer output than input channels at stride 1: the shifted-GEMM path.
    "shifted": ((2, 8, 9, 7), (3, 8, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    "shifted dilated": ((1, 6, 10, 9), (2, 6, 3, 2), (1, 1), (2, 0, 1, 1), (2, 3), 1),
    "shifted unpadded": ((1, 4, 5, 6), (2, 4, 2, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
}
SHIFTED = [name for name in CASES if name.startswith("shifted")]


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("backend", ["numpy", "numpy-reference"])
def test_conv_arrays_match_the_direct_sum(name: str, backend: str) -> None:
    x_shape, w_shape, strides, pads, dilations, group = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    expected = direct_conv(x, w, strides, pads, dilations, group)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    kernels = KernelPaths.get(backend)
    rank = x.ndim - 2
    kernels.conv_arrays(x, w, out, strides, pads[:rank], dilations, group)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    again = np.full_like(out, np.nan)
    prepared = kernels.conv_weights(w, group)
    kernels.conv_arrays(x, w, again, strides, pads[:rank], dilations, group, weights=prepared)
    np.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("name", SHIFTED)
def test_narrowing_stride_one_convolutions_take_the_shifted_path(name, monkeypatch) -> None:
    x_shape, w_shape, strides, pads, dilations, group = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    kernels = KernelPaths.get("numpy")

    def refuse(*args: object) -> None:
        raise AssertionError("im2col ran")

    monkeypatch.setattr(type(kernels), "_im2col_conv", refuse)
    out = np.full(direct_conv(x, w, strides, pads, dilations, group).shape, np.nan, np.float32)
    kernels.conv_arrays(x, w, out, strides, pads[:2], dilations, group)
    assert np.isfinite(out).all()


def test_bands_of_output_rows_cover_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 13, 11)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    kernels = KernelPaths.get("numpy")
    monkeypatch.setattr(convolution, "_BAND_ELEMENTS", 4 * 9 * 11 * 3)  # three rows a band
    banded = np.full((2, 6, 13, 11), np.nan, dtype=np.float32)
    kernels.conv_arrays(x, w, banded, (1, 1), (1, 1), (1, 1), 1)
    expected = direct_conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(banded, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["1x1", "3x3 padded", "depthwise"])
def test_float16_is_computed_in_float32_and_rounded_once(name: str) -> None:
    x_shape, w_shape, strides, pads, dilations, group = CASES[name]
    rng = np.random.default_rng(2)
    x = rng.standard_normal(x_shape).astype(np.float16)
    w = rng.standard_normal(w_shape).astype(np.float16)
    expected = direct_conv(x, w, strides, pads, dilations, group)
    out = np.empty(expected.shape, dtype=np.float16)
    rank = x.ndim - 2
    KernelPaths.get("numpy").conv_arrays(x, w, out, strides, pads[:rank], dilations, group)
    # float32 sums of float16 products (exact in float32) differ from the float64 sum by far
    # less than half a float16 ulp, so the result is the float64 sum rounded once, but for ties.
    np.testing.assert_allclose(out, expected.astype(np.float16), rtol=2e-3, atol=2e-3)


def _conv_model(weight_as_input: bool) -> Session:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])]
    initializers = [numpy_helper.from_array(b, "b")]
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]))
    else:
        initializers.append(numpy_helper.from_array(w, "w"))
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    graph = helper.make_graph([node], "conv", inputs, [y], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 13)])
    return Session(model_from_proto(model)), w, b


def test_a_constant_weight_is_prepared_once_and_a_computed_one_every_run() -> None:
    rng = np.random.default_rng(4)
    constant, w, b = _conv_model(weight_as_input=False)
    computed, _, _ = _conv_model(weight_as_input=True)
    for _ in range(2):
        x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
        other = rng.standard_normal(w.shape).astype(np.float32)
        bias = b.reshape(-1, 1, 1)
        (y,) = constant.run(None, {"x": x})
        np.testing.assert_allclose(y, direct_conv(x, w, (1, 1), (1,) * 4, (1, 1), 1) + bias, 1e-5)
        (y,) = computed.run(None, {"x": x, "w": other})
        expected = direct_conv(x, other, (1, 1), (1,) * 4, (1, 1), 1) + bias
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def direct_conv_transpose(x, w, strides, group):
    """Each input element scatters its weights: out[o·s + k] += w[c, m, k]·x[c, o], float64."""
    batch, channels, *spatial = x.shape
    per_group, kernel = w.shape[1], w.shape[2:]
    size = [(n - 1) * s + k for n, s, k in zip(spatial, strides, kernel, strict=True)]
    out = np.zeros((batch, per_group * group, *size))
    inputs_per_group = channels // group
    for c in range(channels):
        g = c // inputs_per_group
        for position in itertools.product(*(range(n) for n in spatial)):
            for taps in itertools.product(*(range(k) for k in kernel)):
                target = tuple(p * s + t for p, s, t in zip(position, strides, taps, strict=True))
                value = x[(slice(None), c, *position)].astype(np.float64)
                weights = w[(c, slice(None), *taps)].astype(np.float64)
                out[(slice(None), slice(g * per_group, (g + 1) * per_group), *target)] += (
                    value[:, None] * weights[None, :]
                )
    return out


@pytest.mark.parametrize(
    "x_shape, w_shape, strides, group",
    [
        ((2, 4, 5, 6), (4, 3, 2, 2), (2, 2), 1),  # the 2×2/2 upsampling: one copy per offset
        ((1, 4, 3, 4), (4, 2, 3, 2), (3, 2), 2),  # kernel = stride, grouped, uneven
        ((1, 3, 7), (3, 2, 4), (4,), 1),  # 1-D
        ((1, 2, 4, 4), (2, 3, 3, 3), (2, 2), 1),  # overlapping offsets: the strided adds
    ],
)
def test_conv_transpose_arrays_match_the_direct_scatter(x_shape, w_shape, strides, group) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    expected = direct_conv_transpose(x, w, strides, group)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    rank = len(strides)
    KernelPaths.get("numpy").conv_transpose_arrays(
        x, w, out, strides, (0,) * rank, (1,) * rank, group
    )
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


BIAS_CASES = {
    # name: x shape, w shape, strides, pads (begin), dilations, group — one per fast path
    "1x1 GEMM": ((2, 8, 5, 6), (6, 8, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    "im2col": ((2, 3, 9, 8), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    "shifted": ((1, 8, 9, 7), (3, 8, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    "grouped": ((1, 6, 7, 7), (9, 2, 3, 3), (1, 1), (1, 1), (1, 1), 3),
    "depthwise": ((2, 5, 8, 8), (5, 1, 3, 3), (2, 2), (1, 1), (1, 1), 5),
    "winograd": ((1, 32, 16, 16), (40, 32, 3, 3), (1, 1), (1, 1), (1, 1), 1),
}


@pytest.mark.parametrize("name", BIAS_CASES)
def test_the_bias_is_added_by_every_fast_path_as_one_rounded_add(name: str) -> None:
    """conv_arrays(…, bias=b) gives the bits of conv_arrays then a separate add of b."""
    x_shape, w_shape, strides, pads, dilations, group = BIAS_CASES[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    kernels = KernelPaths.get("numpy")
    prepared = kernels.conv_weights(w, group)
    shape = direct_conv(x, w, strides, pads * 2, dilations, group).shape
    plain, biased = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    kernels.conv_arrays(x, w, plain, strides, pads, dilations, group, weights=prepared)
    kernels.conv_arrays(x, w, biased, strides, pads, dilations, group, weights=prepared, bias=b)
    np.testing.assert_array_equal(biased, plain + b.reshape(-1, 1, 1))


@pytest.mark.parametrize("w_shape", [(64, 32, 3, 3), (6, 4, 1, 1)])
def test_a_bank_of_identical_filters_gives_identical_channels(w_shape) -> None:
    """All-equal weights (ConstantOfShape, the ONNX suite's light models) are one filter
    computed once: every output channel has the same bits, plus its own bias."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, w_shape[1], 12, 12)).astype(np.float32)
    w = np.full(w_shape, 0.02, np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    pad = w_shape[2] // 2
    kernels = KernelPaths.get("numpy")
    prepared = kernels.conv_weights(w, 1)
    assert prepared.copies == w_shape[0]
    out = np.full((2, w_shape[0], 12, 12), np.nan, np.float32)
    kernels.conv_arrays(x, w, out, (1, 1), (pad, pad), (1, 1), 1, weights=prepared)
    assert (out == out[:, :1]).all()
    expected = direct_conv(x, w, (1, 1), (pad,) * 4, (1, 1), 1)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    kernels.conv_arrays(x, w, out, (1, 1), (pad, pad), (1, 1), 1, weights=prepared, bias=b)
    np.testing.assert_allclose(out, expected + b.reshape(-1, 1, 1), rtol=1e-5, atol=1e-5)


GROUPED = [name for name in CASES if name.startswith(("depthwise", "grouped"))]


@pytest.mark.parametrize("name", GROUPED)
@pytest.mark.parametrize(
    "layout", ["_gathered_columns", "_channel_planes", "channels last", "shifted columns"]
)
@pytest.mark.parametrize("chunk", [1 << 20, 1], ids=["one block", "a channel a block"])
def test_every_depthwise_layout_matches_the_direct_sum(name, layout, chunk, monkeypatch):
    """Each NumPy layout on every case (the tap-by-tap and held ones take one output channel per
    input channel, the shifted columns only phases that fit the output planes), in one block of
    images or channels and in blocks of one."""

    def forced(geometry, strides, one_to_one):
        if not layout.startswith("_"):  # a held form; the cases it does not take as they are
            return chosen(geometry, strides, one_to_one)
        return getattr(depthwise, layout if one_to_one else "_gathered_columns")

    chosen = depthwise.tap_layout
    monkeypatch.setattr(depthwise, "COMPILED", False)  # its own tests: test_compiled_taps.py
    planes = 1 << 30 if layout == "channels last" else -1  # held_grouped's plane limits
    monkeypatch.setattr(depthwise, "CHANNELS_LAST_PIXELS", planes)
    monkeypatch.setattr(depthwise, "WIDE_KERNEL_PIXELS", planes)
    if layout.startswith("_"):
        monkeypatch.setattr(depthwise, "fits_output_planes", lambda *shapes: False)
    monkeypatch.setattr(depthwise, "tap_layout", forced)
    monkeypatch.setattr(depthwise, "_CHUNK_ELEMENTS", chunk)
    monkeypatch.setattr(channels_last_taps, "_CHUNK_ELEMENTS", chunk)
    monkeypatch.setattr(depthwise, "_BLOCK_ELEMENTS", chunk)
    monkeypatch.setattr(shifted_columns, "_BLOCK_ELEMENTS", chunk)
    x_shape, w_shape, strides, pads, dilations, group = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    expected = direct_conv(x, w, strides, pads, dilations, group) + b.reshape(-1, 1, 1)
    out = np.full(expected.shape, np.nan, dtype=np.float32)
    KernelPaths.get("numpy").conv_arrays(x, w, out, strides, pads[:2], dilations, group, bias=b)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _grouped_model(
    channels: int, group: int, outputs: int, kernel: int, stride: int, activation: str
):
    """Conv (constant W and B, auto_pad SAME_UPPER) followed by `activation`, the form the
    graph fuses (SiLU as Sigmoid then Mul)."""
    rng = np.random.default_rng(kernel + stride)
    w = rng.standard_normal((outputs, channels // group, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32)
    conv = helper.make_node(
        "Conv", ["x", "w", "b"], ["c"], group=group, strides=[stride] * 2, auto_pad="SAME_UPPER"
    )
    nodes = {
        "Relu": [helper.make_node("Relu", ["c"], ["y"])],
        "Relu6": [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        "HardSwish": [helper.make_node("HardSwish", ["c"], ["y"])],
        "SiLU": [
            helper.make_node("Sigmoid", ["c"], ["s"]),
            helper.make_node("Mul", ["c", "s"], ["y"]),
        ],
    }[activation]
    constants = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    constants += [numpy_helper.from_array(np.float32(v), n) for n, v in (("lo", 0), ("hi", 6))]
    graph = helper.make_graph(
        [conv, *nodes],
        "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, channels, None, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        constants,
    )
    return helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 17)])


@pytest.mark.parametrize(
    "channels, group, outputs, kernel, stride, batch, activation",
    [
        (24, 24, 24, 3, 1, 1, "Relu6"),
        (24, 24, 24, 3, 2, 8, "HardSwish"),
        (40, 40, 40, 5, 1, 1, "SiLU"),
        (40, 40, 40, 5, 2, 1, "Relu"),
        (16, 16, 32, 7, 1, 8, "HardSwish"),  # channel multiplier 2
        (16, 16, 48, 3, 2, 1, "Relu6"),  # channel multiplier 3
        (64, 32, 64, 3, 1, 1, "Relu"),  # ResNeXt's 2 channels a group
        (32, 4, 48, 5, 2, 8, "SiLU"),
    ],
)
def test_grouped_conv_with_a_fused_activation_matches_onnxruntime(
    channels, group, outputs, kernel, stride, batch, activation
) -> None:
    model = _grouped_model(channels, group, outputs, kernel, stride, activation)
    x = np.random.default_rng(5).standard_normal((batch, channels, 17, 15)).astype(np.float32)
    (expected,) = onnxruntime_run(model, {"x": x})
    (y,) = Session(model_from_proto(model)).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["depthwise multiplier", "depthwise one channel", "grouped", "grouped strided dilated"]
)
def test_grouped_convolutions_gather_columns_rather_than_im2col(name, monkeypatch) -> None:
    """group > 1 (a channel multiplier: M = k·C filters over group = C) gathers each block of
    groups' columns once for all its filters (numpy_cpu/depthwise.py)."""
    x_shape, w_shape, strides, pads, dilations, group = CASES[name]
    rng = np.random.default_rng(8)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    kernels = KernelPaths.get("numpy")

    def refuse(*args: object) -> None:
        raise AssertionError("im2col ran")

    monkeypatch.setattr(type(kernels), "_im2col_conv", refuse)
    expected = direct_conv(x, w, strides, pads, dilations, group)
    out = np.full(expected.shape, np.nan, np.float32)
    kernels.conv_arrays(x, w, out, strides, pads[:2], dilations, group)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_groups_too_large_for_a_block_of_columns_take_the_shared_im2col(monkeypatch) -> None:
    x_shape, w_shape, strides, pads, dilations, group = CASES["grouped"]
    rng = np.random.default_rng(9)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    kernels = KernelPaths.get("numpy")
    monkeypatch.setattr(depthwise, "_BLOCK_ELEMENTS", 2 * 9 * 7 * 7 - 1)  # one group's, less 1

    def refuse(*args: object) -> None:
        raise AssertionError("columns gathered")

    monkeypatch.setattr(depthwise, "_gathered_columns", refuse)
    expected = direct_conv(x, w, strides, pads, dilations, group)
    out = np.full(expected.shape, np.nan, np.float32)
    kernels.conv_arrays(x, w, out, strides, pads[:2], dilations, group)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_depthwise_runs_from_two_threads_at_once_keep_their_own_buffers() -> None:
    """One session, two threads each running its own input many times over: every result is
    that input's own (the columns live in each run's scratch, never shared)."""
    session = Session(model_from_proto(_grouped_model(32, 32, 32, 3, 1, "Relu")))
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((2, 32, 28, 28)).astype(np.float32) for _ in range(2)]
    alone = [session.run(None, {"x": x})[0] for x in inputs]

    def repeat(index: int) -> bool:
        return all(
            np.array_equal(session.run(None, {"x": inputs[index]})[0], alone[index])
            for _ in range(20)
        )

    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(repeat, [0, 1, 0, 1]))
