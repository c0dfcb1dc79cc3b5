"""The small-tensor paths of fast mode (issue 15): LayerNormalization's short rows
(backends/small_rows.py), plain Attention (backends/plain_attention.py), 2-D pooling over a
held padded input (backends/padded_pool.py) and the bound Transpose copy. Each is checked
against onnxruntime or a float64 oracle, bound runs against checked (unbound) runs bit for
bit, and outputs against aliasing across runs and threads."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onemodel
from onemodel.backends.padded_pool import PADDED_POOL_MAX
from onemodel.backends.small_rows import (
    CENTER_BY_PRODUCT,
    SMALL_ROWS_MAX,
    SmallRows,
    fits_small_rows,
)
from onemodel.graph.run_state import RunState

F = TensorProto.FLOAT
RNG = np.random.default_rng(15)


def _model(
    op: str,
    inputs: dict[str, tuple[int, np.ndarray | None]],
    attrs: dict,
    outputs: int = 1,
    opset: int = 19,
    output_types: tuple[int, ...] = (F,),
    domain: str = "",
) -> bytes:
    """One node; an input given a value is an initializer (a plan-time constant)."""
    graph_inputs, inits = [], []
    for name, (code, value) in inputs.items():
        if value is None:
            graph_inputs.append(helper.make_tensor_value_info(name, code, None))
        else:
            inits.append(numpy_helper.from_array(value, name))
    names = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(op, list(inputs), names, domain=domain, **attrs)
    graph_outputs = [
        helper.make_tensor_value_info(n, output_types[min(i, len(output_types) - 1)], None)
        for i, n in enumerate(names)
    ]
    graph = helper.make_graph([node], op, graph_inputs, graph_outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_operatorsetid("", opset)])
    return model.SerializeToString()


def _onnxruntime(model: bytes, feeds: dict) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _bound_and_unbound(model: bytes, feeds: dict) -> list[np.ndarray]:
    """The fast session's (bound) results, after checking that the step is bound and that a
    checked session (which never binds) gives the same bits."""
    fast = onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))
    results = fast.run(None, feeds)
    (plan,) = fast.plans()
    calls = [step.call for step in RunState(plan).steps]
    assert any("bind" in getattr(c, "__qualname__", "") for c in calls)
    unbound = onemodel.Session.load(model, onemodel.SessionOptions(checked=True))
    for mine, reference in zip(results, unbound.run(None, feeds), strict=True):
        assert mine.tobytes() == reference.tobytes()
    return results


def _close(ours: list[np.ndarray], theirs: list[np.ndarray], tolerance: float = 2e-6) -> None:
    for mine, reference in zip(ours, theirs, strict=True):
        assert mine.shape == reference.shape and mine.dtype == reference.dtype
        np.testing.assert_allclose(mine, reference, rtol=tolerance, atol=tolerance)


SCALE_64 = np.random.default_rng(64).standard_normal(64).astype(np.float32)

# -- LayerNormalization ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "axis", "epsilon"),
    [
        ((2, 7, 64), -1, 1e-5),
        ((3, 5, 4, 8), -2, 1e-3),
        ((1, 128), 1, 1e-6),
        ((6, 3), -1, 0.5),
        ((4, 256), -1, 1e-5),
        ((2, 3, 40, 50), 2, 1e-5),
    ],
)
@pytest.mark.parametrize("with_bias", [True, False])
def test_small_layer_norm_matches_onnxruntime_bound_and_unbound(
    shape: tuple[int, ...], axis: int, epsilon: float, with_bias: bool
) -> None:
    normalized = shape[axis % len(shape) :]
    x = (RNG.standard_normal(shape) * 3 + 2).astype(np.float32)
    scale = RNG.standard_normal(normalized).astype(np.float32)
    inputs = {"x": (F, None), "scale": (F, scale)}
    if with_bias:
        inputs["bias"] = (F, RNG.standard_normal(normalized).astype(np.float32))
    model = _model("LayerNormalization", inputs, {"axis": axis, "epsilon": epsilon}, opset=17)
    _close(_bound_and_unbound(model, {"x": x}), _onnxruntime(model, {"x": x}), 5e-6)


def test_small_layer_norm_with_run_time_scale_and_stash_outputs_matches_onnxruntime() -> None:
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    scale, bias = RNG.standard_normal((2, 16)).astype(np.float32)
    plain = _model("LayerNormalization", {"x": (F, None), "s": (F, None), "b": (F, None)}, {})
    feeds = {"x": x, "s": scale, "b": bias}
    _close(onemodel.Session.load(plain).run(None, feeds), _onnxruntime(plain, feeds), 5e-6)
    stash = _model(
        "LayerNormalization", {"x": (F, None), "s": (F, scale), "b": (F, bias)}, {}, outputs=3
    )
    ours = onemodel.Session.load(stash).run(None, {"x": x})
    _close(ours, _onnxruntime(stash, {"x": x}), 5e-6)


@pytest.mark.parametrize(
    ("op", "opset", "shape", "axis"),
    [
        ("SimplifiedLayerNormalization", 19, (4, 256), -1),
        ("SimplifiedLayerNormalization", 19, (2, 7, 64), -1),
        ("SimplifiedLayerNormalization", 19, (3, 5, 4, 8), -2),
        ("RMSNormalization", 23, (4, 256), -1),
    ],
)
def test_small_rms_norm_matches_onnxruntime_bound_and_unbound(
    op: str, opset: int, shape: tuple[int, ...], axis: int
) -> None:
    x = (RNG.standard_normal(shape) * 3 + 2).astype(np.float32)
    scale = RNG.standard_normal(shape[axis % len(shape) :]).astype(np.float32)
    model = _model(op, {"x": (F, None), "scale": (F, scale)}, {"axis": axis}, opset=opset)
    _close(_bound_and_unbound(model, {"x": x}), _onnxruntime(model, {"x": x}), 5e-6)


def test_small_simplified_layer_norm_with_its_statistic_matches_onnxruntime() -> None:
    """The second output (1/rms) keeps the unbound path, which writes it."""
    x = RNG.standard_normal((4, 32)).astype(np.float32)
    scale = RNG.standard_normal(32).astype(np.float32)
    model = _model(
        "SimplifiedLayerNormalization", {"x": (F, None), "scale": (F, scale)}, {}, outputs=2
    )
    ours = onemodel.Session.load(model).run(None, {"x": x})
    _close(ours, _onnxruntime(model, {"x": x}), 5e-6)


@pytest.mark.parametrize("cols", [64, 128, 1000])
def test_small_rows_kernel_against_a_float64_oracle(cols: int) -> None:
    """Both centerings (by the product, by the means), on offset data."""
    rows = 9
    assert (rows * cols * cols <= CENTER_BY_PRODUCT) == (cols == 64)
    assert fits_small_rows(rows, cols) and not fits_small_rows(SMALL_ROWS_MAX // cols + 1, cols)
    x = (RNG.standard_normal((rows, cols)) * 100 + 1000).astype(np.float32)
    scale = RNG.standard_normal(cols).astype(np.float32)
    out = np.empty_like(x)
    SmallRows(np, rows, cols, 1e-5, scale, None)(x, out)
    wide = x.astype(np.float64)
    centered = wide - wide.mean(axis=1, keepdims=True)
    expected = centered / np.sqrt((centered**2).mean(axis=1, keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


# -- Attention ------------------------------------------------------------------------------


def _attention_oracle(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) * scale
    scores -= scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ v.astype(np.float64)


@pytest.mark.parametrize(
    ("q_shape", "keys", "scale"),
    [((2, 4, 7, 16), 7, None), ((1, 3, 5, 8), 9, 0.3), ((2, 1, 1, 4), 3, None)],
)
def test_plain_attention_matches_a_float64_oracle_bound_and_unbound(
    q_shape: tuple[int, ...], keys: int, scale: float | None
) -> None:
    b, h, _, d = q_shape
    q = RNG.standard_normal(q_shape).astype(np.float32)
    k = RNG.standard_normal((b, h, keys, d)).astype(np.float32)
    v = RNG.standard_normal((b, h, keys, d + 2)).astype(np.float32)
    attrs = {} if scale is None else {"scale": scale}
    model = _model("Attention", {"q": (F, None), "k": (F, None), "v": (F, None)}, attrs, opset=23)
    (ours,) = _bound_and_unbound(model, {"q": q, "k": k, "v": v})
    expected = _attention_oracle(q, k, v, 1 / np.sqrt(d) if scale is None else scale)
    np.testing.assert_allclose(ours, expected, rtol=2e-5, atol=2e-6)


def test_plain_attention_softmaxes_each_row_whatever_the_spread() -> None:
    """Scores spanning thousands: every row keeps its own shift (no row underflows to 0/0)."""
    q = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    k, v = RNG.standard_normal((2, 1, 2, 5, 4)).astype(np.float32)
    q[0, 0, 0] *= 1000
    q[0, 1, 2] *= -1000
    feeds = {"q": q, "k": k, "v": v}
    model = _model("Attention", {n: (F, None) for n in feeds}, {"scale": 1.0}, opset=23)
    (ours,) = _bound_and_unbound(model, feeds)
    np.testing.assert_allclose(ours, _attention_oracle(q, k, v, 1.0), rtol=2e-5, atol=2e-6)


def test_attention_with_a_mask_still_masks() -> None:
    q = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    k, v = RNG.standard_normal((2, 1, 2, 5, 4)).astype(np.float32)
    mask = np.array([[True, True, False, True, False]] * 3)
    feeds = {"q": q, "k": k, "v": v, "m": mask}
    inputs = {"q": (F, None), "k": (F, None), "v": (F, None), "m": (TensorProto.BOOL, None)}
    (ours,) = onemodel.Session.load(_model("Attention", inputs, {}, opset=23)).run(None, feeds)
    expected = _attention_oracle(q, k[..., [0, 1, 3], :], v[..., [0, 1, 3], :], 0.5)
    np.testing.assert_allclose(ours, expected, rtol=2e-5, atol=2e-6)


# -- pooling --------------------------------------------------------------------------------

POOLS = [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 1, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[1, 3], pads=[1, 0, 2, 1], dilations=[2, 1]),
    dict(kernel_shape=[1, 3], strides=[1, 2]),
    dict(kernel_shape=[3, 1], strides=[3, 1], pads=[2, 0, 1, 0]),
    dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", POOLS, ids=range(len(POOLS)))
@pytest.mark.parametrize("shape", [(1, 4, 16, 16), (2, 3, 9, 11)])
def test_small_max_pool_matches_onnxruntime(attrs: dict, shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model("MaxPool", {"x": (F, None)}, attrs, opset=12)
    ours = _bound_and_unbound(model, {"x": x})
    np.testing.assert_array_equal(ours[0], _onnxruntime(model, {"x": x})[0])


def test_small_max_pool_lets_nan_win() -> None:
    """onemodel's rule (onnxruntime skips NaN): a window holding a NaN gives NaN."""
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    x[0, 0, 3, 4] = np.nan
    model = _model("MaxPool", {"x": (F, None)}, {"kernel_shape": [3, 3], "pads": [1] * 4})
    (ours,) = _bound_and_unbound(model, {"x": x})
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    np.testing.assert_array_equal(ours, windows.max(axis=(-2, -1)))
    assert np.isnan(ours[0, 0, 2:5, 3:6]).all() and np.isnan(ours).sum() == 9


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint8])
def test_small_max_pool_of_other_types_matches_onnxruntime(dtype: type) -> None:
    x = (RNG.standard_normal((1, 3, 10, 10)) * 50).astype(dtype)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model("MaxPool", {"x": (code, None)}, POOLS[1], opset=12, output_types=(code,))
    ours = _bound_and_unbound(model, {"x": x})
    np.testing.assert_array_equal(ours[0], _onnxruntime(model, {"x": x})[0])


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_with_indices_matches_onnxruntime(storage_order: int) -> None:
    x = RNG.standard_normal((2, 3, 8, 7)).astype(np.float32)
    attrs = dict(POOLS[0], storage_order=storage_order)
    model = _model("MaxPool", {"x": (F, None)}, attrs, 2, 12, (F, TensorProto.INT64))
    ours = onemodel.Session.load(model).run(None, {"x": x})
    for mine, reference in zip(ours, _onnxruntime(model, {"x": x}), strict=True):
        np.testing.assert_array_equal(mine, reference)


