"""The bound Conv of fast mode (numpy_cpu/held_conv.py: buffers and views held by a run state)
against onnxruntime and bit for bit against the same computation made per run (a checked
session), over ranks, strides, pads, dilations, auto_pad, batches and a fused activation; and
its held buffers never shared by two sessions or by concurrent runs of one."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel.backends.numpy_cpu.channels_last_conv import ChannelsLastConv
from onemodel.backends.numpy_cpu.held_conv import HeldConv, held_conv
from onemodel.graph.run_state import RunState

F = TensorProto.FLOAT


def _conv_model(x_shape, w, bias, activation=None, **attrs) -> bytes:
    inputs = ["x", "w"] + ([] if bias is None else ["b"])
    nodes = [helper.make_node("Conv", inputs, ["y" if activation is None else "c"], **attrs)]
    if activation is not None:
        nodes.append(helper.make_node(activation, ["c"], ["y"]))
    weights = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        weights.append(numpy_helper.from_array(bias, "b"))
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", F, x_shape)],
        [helper.make_tensor_value_info("y", F, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _bound_convs(session: onemodel.Session) -> int:
    """Steps whose call is the one ConvOp.bind makes."""
    return sum(
        "ConvOp.bind" in getattr(step.call, "__qualname__", "")
        for plan in session.plans()
        for step in RunState(plan).steps
    )


def _onnxruntime(model: bytes, x: np.ndarray) -> np.ndarray:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    run = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return run.run(None, {"x": x})[0]


# name: x shape, (M, kernel), attributes. Every one takes the held path (the test checks it).
CASES = {
    "1d k3 pad": ((2, 5, 17), (6, (3,)), {"pads": [1, 2]}),
    "1d k3/2 dilated": ((1, 4, 20), (3, (3,)), {"strides": [2], "dilations": [2]}),
    "1x1 pointwise b3": ((3, 6, 5, 7), (4, (1, 1)), {}),
    "1x1/2": ((2, 4, 9, 9), (5, (1, 1)), {"strides": [2, 2]}),
    "3x3 pad b2": ((2, 3, 10, 9), (8, (3, 3)), {"pads": [1, 1, 1, 1]}),
    "3x3 asymmetric pads": ((1, 4, 8, 8), (6, (3, 3)), {"pads": [0, 2, 1, 0]}),
    "3x3/2 pad": ((2, 16, 12, 11), (16, (3, 3)), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "3x3 strides 2,3": ((1, 4, 11, 13), (6, (3, 3)), {"strides": [2, 3], "pads": [1, 0, 2, 1]}),
    "3x3/2 dilated 2": ((1, 3, 15, 15), (4, (3, 3)), {"strides": [2, 2], "dilations": [2, 2]}),
    "3x3/3 dilated 2": ((1, 3, 16, 16), (4, (3, 3)), {"strides": [3, 3], "dilations": [2, 2]}),
    "7x7/2 stem": ((1, 3, 40, 40), (8, (7, 7)), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    "4x4/2 even": ((2, 3, 14, 14), (5, (4, 4)), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "5x5 dilated 3": ((1, 4, 16, 16), (6, (5, 5)), {"dilations": [3, 3], "pads": [4] * 4}),
    "same upper /2": ((1, 3, 9, 10), (4, (3, 3)), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same lower": ((2, 3, 9, 10), (4, (4, 4)), {"auto_pad": "SAME_LOWER"}),
    "valid, x past the windows": ((1, 3, 10, 10), (4, (3, 3)), {"strides": [2, 2]}),
    # Small planes, runs of kw·C >= 48 values: channels last (numpy_cpu/channels_last_conv.py).
    "channels last 3x3 b2": ((2, 32, 8, 8), (32, (3, 3)), {"pads": [1, 1, 1, 1]}),
    "channels last 3x2 strides 2,1 dilated rows": (
        (1, 24, 9, 11),
        (8, (3, 2)),
        {"strides": [2, 1], "dilations": [2, 1], "pads": [1, 0, 2, 1]},
    ),
    "channels last, x past the windows": ((1, 16, 12, 12), (4, (3, 3)), {"strides": [3, 3]}),
    "channels last in image chunks b5": ((5, 64, 16, 16), (8, (3, 3)), {"pads": [1] * 4}),
    # Windows that tile x (kernel = strides, no pads): one transposing copy of the patches.
    "patches 4x4/4 b2": ((2, 3, 16, 16), (6, (4, 4)), {"strides": [4, 4]}),
    "patches 2x3/(2,3), x past them": ((1, 5, 9, 11), (4, (2, 3)), {"strides": [2, 3]}),
    "patches 16x16/16": ((1, 3, 32, 48), (8, (16, 16)), {"strides": [16, 16]}),
    "3d": ((1, 2, 5, 6, 7), (3, (3, 3, 3)), {"pads": [1] * 6}),
    "3d/2": ((2, 2, 7, 6, 5), (3, (2, 2, 2)), {"strides": [2, 2, 2]}),
    "wide rows in bands": ((1, 4, 130, 130), (8, (3, 3)), {"pads": [1] * 4}),
    "3x3/2 rows past the grid": ((2, 4, 70, 69), (5, (3, 3)), {"strides": [2, 2], "pads": [1] * 4}),
    "3x3/2, 16 channels: wide rows on the grid": (
        (1, 16, 80, 70),
        (8, (3, 3)),
        {"strides": [2, 2], "pads": [1] * 4},
    ),
    "3x3, 16 channels: wide rows on the grid": ((2, 16, 8, 45), (6, (3, 3)), {"pads": [1] * 4}),
    "3x3/2 dilated 2, rows past the grid": (
        (1, 3, 72, 72),
        (4, (3, 3)),
        {"strides": [2, 2], "dilations": [2, 2], "pads": [0, 1, 1, 0]},
    ),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_held_conv_matches_onnxruntime_and_the_per_run_path(name: str, bias: bool) -> None:
    x_shape, (out_channels, kernel), attrs = CASES[name]
    rng = np.random.default_rng(len(name))
    w = rng.standard_normal((out_channels, x_shape[1], *kernel)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32) if bias else None
    model = _conv_model(x_shape, w, b, **attrs)
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    per_run = onemodel.Session.load(
        model, onemodel.SessionOptions(intra_op_threads=1, checked=True)
    )
    for run in range(3):  # later runs reuse the held buffers: the border must still be zero
        x = rng.standard_normal(x_shape).astype(np.float32)
        (mine,) = fast.run(None, {"x": x})
        (reference,) = per_run.run(None, {"x": x})
        np.testing.assert_array_equal(mine, reference)  # one computation, held or made per run
        np.testing.assert_allclose(mine, _onnxruntime(model, x), rtol=1e-4, atol=1e-4)
        if run == 0:  # the plan exists from the first run on
            assert _bound_convs(fast) == 1


@pytest.mark.parametrize("name", [name for name in CASES if name.startswith("patches")])
def test_tiling_windows_are_copied_as_patches(name: str) -> None:
    """The patch cases take `HeldConv`'s patches (no phase buffer, no tap copies) and match
    the direct sum in float64 over x's patches."""
    x_shape, (out_channels, kernel), _ = CASES[name]
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((out_channels, x_shape[1], *kernel)).astype(np.float32)
    (kh, kw), (h, w_) = kernel, x_shape[2:]
    out_shape = (x_shape[0], out_channels, h // kh, w_ // kw)
    held = held_conv(x_shape, np.float32, w.reshape(out_channels, -1), out_shape, kernel,
                     kernel, (0, 0), (1, 1))  # fmt: skip
    assert isinstance(held, HeldConv) and held.patches is not None and not held.interior
    out = np.full(out_shape, np.nan, np.float32)
    assert held(x, out, None)
    cropped = x[:, :, : out_shape[2] * kh, : out_shape[3] * kw].astype(np.float64)
    patches = cropped.reshape(*x_shape[:2], out_shape[2], kh, out_shape[3], kw)
    expected = np.einsum("ncyixj,mcij->nmyx", patches, w.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_a_fused_relu_follows_the_held_conv() -> None:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    model = _conv_model((2, 8, 9, 9), w, b, "Relu", strides=[2, 2], pads=[1, 1, 1, 1])
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    (mine,) = fast.run(None, {"x": x})
    assert mine.min() == 0.0
    np.testing.assert_allclose(mine, _onnxruntime(model, x), rtol=1e-4, atol=1e-4)


def _stem_session() -> tuple[bytes, onemodel.Session]:
    w = np.random.default_rng(3).standard_normal((8, 3, 7, 7)).astype(np.float32)
    model = _conv_model((2, 3, 32, 32), w, None, strides=[2, 2], pads=[3, 3, 3, 3])
    return model, onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))


