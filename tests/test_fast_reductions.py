"""Fast mode's float sums by a matrix-vector product (reductions.float_sum) against float64
sums, on every placement of consecutive axes, with infinities and NaN, and the fallbacks."""

import numpy as np
import pytest

from onemodel.graph.operators import reductions
from onemodel.graph.operators.reductions import float_sum
from tests.operator_harness import run_node


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((64, 1024), (1,)), ((1024, 64), (0,)), ((8, 512, 16), (1,)), ((4, 64, 64, 3), (1, 2)),
     ((2, 3, 4096), (0, 1, 2)), ((4, 8, 1024), (0, 2))],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_match_the_float64_sum(shape, axes, dtype) -> None:
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    total = float_sum(np, x, axes)
    truth = np.sum(x.astype(np.float64), axis=axes)
    assert total.shape == truth.shape and total.dtype == dtype
    magnitude = np.sum(np.abs(x.astype(np.float64)), axis=axes)
    run = x.size // truth.size
    # BLAS's partial sums: an error bound of (run/32 + log2) ulps of the sum of magnitudes
    bound = (run / 32 + 16) * np.finfo(dtype).eps * magnitude
    assert np.all(np.abs(total - truth) <= bound)


def test_infinities_and_nan_add_as_they_would() -> None:
    x = np.ones((64, 1024), np.float32)
    x[1, 5], x[2, 7], x[3, 1], x[3, 2], x[4, 9] = np.inf, -np.inf, np.inf, -np.inf, np.nan
    with np.errstate(invalid="ignore"):  # inf - inf (the operators run quietly)
        total = float_sum(np, x, (1,))
    assert total[0] == 1024 and total[1] == np.inf and total[2] == -np.inf
    assert np.isnan(total[3]) and np.isnan(total[4])


def test_long_runs_and_small_arrays_take_numpys_sum(monkeypatch) -> None:
    x = np.random.default_rng(4).standard_normal((2, 1 << 17)).astype(np.float32)
    np.testing.assert_array_equal(float_sum(np, x, (1,)), np.sum(x, axis=1, dtype=np.float32))
    small = x[:, :100].copy()
    np.testing.assert_array_equal(
        float_sum(np, small, (1,)), np.sum(small, axis=1, dtype=np.float32)
    )
    monkeypatch.setattr(reductions, "GEMV_ABOVE", 0)
    assert np.allclose(float_sum(np, small, (1,)), small.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean"])
def test_the_operators_use_it_with_keepdims(op_type) -> None:
    x = np.random.default_rng(6).standard_normal((1, 64, 64, 64)).astype(np.float32)
    axes = np.array([2, 3], np.int64)
    (ours,) = run_node(op_type, [x, axes], {"keepdims": 1}, opset=18)
    wide = x.astype(np.float64).sum(axis=(2, 3), keepdims=True)
    truth = wide / 4096 if op_type == "ReduceMean" else wide
    assert ours.shape == (1, 64, 1, 1)
    np.testing.assert_allclose(ours, truth, rtol=1e-5, atol=4096 * 2e-7)
