"""Fast-mode pooling, computed one spatial axis at a time, against a window-by-window loop."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

from onemodel import Session
from onemodel.graph.importer import model_from_proto

CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 1]),
    dict(kernel_shape=[2, 2, 2], strides=[1, 2, 1], pads=[1, 0, 1, 1, 1, 0]),
]


def _windows(x: np.ndarray, attrs: dict, out_spatial: tuple[int, ...]):
    """Per output position, the real input values of its window in row-major order."""
    rank = x.ndim - 2
    strides = attrs.get("strides", [1] * rank)
    dilations = attrs.get("dilations", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)[:rank]
    for position in itertools.product(*(range(o) for o in out_spatial)):
        taps = itertools.product(*(range(k) for k in attrs["kernel_shape"]))
        where = [
            tuple(
                o * s - p + t * d
                for o, s, p, t, d in zip(position, strides, pads, tap, dilations, strict=True)
            )
            for tap in taps
        ]
        real = [w for w in where if all(0 <= i < n for i, n in zip(w, x.shape[2:], strict=True))]
        yield position, np.stack([x[(..., *w)] for w in real], axis=-1)


def _session(op_type: str, attrs: dict, rank: int) -> Session:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None] * (rank + 2))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], op_type, [x], [y])
    return Session(
        model_from_proto(
            helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", 19)])
        )
    )


def _first_nan_or_max(values: np.ndarray) -> np.ndarray:
    nan = np.isnan(values)
    first = np.argmax(nan, axis=-1)
    picked = np.take_along_axis(values, first[..., None], axis=-1)[..., 0]
    return np.where(nan.any(axis=-1), picked, values.max(axis=-1, initial=-np.inf))


# Extents that are multiples of the strides with one window per phase position: the axes
# run as flat runs over their phases (`_pool_axis_phased`), border windows redone.
PHASED = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[5, 3], strides=[2, 2], pads=[2, 1, 2, 1]),
    dict(kernel_shape=[3, 3], strides=[3, 2], pads=[0, 1, 0, 1]),
    dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1]),
]
SPATIAL = {"odd": (9, 8, 7), "even": (12, 16, 6)}


@pytest.mark.parametrize(
    ("attrs", "spatial"),
    [(a, "odd") for a in CASES] + [(a, "even") for a in PHASED],
)
def test_max_and_average_pool_match_a_window_loop(attrs, spatial) -> None:
    rank = len(attrs["kernel_shape"])
    rng = np.random.default_rng(rank)
    spatial = SPATIAL[spatial][:rank]
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)
    x[0, 1, (1,) * rank] = np.nan
    x.ravel()[::17] = np.nan
    (got_max,) = _session("MaxPool", attrs, rank).run(None, {"x": x})
    (got_mean,) = _session("AveragePool", attrs, rank).run(None, {"x": x})
    expected_max = np.empty_like(got_max)
    expected_mean = np.empty_like(got_mean)
    for position, values in _windows(x, attrs, got_max.shape[2:]):
        expected_max[(..., *position)] = _first_nan_or_max(values)
        expected_mean[(..., *position)] = values.astype(np.float64).mean(axis=-1)
    np.testing.assert_array_equal(got_max, expected_max)
    np.testing.assert_allclose(got_mean, expected_mean, rtol=1e-6, atol=1e-6)


def test_average_pool_divisors_follow_the_input_shape() -> None:
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    session = _session("AveragePool", attrs, 2)
    for spatial in ((5, 5), (4, 6), (5, 5)):
        x = np.ones((1, 2, *spatial), np.float32)
        (got,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(got, np.ones_like(x))  # means of ones whatever the count