def test_two_sessions_hold_separate_buffers() -> None:
    model, first = _stem_session()
    _, second = _stem_session()
    rng = np.random.default_rng(11)
    for _ in range(3):
        a, b = (rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2))
        (from_a,) = first.run(None, {"x": a})
        (from_b,) = second.run(None, {"x": b})
        np.testing.assert_allclose(from_a, _onnxruntime(model, a), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(from_b, _onnxruntime(model, b), rtol=1e-4, atol=1e-4)


def test_concurrent_runs_of_one_session_do_not_share_held_buffers() -> None:
    model, session = _stem_session()
    rng = np.random.default_rng(5)
    feeds = [rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    expected = [_onnxruntime(model, x) for x in feeds]
    failures: list[str] = []
    start = threading.Barrier(len(feeds))

    def work(index: int) -> None:
        start.wait()
        for _ in range(30):
            (result,) = session.run(None, {"x": feeds[index]})
            if not np.allclose(result, expected[index], rtol=1e-4, atol=1e-4):
                failures.append(f"thread {index}")
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(feeds))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize(
    ("x_shape", "out_shape", "kernel", "form"),
    [
        ((2, 32, 8, 8), (2, 32, 8, 8), (3, 3), ChannelsLastConv),  # runs of 96 values
        ((1, 64, 14, 14), (1, 64, 14, 14), (3, 3), ChannelsLastConv),
        ((2, 3, 32, 32), (2, 16, 32, 32), (3, 3), HeldConv),  # runs of 9 values
        ((1, 16, 32, 32), (1, 16, 32, 32), (3, 3), HeldConv),  # large planes
        ((1, 64, 8, 8), (1, 16, 8, 8), (1, 1), HeldConv),  # x is its own columns
        ((1, 80, 28, 28), (1, 160, 14, 14), (2, 2), HeldConv),  # tiling windows, 2x2/2
    ],
)
def test_small_planes_with_long_channel_runs_are_held_channels_last(
    x_shape: tuple, out_shape: tuple, kernel: tuple, form: type
) -> None:
    w = np.ones((out_shape[1], x_shape[1] * kernel[0] * kernel[1]), np.float32)
    pads = ((kernel[0] - 1) // 2, (kernel[1] - 1) // 2)
    strides = (x_shape[2] // out_shape[2],) * 2
    held = held_conv(x_shape, np.float32, w, out_shape, kernel, strides, pads, (1, 1))
    assert type(held) is form


def test_channels_last_writes_an_output_of_any_layout() -> None:
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 32 * 9)).astype(np.float32)
    x = rng.standard_normal((1, 32, 6, 6)).astype(np.float32)
    geometry = ((3, 3), (1, 1), (1, 1), (1, 1))
    held = held_conv(x.shape, np.float32, w, (1, 4, 6, 6), *geometry)
    expected = np.empty((1, 4, 6, 6), np.float32)
    assert held(x, expected, None)
    out = np.full((1, 4, 6, 12), 7.0, np.float32)
    assert held(x, out[..., ::2], None)
    np.testing.assert_array_equal(out[..., ::2], expected)
    assert (out[..., 1::2] == 7.0).all()


def test_an_output_that_is_not_one_contiguous_array_is_refused_untouched() -> None:
    w = np.ones((4, 3 * 9), np.float32)
    held = held_conv((1, 3, 6, 6), np.float32, w, (1, 4, 6, 6), (3, 3), (1, 1), (1, 1), (1, 1))
    out = np.full((1, 4, 6, 12), 7.0, np.float32)
    assert held(np.ones((1, 3, 6, 6), np.float32), out[..., ::2], None) is False
    assert (out == 7.0).all()


@pytest.mark.parametrize("dtype", [np.float16, np.int32])
def test_types_without_blas_are_not_held(dtype: type) -> None:
    w = np.ones((4, 27), dtype)
    assert held_conv((1, 3, 6, 6), dtype, w, (1, 4, 6, 6), (3, 3), (1, 1), (1, 1), (1, 1)) is None
