"""The numba-compiled float32 ↔ float16 casts (numpy_cpu/compiled_casts.py) against NumPy's own
conversion, bit for bit: every float16, and float32 values from every binade with the rounding
boundaries, subnormals, overflow, ±0, ±inf and NaN; and the arrays they decline."""

from __future__ import annotations

import numpy as np
import pytest

from onemodel.backends.numpy_cpu.compiled_casts import COMPILED_FROM, compiled_cast
from tests.operator_harness import run_node


def _same(got: np.ndarray, want: np.ndarray, bits: type) -> None:
    """The same bits, except that any NaN is a NaN (fast mode does not promise payloads)."""
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(bits)[~nan], want.view(bits)[~nan])


def test_every_float16_widens_as_numpy_widens_it():
    half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    out = np.full(half.shape, 7.0, np.float32)
    assert compiled_cast(half, out)
    _same(out, half.astype(np.float32), np.uint32)


def test_float32_narrows_with_numpys_rounding_to_nearest_even():
    rng = np.random.default_rng(3)
    patterns = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    # Every float16 value and the float32 values half an ulp either side of it, ties included.
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    exact = halves.astype(np.float32)
    exact = exact[np.isfinite(exact)]
    ties = np.concatenate([np.nextafter(exact, np.inf), np.nextafter(exact, -np.inf)])
    edges = np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 65504, 65519.996, 65520, -65520, 1e30,
         2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-26, 2.0**-14, 1e-40, -1e-45],
        np.float32,
    )  # fmt: skip
    x = np.concatenate([patterns.view(np.float32), exact, ties, edges])
    out = np.empty(x.shape, np.float16)
    assert compiled_cast(x, out)
    with np.errstate(over="ignore"):
        _same(out, x.astype(np.float16), np.uint16)


def test_a_cast_node_takes_it_and_gives_numpys_values():
    x = np.random.default_rng(4).standard_normal((8, 1024)).astype(np.float32) * 3000
    (half,) = run_node("Cast", [x], {"to": 10}, opset=19)
    _same(half, x.astype(np.float16), np.uint16)
    (back,) = run_node("Cast", [half], {"to": 1}, opset=19)
    _same(back, half.astype(np.float32), np.uint32)


def test_small_strided_and_other_arrays_are_declined_untouched():
    small = np.ones(COMPILED_FROM - 1, np.float32)
    assert not compiled_cast(small, np.empty(small.shape, np.float16))
    x = np.ones((COMPILED_FROM, 2), np.float32)
    out = np.full((COMPILED_FROM, 2), np.nan, np.float16)
    assert not compiled_cast(x[:, :1], out[:, :1])  # strided
    assert not compiled_cast(x.astype(np.float64), out)
    assert not compiled_cast(x, np.zeros(x.shape, bool))  # no compiled form
    assert not compiled_cast(x.astype(np.float16), np.zeros(x.shape, np.int32))
    assert np.isnan(out).all()


@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.parametrize("target", list("bBhHiIqQ"))
def test_floats_in_range_truncate_to_integers_as_numpy_does(source, target):
    info = np.iinfo(target)
    rng = np.random.default_rng(7)
    x = rng.uniform(float(info.min), float(info.max), COMPILED_FROM * 2).astype(source)
    x = np.clip(x, info.min, np.nextafter(source(float(info.max) + 1), source(0)))
    x[:6] = [
        info.min,
        0.0,
        -0.0,
        0.99,
        info.min + 0.5,
        np.nextafter(source(float(info.max) + 1), 0),
    ]
    out = np.full(x.shape, 1, np.dtype(target))
    assert compiled_cast(x, out)
    np.testing.assert_array_equal(out, x.astype(target))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 2.0**31, -(2.0**31) - 256])
def test_a_value_out_of_range_leaves_the_cast_to_the_reference_rules(bad):
    x = np.zeros(COMPILED_FROM, np.float32)
    x[-1] = bad
    out = np.full(x.shape, 5, np.int32)
    assert not compiled_cast(x, out)
    assert np.all(out == 5)
    (node,) = run_node("Cast", [x], {"to": 6}, opset=19)  # the reference rules' answer
    assert node[:-1].tolist() == [0] * (COMPILED_FROM - 1)


def test_a_cast_over_its_own_input_checks_before_it_writes():
    x = np.arange(COMPILED_FROM, dtype=np.float32) - 7.5
    x[5] = np.nan
    as_int = x.view(np.int32)
    assert not compiled_cast(x, as_int)
    assert np.isnan(x[5]) and x[6] == -1.5