AVERAGE_CASES = [(i, opset) for i in range(4) for opset in (11, 19) if i != 3 or opset >= 19]


@pytest.mark.parametrize(("case", "opset"), AVERAGE_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_small_average_pool_matches_onnxruntime(
    case: int, opset: int, count_include_pad: int
) -> None:
    """Opset 11 sums one axis at a time, 19 in row-major order (AveragePool's dilations)."""
    attrs = POOLS[case]
    x = RNG.standard_normal((2, 3, 9, 11)).astype(np.float32)
    model = _model(
        "AveragePool", {"x": (F, None)}, dict(attrs, count_include_pad=count_include_pad), 1,
        opset,
    )  # fmt: skip
    ours = _bound_and_unbound(model, {"x": x})
    _close(ours, _onnxruntime(model, {"x": x}), 1e-6)


def test_padded_pool_applies_only_to_small_inputs() -> None:
    big = (1, 64, 64, 64)
    assert np.prod(big) > PADDED_POOL_MAX
    x = RNG.standard_normal(big).astype(np.float32)
    model = _model("MaxPool", {"x": (F, None)}, POOLS[0], opset=12)
    (ours,) = onemodel.Session.load(model).run(None, {"x": x})
    np.testing.assert_array_equal(ours, _onnxruntime(model, {"x": x})[0])


# -- Resize ---------------------------------------------------------------------------------

RESIZES = [
    ({"mode": "nearest"}, [1, 1, 2, 2], None),
    ({"mode": "nearest", "nearest_mode": "floor"}, [1, 1, 0.5, 1.5], None),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "ceil"}, [1, 1, 1.7, 0.6], None),
    ({"mode": "linear"}, [1, 1, 2, 2], None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [2, 3, 5, 13]),
    ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 7.0}, [1, 1, 1.5, 2], None),
    ({"mode": "cubic"}, [1, 1, 2, 0.75], None),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 1.25, 3], None),
]  # fmt: skip


