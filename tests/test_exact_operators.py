"""Exact mode, one operator at a time: each exact kernel against an oracle written here.

Every case runs a one-node model in an exact session and checks three things: the bits equal
the oracle's (plain Python or NumPy loops in the documented order of docs/exact-mode.md, or
math.fsum where the inputs make every float64 sum exact), the result is close to onnxruntime's,
and "numpy" (and, on a GPU machine, "cupy") give the bits "numpy-reference" gives.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onemodel import ExecutionMode, Session, SessionOptions
from onemodel.backends import BackendUnavailableError, KernelPaths
from onemodel.graph.importer import model_from_proto
from tests.operator_harness import one_node_model, onnxruntime_run

CANONICAL_NAN = np.uint32(0x7FC00000)
OTHER_PATHS = ["numpy", pytest.param("cupy", marks=pytest.mark.gpu)]


def exact_run(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str = "numpy-reference"
) -> list[np.ndarray]:
    try:
        KernelPaths.get(backend)
    except BackendUnavailableError as error:
        pytest.skip(str(error))
    options = SessionOptions(mode=ExecutionMode.EXACT, backend=backend, outputs_as="numpy")
    return Session.create(model_from_proto(model), options).run(None, feeds)


def canonical(array: np.ndarray) -> np.ndarray:
    """float32 values with every NaN as 0x7FC00000, as exact mode writes them."""
    array = np.asarray(array, dtype=np.float32).copy()
    array.view(np.uint32)[np.isnan(array)] = CANONICAL_NAN
    return array


def assert_bits(got: np.ndarray, want: np.ndarray, label: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, label
    differ = got.view(np.uint8).reshape(-1, got.itemsize) != want.view(np.uint8).reshape(
        -1, want.itemsize
    )
    rows = np.flatnonzero(differ.any(axis=1))
    assert rows.size == 0, f"{label}: {rows.size} elements differ, first at {rows[:5]}: " + (
        f"{got.reshape(-1)[rows[:5]]} vs {want.reshape(-1)[rows[:5]]}"
    )


def check(
    op_type: str,
    inputs: Sequence[np.ndarray],
    attributes: dict,
    oracle: Sequence[np.ndarray],
    *,
    opset: int = 17,
    output_types: Sequence[int] | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    against_onnxruntime: bool = True,
) -> list[np.ndarray]:
    """Exact outputs equal `oracle` bit for bit and (unless told not to: onnxruntime does
    not let a NaN win a max) are close to onnxruntime's."""
    types = list(output_types or [TensorProto.FLOAT] * len(oracle))
    model, feeds = one_node_model(
        op_type, inputs, attributes, opset=opset, outputs=len(types), output_types=types
    )
    got = exact_run(model, feeds)
    for index, (result, wanted) in enumerate(zip(got, oracle, strict=True)):
        assert_bits(result, wanted, f"{op_type} output {index} against the oracle")
    if not against_onnxruntime:
        return got
    pytest.importorskip("onnxruntime")
    for index, (result, theirs) in enumerate(zip(got, onnxruntime_run(model, feeds), strict=True)):
        np.testing.assert_allclose(
            result, theirs, rtol=rtol, atol=atol, err_msg=f"{op_type} {index} vs onnxruntime"
        )
    return got


def ordered_sum(values: Sequence[float]) -> float:
    """Python floats (IEEE doubles) added one by one from +0, in the order given."""
    total = 0.0
    for value in values:
        total += float(value)
    return total


# -- Conv ------------------------------------------------------------------------------------


