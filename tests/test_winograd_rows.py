"""Row Winograd F(m, r) for stride-1 1-D convolutions (numpy_cpu/winograd_rows.py): its
transforms are exact (checked against the correlation's definition in rational arithmetic),
and its float32 results lie within 2e-5 of the largest output of the float64 direct sum
(measured: about 4e-6) for pads, batches, several bands and a strided output; the fast
backend takes it only where it applies, and a Conv1d model agrees with onnxruntime."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from operator_harness import onnxruntime_run

from onemodel import Session
from onemodel.backends.numpy_cpu import NumpyKernels, winograd_rows
from tests.test_fast_conv import direct_conv

BOUND = 2e-5


@pytest.mark.parametrize("kernel", winograd_rows.KERNELS)
def test_the_transforms_compute_the_correlation_exactly(kernel):
    block = winograd_rows.TILE - kernel + 1
    bt, g, at = winograd_rows.toom_cook(block, kernel, winograd_rows._POINTS)
    rng = np.random.default_rng(kernel)
    for _ in range(5):
        d = [Fraction(int(v)) for v in rng.integers(-50, 50, winograd_rows.TILE)]
        taps = [Fraction(int(v)) for v in rng.integers(-50, 50, kernel)]
        u = [sum(row[k] * taps[k] for k in range(kernel)) for row in g]
        v = [sum(row[s] * d[s] for s in range(len(d))) for row in bt]
        y = [sum(row[j] * u[j] * v[j] for j in range(len(u))) for row in at]
        assert y == [sum(d[i + k] * taps[k] for k in range(kernel)) for i in range(block)]


def test_too_few_points_are_refused():
    with pytest.raises(ValueError, match="finite points"):
        winograd_rows.toom_cook(4, 3, (0, 1, -1))


def _case(rng, batch, channels, filters, length, kernel):
    x = rng.standard_normal((batch, channels, length)).astype(np.float32)
    w = rng.standard_normal((filters, channels, kernel)) / np.sqrt(channels * kernel)
    return x, w.astype(np.float32)


@pytest.mark.parametrize(
    "batch, channels, filters, length, kernel, pads",
    [
        (1, 96, 80, 301, 3, (1, 1)),  # odd length: a cropped last tile
        (1, 80, 96, 2048, 7, (3, 3)),  # several bands of tiles (the Keras text CNN)
        (3, 80, 80, 400, 5, (2, 2)),  # images banded together
        (2, 88, 80, 300, 3, (0, 0)),  # no pads
        (1, 80, 80, 329, 5, (4, 1)),  # uneven pads
        (1, 80, 80, 390, 7, (0, 6)),  # pads at the end only
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
def test_row_winograd_matches_the_direct_sum(
    batch, channels, filters, length, kernel, pads, with_bias
):
    rng = np.random.default_rng(length + kernel)
    x, w = _case(rng, batch, channels, filters, length, kernel)
    bias = rng.standard_normal(filters).astype(np.float32) if with_bias else None
    expected = direct_conv(x, w, (1,), pads, (1,), 1)
    if bias is not None:
        expected = expected + bias[:, None]
    prepared = winograd_rows.row_winograd_filter(w, 1)
    assert prepared is not None and winograd_rows.row_winograd_fits(
        prepared, expected.shape[2], (1,)
    )
    out = np.full(expected.shape, np.nan, dtype=np.float32)

    def scratch(shape, dtype):
        return np.full(tuple(shape), np.nan, dtype=dtype)  # contents unspecified

    winograd_rows.row_winograd_conv(x, prepared, out, pads[0], scratch, bias)
    assert np.abs(out - expected).max() / np.abs(expected).max() < BOUND


def test_a_strided_output_slice_is_written_in_place():
    rng = np.random.default_rng(3)
    x, w = _case(rng, 1, 80, 80, 200, 3)
    joined = np.full((1, 200, 200), np.nan, dtype=np.float32)  # a Concat's output
    part = joined[:, 40:120]
    kernels = NumpyKernels()
    prepared = kernels.conv_weights(w, 1)
    kernels.conv_arrays(x, w, part, (1,), (1,), (1,), 1, weights=prepared)
    expected = direct_conv(x, w, (1,), (1, 1), (1,), 1)
    assert np.abs(part - expected).max() / np.abs(expected).max() < BOUND
    assert np.isnan(joined[:, :40]).all() and np.isnan(joined[:, 120:]).all()


def test_the_fast_backend_prepares_it_only_where_it_applies():
    rng = np.random.default_rng(0)
    kernels = NumpyKernels()
    wide = rng.standard_normal((128, 128, 7)).astype(np.float32)
    assert kernels.conv_weights(wide, 1).winograd.block == 2
    for w, group in [
        (rng.standard_normal((64, 64, 3)).astype(np.float32), 1),  # too few channels
        (rng.standard_normal((128, 128, 9)).astype(np.float32), 1),  # 9 taps
        (rng.standard_normal((128, 64, 3)).astype(np.float32), 2),  # grouped
        (rng.standard_normal((128, 128, 3)), 1),  # float64
    ]:
        assert isinstance(kernels.conv_weights(w, group), np.ndarray)
    prepared = winograd_rows.row_winograd_filter(wide, 1)
    assert winograd_rows.row_winograd_fits(prepared, 400, (1,))
    assert not winograd_rows.row_winograd_fits(prepared, 40, (1,))  # 20 tiles
    assert not winograd_rows.row_winograd_fits(prepared, 400, (2,))  # dilated
    small = winograd_rows.row_winograd_filter(wide[:80, :80], 1)
    assert not winograd_rows.row_winograd_fits(small, 200, (1,))  # 1.3M products


@pytest.mark.parametrize("strides, dilations", [((1,), (1,)), ((2,), (1,)), ((1,), (2,))])
def test_a_conv1d_model_agrees_with_onnxruntime(strides, dilations):
    rng = np.random.default_rng(5)
    x, w = _case(rng, 2, 96, 128, 500, 5)
    b = rng.standard_normal(128).astype(np.float32)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], pads=[2, 2], strides=strides, dilations=dilations
    )
    graph = helper.make_graph(
        [node],
        "conv1d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ours = Session.load(model.SerializeToString()).run(None, {"x": x})[0]
    theirs = onnxruntime_run(model, {"x": x})[0]
    assert np.abs(ours - theirs).max() / np.abs(theirs).max() < BOUND