@pytest.mark.parametrize(("attrs", "scales", "sizes"), RESIZES, ids=range(len(RESIZES)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bound_resize_matches_onnxruntime(
    attrs: dict, scales: list | None, sizes: list | None, dtype: type
) -> None:
    x = RNG.standard_normal((2, 3, 6, 8)).astype(dtype)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    roi = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2] if "extrapolation_value" in attrs else [])
    inputs = {"x": (code, None), "roi": (F, roi.astype(np.float32))}
    if scales is not None:
        inputs["scales"] = (F, np.array(scales, np.float32))
    else:
        inputs["scales"] = (F, np.array([], np.float32))
        inputs["sizes"] = (TensorProto.INT64, np.array(sizes, np.int64))
    model = _model("Resize", inputs, attrs, opset=19, output_types=(code,))
    ours = _bound_and_unbound(model, {"x": x})
    # onnxruntime resizes no doubles: its float32 result, to float32's precision
    narrow = _model("Resize", dict(inputs, x=(F, None)), attrs, opset=19)
    (theirs,) = _onnxruntime(narrow, {"x": x.astype(np.float32)})
    _close(ours, [theirs.astype(dtype)], 1e-5)


# -- Transpose, and outputs that are never shared -------------------------------------------


@pytest.mark.parametrize(
    ("shape", "perm"), [((2, 7, 4, 16), [0, 2, 1, 3]), ((5, 6), [1, 0]), ((3, 4, 5), None)]
)
def test_bound_transpose_is_numpys(shape: tuple[int, ...], perm: list[int] | None) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model("Transpose", {"x": (F, None)}, {} if perm is None else {"perm": perm})
    (ours,) = _bound_and_unbound(model, {"x": x})
    np.testing.assert_array_equal(ours, np.transpose(x, perm))