def conv_oracle(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    group: int,
    add: Callable[[Sequence[float]], float],
) -> np.ndarray:
    """2-D conv by loops: per output element the products in the order (channel, ky, kx),
    padding reading 0, summed by `add`, rounded once to float32, then + bias in float32."""
    n_, _, h, w_ = x.shape
    m_, per_group, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (w_ + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.empty((n_, m_, oh, ow), dtype=np.float32)
    for n, m, oy, ox in itertools.product(range(n_), range(m_), range(oh), range(ow)):
        first_channel = (m // (m_ // group)) * per_group
        products = []
        for c, ky, kx in itertools.product(range(per_group), range(kh), range(kw)):
            y = oy * strides[0] - pads[0] + ky * dilations[0]
            xx = ox * strides[1] - pads[1] + kx * dilations[1]
            inside = 0 <= y < h and 0 <= xx < w_
            value = float(x[n, first_channel + c, y, xx]) if inside else 0.0
            products.append(value * float(w[m, c, ky, kx]))
        out[n, m, oy, ox] = np.float32(add(products))
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


CONV_CASES = [
    # strides, pads, dilations, group, x shape, w shape
    ((1, 1), (1, 1, 1, 1), (1, 1), 1, (2, 3, 6, 5), (4, 3, 3, 3)),
    ((2, 1), (0, 2, 1, 0), (1, 2), 1, (1, 2, 7, 6), (3, 2, 2, 3)),
    ((1, 2), (1, 0, 1, 1), (2, 1), 2, (1, 4, 6, 7), (6, 2, 3, 2)),
    ((1, 1), (1, 1, 1, 1), (1, 1), 3, (1, 3, 5, 5), (3, 1, 3, 3)),  # depthwise
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_is_the_ordered_float64_sum_rounded_once(case: int) -> None:
    strides, pads, dilations, group, x_shape, w_shape = CONV_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    attributes = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    oracle = conv_oracle(x, w, b, strides, pads, dilations, group, ordered_sum)
    check("Conv", [x, w, b], attributes, [oracle])


def test_conv_with_exact_sums_equals_the_correctly_rounded_result() -> None:
    """Inputs on a 1/16 grid: every product and partial sum is exact in float64, so the
    correctly rounded sum (math.fsum) is what any exact order must give."""
    rng = np.random.default_rng(7)
    x = (rng.integers(-64, 64, (1, 3, 5, 6)) / 16).astype(np.float32)
    w = (rng.integers(-64, 64, (2, 3, 3, 3)) / 16).astype(np.float32)
    attributes = {"pads": (1, 1, 1, 1)}
    oracle = conv_oracle(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1, math.fsum)
    check("Conv", [x, w], attributes, [oracle])


def test_conv_3d_matches_onnxruntime_and_the_paths_agree() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 3, 2)).astype(np.float32)
    model, feeds = one_node_model("Conv", [x, w], {"pads": [1, 0, 1, 0, 1, 1]}, opset=17)
    got = exact_run(model, feeds)
    assert_bits(exact_run(model, feeds, "numpy")[0], got[0], "numpy vs numpy-reference")
    pytest.importorskip("onnxruntime")
    np.testing.assert_allclose(got[0], onnxruntime_run(model, feeds)[0], rtol=1e-5, atol=1e-5)


# -- pooling ---------------------------------------------------------------------------------


def pool_windows(
    shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    ceil: bool,
) -> tuple[list[int], Callable[[int, int, int], list[tuple[int, bool, bool]]]]:
    """Output extents of a 2-D pooling and, per axis and window, each tap's
    (position, real, inside the explicit pads) in tap order."""
    extents = []
    for axis in range(2):
        span = shape[axis] + pads[axis] + pads[axis + 2] - kernel[axis]
        extent = (-(-span // strides[axis]) if ceil else span // strides[axis]) + 1
        if ceil and (extent - 1) * strides[axis] >= shape[axis] + pads[axis]:
            extent -= 1
        extents.append(extent)

    def taps(axis: int, window: int, _: int = 0) -> list[tuple[int, bool, bool]]:
        start = window * strides[axis] - pads[axis]
        positions = range(start, start + kernel[axis])
        end = shape[axis] + pads[axis + 2]
        return [(p, 0 <= p < shape[axis], -pads[axis] <= p < end) for p in positions]

    return extents, taps


def max_pool_oracle(
    x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The first strictly greater real value (or first NaN) per window, and its flat index."""
    (oh, ow), taps = pool_windows(x.shape[2:], kernel, strides, pads, False)
    values = np.empty((*x.shape[:2], oh, ow), dtype=np.float32)
    indices = np.empty(values.shape, dtype=np.int64)
    height, width = x.shape[2:]
    for n, c, oy, ox in itertools.product(*(range(d) for d in values.shape)):
        best, where = None, None
        for (y, real_y, _), (xx, real_x, _) in itertools.product(taps(0, oy), taps(1, ox)):
            if not (real_y and real_x):
                continue
            value = x[n, c, y, xx]
            if best is None or value > best or (math.isnan(value) and not math.isnan(best)):
                best, where = value, y * width + xx
        values[n, c, oy, ox] = best
        indices[n, c, oy, ox] = (n * x.shape[1] + c) * height * width + where
    return canonical(values), indices


def test_max_pool_takes_the_first_of_equal_values_and_the_first_nan() -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 3, (2, 2, 6, 7)).astype(np.float32)  # many ties
    x[x == 0] = np.where(rng.random(np.count_nonzero(x == 0)) < 0.5, -0.0, 0.0)
    x[1, 1, 4, 5] = -np.inf
    kernel, strides, pads = (3, 2), (2, 1), (1, 1, 1, 0)
    attributes = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    types = [TensorProto.FLOAT, TensorProto.INT64]
    oracle = max_pool_oracle(x, kernel, strides, pads)
    check("MaxPool", [x], attributes, oracle, output_types=types, atol=0)
    x[0, 0, 1, 1] = np.nan
    oracle = max_pool_oracle(x, kernel, strides, pads)
    check("MaxPool", [x], attributes, oracle, output_types=types, against_onnxruntime=False)


def average_pool_oracle(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    include_pad: bool,
    ceil: bool,
) -> np.ndarray:
    """Per window the real values added in float64 in tap order, divided once by the count,
    rounded once to float32."""
    (oh, ow), taps = pool_windows(x.shape[2:], kernel, strides, pads, ceil)
    out = np.empty((*x.shape[:2], oh, ow), dtype=np.float32)
    for n, c, oy, ox in itertools.product(*(range(d) for d in out.shape)):
        values, count = [], 0
        for (y, real_y, pad_y), (xx, real_x, pad_x) in itertools.product(taps(0, oy), taps(1, ox)):
            if real_y and real_x:
                values.append(x[n, c, y, xx])
            count += (pad_y and pad_x) if include_pad else (real_y and real_x)
        out[n, c, oy, ox] = np.float32(ordered_sum(values) / count)
    return out


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("ceil", [0, 1])
def test_average_pool_is_the_ordered_sum_divided_once(include_pad: int, ceil: int) -> None:
    rng = np.random.default_rng(5 + include_pad + 2 * ceil)
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    kernel, strides, pads = (3, 3), (2, 2), (1, 1, 1, 1)
    attributes = {
        "kernel_shape": kernel,
        "strides": strides,
        "pads": pads,
        "count_include_pad": include_pad,
        "ceil_mode": ceil,
    }
    oracle = average_pool_oracle(x, kernel, strides, pads, bool(include_pad), bool(ceil))
    check("AveragePool", [x], attributes, [oracle], opset=19)


def test_global_pools_are_the_exact_mean_and_max() -> None:
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    x[1, 2, 3, 1] = np.nan
    rows = x.reshape(2, 3, -1)
    mean = np.array(
        [[ordered_sum(row) / row.size for row in plane] for plane in rows], dtype=np.float32
    )
    check("GlobalAveragePool", [x], {}, [canonical(mean.reshape(2, 3, 1, 1))])
    peak = canonical(max_pool_oracle(x, (5, 4), (1, 1), (0,) * 4)[0])
    check("GlobalMaxPool", [x], {}, [peak], against_onnxruntime=False)


# -- reductions ------------------------------------------------------------------------------


def reduce_oracle(
    x: np.ndarray, axes: Sequence[int], fold: Callable[[list], float], keepdims: bool
) -> np.ndarray:
    """`fold` of each kept position's reduced values, listed in row-major order."""
    kept = [a for a in range(x.ndim) if a not in axes]
    shape = [x.shape[a] for a in kept]
    out = np.empty(shape, dtype=np.float32)
    for position in itertools.product(*(range(d) for d in shape)):
        index: list = [0] * x.ndim
        for axis, value in zip(kept, position, strict=True):
            index[axis] = value
        values = []
        for reduced in itertools.product(*(range(x.shape[a]) for a in axes)):
            for axis, value in zip(axes, reduced, strict=True):
                index[axis] = value
            values.append(x[tuple(index)])
        out[position] = fold(values)
    if keepdims:
        out = out.reshape([1 if a in axes else d for a, d in enumerate(x.shape)])
    return canonical(out)


def first_extremum(largest: bool) -> Callable[[list], float]:
    def fold(values: list) -> float:
        best = values[0]
        for value in values[1:]:
            better = value > best if largest else value < best
            if better or (math.isnan(value) and not math.isnan(best)):
                best = value
        return best

    return fold


REDUCTIONS = {
    "ReduceSum": ordered_sum,
    "ReduceMean": lambda values: ordered_sum(values) / len(values),
    "ReduceMax": first_extremum(True),
    "ReduceMin": first_extremum(False),
}


@pytest.mark.parametrize("op_type", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), ((0, 1, 2), 1)])
def test_reductions_follow_the_row_major_order(
    op_type: str, axes: tuple[int, ...], keepdims: int
) -> None:
    rng = np.random.default_rng(len(op_type) + len(axes))
    x = (rng.standard_normal((3, 4, 5)) * 10.0 ** rng.integers(-3, 4, (3, 4, 5))).astype(np.float32)
    x[0, 1, 2] = -0.0
    oracle = reduce_oracle(x, axes, REDUCTIONS[op_type], bool(keepdims))
    axes_input = np.array(axes, dtype=np.int64)
    model_inputs = [x, axes_input] if op_type == "ReduceSum" else [x]
    attributes = {"keepdims": keepdims}
    if op_type != "ReduceSum":
        attributes["axes"] = list(axes)
    check(op_type, model_inputs, attributes, [oracle], opset=13, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_reduced_nan_wins_over_any_number(op_type: str) -> None:
    """NaN propagates, as in fast mode (onnxruntime skips it, so it is no oracle here)."""
    x = np.random.default_rng(19).standard_normal((4, 6)).astype(np.float32)
    x[1, 3] = x[3, 0] = np.nan
    oracle = reduce_oracle(x, (1,), REDUCTIONS[op_type], True)
    check(op_type, [x], {"axes": [1]}, [oracle], opset=13, against_onnxruntime=False)


def test_reduce_sum_with_exact_sums_equals_fsum() -> None:
    rng = np.random.default_rng(17)
    x = (rng.integers(-1000, 1000, (4, 50)) / 64).astype(np.float32)
    oracle = reduce_oracle(x, (1,), math.fsum, False)
    check("ReduceSum", [x, np.array([1], dtype=np.int64)], {"keepdims": 0}, [oracle], opset=13)


# -- exp, log, erf, sqrt -------------------------------------------------------------------


def correctly_rounded(function: Callable[[float], float], x: np.ndarray) -> np.ndarray:
    """A math-module function in float64, rounded once to float32 (inf beyond the range)."""
    results = []
    for value in x.astype(np.float64).reshape(-1):
        try:
            results.append(function(value))
        except OverflowError:
            results.append(math.inf)
        except ValueError:  # log of 0 is −inf; of a negative number NaN, as sqrt's
            results.append(-math.inf if value == 0 and function is math.log else math.nan)
    with np.errstate(over="ignore"):
        return canonical(np.array(results).astype(np.float32).reshape(x.shape))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 steps apart (for values of one sign or zeros)."""
    ordered = [np.where(v < 0, -(v & 0x7FFFFFFF), v) for v in (a.view(np.int32), b.view(np.int32))]
    return np.abs(ordered[0].astype(np.int64) - ordered[1].astype(np.int64))


FUNCTIONS = {
    # op, math oracle, sample range, special values
    "Exp": (math.exp, (-104.0, 89.0), [0.0, -0.0, np.inf, -np.inf, np.nan, 88.73, -103.98]),
    "Log": (math.log, (0.0, 1e4), [0.0, -0.0, 1.0, np.inf, -1.0, np.nan, 1e-45, 3.4e38]),
    "Erf": (math.erf, (-5.0, 5.0), [0.0, -0.0, np.inf, -np.inf, np.nan, 3.92, -6.5, 1e-40]),
    "Sqrt": (math.sqrt, (0.0, 1e6), [0.0, -0.0, np.inf, -1.0, np.nan, 1e-45, 2.0]),
}


@pytest.mark.parametrize("op_type", sorted(FUNCTIONS))
def test_functions_are_correctly_rounded_on_a_sample(op_type: str) -> None:
    """Against the float64 math function rounded once to float32: the special values exactly,
    and at most one float32 step on 20,000 samples (measured: no sample differs at all)."""
    function, (low, high), specials = FUNCTIONS[op_type]
    rng = np.random.default_rng(23)
    sample = rng.uniform(low, high, 20_000).astype(np.float32)
    x = np.concatenate([np.array(specials, dtype=np.float32), sample])
    oracle = correctly_rounded(function, x)
    model, feeds = one_node_model(op_type, [x], {}, opset=13, output_types=TensorProto.FLOAT)
    (got,) = exact_run(model, feeds)
    count = len(specials)
    assert_bits(got[:count], oracle[:count], f"{op_type} of {specials}")
    assert ulp_distance(got[count:], oracle[count:]).max() <= 1
    assert np.count_nonzero(got[count:] != oracle[count:]) <= sample.size // 1000


@pytest.mark.parametrize("op_type", sorted(FUNCTIONS))
def test_functions_are_close_to_onnxruntime(op_type: str) -> None:
    pytest.importorskip("onnxruntime")
    _, (low, high), _ = FUNCTIONS[op_type]
    x = np.random.default_rng(29).uniform(low, high, 2_000).astype(np.float32)
    model, feeds = one_node_model(op_type, [x], {}, opset=13, output_types=TensorProto.FLOAT)
    (got,) = exact_run(model, feeds)
    np.testing.assert_allclose(got, onnxruntime_run(model, feeds)[0], rtol=2e-6, atol=1e-30)


# -- softmax and layer normalization ---------------------------------------------------------


def softmax_oracle(x: np.ndarray, log: bool) -> np.ndarray:
    """Along the last axis with math.exp/math.log in float64: exp(x − max) over its ordered
    sum (or x − max − log of it), rounded once."""
    out = np.empty(x.shape, dtype=np.float32)
    for index in np.ndindex(x.shape[:-1]):
        row = [float(v) for v in x[index]]
        peak = max(row)
        powers = [math.exp(v - peak) for v in row]
        total = ordered_sum(powers)
        if log:
            out[index] = [v - peak - math.log(total) for v in row]
        else:
            out[index] = [p / total for p in powers]
    return out


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
def test_softmax_is_within_one_step_of_the_math_module(op_type: str) -> None:
    rng = np.random.default_rng(31)
    x = (rng.standard_normal((6, 4, 9)) * 4).astype(np.float32)
    oracle = softmax_oracle(x, op_type == "LogSoftmax")
    model, feeds = one_node_model(op_type, [x], {"axis": -1}, opset=13)
    (got,) = exact_run(model, feeds)
    assert ulp_distance(got, oracle).max() <= 1
    pytest.importorskip("onnxruntime")
    np.testing.assert_allclose(got, onnxruntime_run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_softmax_of_opset_11_normalizes_the_trailing_axes_together() -> None:
    x = np.random.default_rng(37).standard_normal((3, 4, 5)).astype(np.float32)
    oracle = softmax_oracle(x.reshape(3, 20), False).reshape(x.shape)
    model, feeds = one_node_model("Softmax", [x], {"axis": 1}, opset=11)
    (got,) = exact_run(model, feeds)
    assert ulp_distance(got, oracle).max() <= 1


def layer_norm_oracle(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: float
) -> list[np.ndarray]:
    """Over the last axis in Python floats: the ordered mean, the ordered mean of squared
    deviations, 1/sqrt(var + ε), then ((d · inv_std) · scale) + bias, each rounded once."""
    out = np.empty(x.shape, dtype=np.float32)
    means = np.empty((*x.shape[:-1], 1), dtype=np.float32)
    inv_stds = np.empty(means.shape, dtype=np.float32)
    for index in np.ndindex(x.shape[:-1]):
        row = [float(v) for v in x[index]]
        mean = ordered_sum(row) / len(row)
        deviations = [v - mean for v in row]
        variance = ordered_sum([d * d for d in deviations]) / len(row)
        inv_std = 1 / math.sqrt(variance + epsilon)
        out[index] = [
            d * inv_std * float(s) + float(b)
            for d, s, b in zip(deviations, scale, bias, strict=True)
        ]
        means[index], inv_stds[index] = mean, inv_std
    return [out, means, inv_stds]


def test_layer_normalization_is_the_ordered_float64_recipe() -> None:
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((3, 5, 16)) * 3 + 1).astype(np.float32)
    scale = rng.standard_normal(16).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    epsilon = float(np.float32(1e-5))
    check(
        "LayerNormalization",
        [x, scale, bias],
        {"epsilon": epsilon},
        layer_norm_oracle(x, scale, bias, epsilon),
        output_types=[TensorProto.FLOAT] * 3,
        rtol=1e-4,
        atol=1e-5,
    )


# -- the NumPy paths (and CuPy) agree on every exact operator ----------------------------------


def _cases() -> dict[str, tuple[str, list[np.ndarray], dict, int]]:
    rng = np.random.default_rng(43)

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    image = normal(2, 3, 8, 8)
    return {
        "conv": ("Conv", [image, normal(4, 3, 3, 3), normal(4)], {"pads": [1] * 4}, 17),
        "max_pool": ("MaxPool", [image], {"kernel_shape": [3, 3], "pads": [1] * 4}, 17),
        "average_pool": (
            "AveragePool",
            [image],
            {"kernel_shape": [3, 2], "strides": [2, 2], "count_include_pad": 1, "pads": [1] * 4},
            17,
        ),
        "global_average": ("GlobalAveragePool", [image], {}, 17),
        "reduce_mean": ("ReduceMean", [image], {"axes": [1, 3]}, 17),
        "reduce_max": ("ReduceMax", [image], {"axes": [2]}, 17),
        "softmax": ("Softmax", [image], {"axis": 1}, 13),
        "log_softmax": ("LogSoftmax", [image], {"axis": -1}, 13),
        "layer_norm": ("LayerNormalization", [image, normal(8, 8), normal(8, 8)], {"axis": 2}, 17),
        "erf": ("Erf", [image], {}, 13),
        "exp": ("Exp", [image], {}, 13),
        "batch_norm": (
            "BatchNormalization",
            [image, normal(3), normal(3), normal(3), np.abs(normal(3)) + 0.5],
            {},
            15,
        ),
    }


@pytest.mark.parametrize("backend", OTHER_PATHS)
@pytest.mark.parametrize("case", sorted(_cases()))
def test_every_path_gives_the_reference_bits(case: str, backend: str) -> None:
    assert_reference_bits(case, *_cases()[case], backend)


def assert_reference_bits(
    case: str, op_type: str, inputs: list, attributes: dict, opset: int, backend: str
) -> None:
    """The one-node model's exact outputs on `backend` have numpy-reference's bits."""
    model, feeds = one_node_model(op_type, inputs, attributes, opset=opset)
    want = exact_run(model, feeds, "numpy-reference")
    got = exact_run(model, feeds, backend)
    for index, (result, wanted) in enumerate(zip(got, want, strict=True)):
        assert_bits(result, wanted, f"{case} output {index} on {backend}")


# -- flags -------------------------------------------------------------------------------------

# Operators that only move, select or reinterpret values, or whose one operation is correctly
# rounded: exact mode must accept all of them (docs/exact-mode.md lists them).
EXACT_BY_NATURE = [
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "ScatterElements",
    "ScatterND",
    "Expand",
    "Tile",
    "Pad",
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Range",
    "EyeLike",
    "OneHot",
    "DepthToSpace",
    "SpaceToDepth",
    "CenterCropPad",
    "ReverseSequence",
    "Trilu",
    "NonZero",
    "Compress",
    "BitCast",
    "Cast",
    "CastLike",
    "Where",
    "Not",
    "Abs",
    "Neg",
    "Relu",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Sqrt",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "IsNaN",
    "IsInf",
    "SequenceConstruct",
    "SequenceAt",
    "SplitToSequence",
    "ConcatFromSequence",
    "Optional",
    "OptionalGetElement",
    "If",
    "Loop",
    "Scan",
]


@pytest.mark.parametrize("op_type", EXACT_BY_NATURE)
def test_data_movement_and_single_operations_are_flagged_exact(op_type: str) -> None:
    from onemodel.graph.operators import optable

    definition = optable.resolve("", op_type, onnx.defs.onnx_opset_version())
    assert definition is not None and definition.factory.supports_exact


# -- scatter reductions: repeated places take their updates in index order ------------------


def _scatter_oracle(data: np.ndarray, places: tuple, updates: np.ndarray, reduction: str):
    """The updates applied one at a time, in index order (the last one wins for "none")."""
    out = data.copy()
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for index in np.ndindex(updates.shape[: places[0].ndim]):
        place = tuple(int(p[index]) for p in places)
        value = updates[index]
        out[place] = value if reduction == "none" else combine[reduction](out[place], value)
    return out


@pytest.mark.parametrize("backend", ["numpy-reference", "numpy", "checked-device"])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_reductions_apply_repeats_in_index_order(backend: str, reduction: str) -> None:
    """Many updates per place, of magnitudes whose sums depend on the order (and subnormals,
    which a flushing backend must keep): every backend gives the sequential result's bits."""
    rng = np.random.default_rng(61)
    data = (rng.standard_normal((4, 5)) * 1e3).astype(np.float32)
    magnitudes = rng.choice(np.float32([1e-40, 1e-3, 1.0, 1e7]), (6, 3, 5))
    updates = (rng.standard_normal((6, 3, 5)) * magnitudes).astype(np.float32)
    indices = rng.integers(0, 4, (6, 3, 1))  # ScatterND: 18 row updates onto 4 rows
    model, feeds = one_node_model(
        "ScatterND", [data, indices, updates], {"reduction": reduction}, opset=18
    )
    want = _scatter_oracle(data, (indices[..., 0],), updates, reduction)
    (got,) = exact_run(model, feeds, backend)
    assert_bits(got, canonical(want), f"ScatterND {reduction} on {backend}")

    element_indices = rng.integers(-4, 4, (7, 5))  # ScatterElements on axis 0, negatives too
    element_updates = updates.reshape(-1)[:35].reshape(7, 5)
    model, feeds = one_node_model(
        "ScatterElements", [data, element_indices, element_updates],
        {"axis": 0, "reduction": reduction}, opset=18,
    )  # fmt: skip
    columns = np.broadcast_to(np.arange(5), (7, 5))
    want = _scatter_oracle(data, (element_indices % 4, columns), element_updates, reduction)
    (got,) = exact_run(model, feeds, backend)
    assert_bits(got, canonical(want), f"ScatterElements {reduction} on {backend}")