MODELS = {
    "layer norm": (
        _model(
            "LayerNormalization", {"x": (F, None), "s": (F, np.ones(8, np.float32))}, {}, opset=17
        ),
        (3, 8),
    ),
    "attention": (None, (1, 2, 3, 4)),
    "max pool": (_model("MaxPool", {"x": (F, None)}, POOLS[0], opset=12), (1, 2, 6, 6)),
    "average pool": (_model("AveragePool", {"x": (F, None)}, POOLS[0]), (1, 2, 6, 6)),
    # the pair kernels (numpy_cpu/pair_pool.py), from 2^13 elements
    "pair max pool": (_model("MaxPool", {"x": (F, None)}, POOLS[0], opset=12), (1, 8, 32, 32)),
    "pair average pool": (_model("AveragePool", {"x": (F, None)}, POOLS[0]), (1, 8, 32, 32)),
    "small rms norm": (
        _model("SimplifiedLayerNormalization", {"x": (F, None), "s": (F, SCALE_64)}, {}),
        (4, 64),
    ),
    "resize": (
        _model(
            "Resize",
            {
                "x": (F, None),
                "roi": (F, np.array([], np.float32)),
                "scales": (F, np.array([1, 1, 2, 2], np.float32)),
            },
            {"mode": "linear"},
        ),
        (1, 2, 5, 5),
    ),
}


def _feeds(name: str, shape: tuple[int, ...], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    if name == "attention":
        return {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
    return {"x": rng.standard_normal(shape).astype(np.float32)}


def _load(name: str) -> onemodel.Session:
    model = MODELS[name][0]
    if model is None:
        model = _model("Attention", {n: (F, None) for n in "qkv"}, {}, opset=23)
    return onemodel.Session.load(model, onemodel.SessionOptions(intra_op_threads=1))


@pytest.mark.parametrize("name", list(MODELS))
def test_outputs_are_not_shared_across_runs_or_threads(name: str) -> None:
    session, shape = _load(name), MODELS[name][1]
    first = session.run(None, _feeds(name, shape, 1))[0]
    kept = first.copy()
    second = session.run(None, _feeds(name, shape, 2))[0]
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)
    expected = {seed: session.run(None, _feeds(name, shape, seed))[0] for seed in range(4)}
    failures: list[int] = []

    def worker(seed: int) -> None:
        for _ in range(50):
            if not np.array_equal(session.run(None, _feeds(name, shape, seed))[0], expected[seed]):
                failures.append(seed)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
