"""Exact mode's activation functions and Pow (exact_activations.py, exact_elementary.py).

Each is a fixed float64 sequence rounded once into float32, so against the same function
computed with the math module in float64 and rounded once it may differ only where the float64
value lies within a few float64 steps of a float32 rounding boundary: at most one float32 step
anywhere, and rarely (docs/exact-mode.md states the measured counts). Special values (zeros,
infinities, NaN, the far tails) must give exactly the function's limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from tests.operator_harness import one_node_model
from tests.test_exact_operators import (
    assert_bits,
    assert_reference_bits,
    canonical,
    correctly_rounded,
    exact_run,
    ulp_distance,
)

SQRT_HALF = math.sqrt(0.5)


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _gelu_tanh(x: float) -> float:
    u2 = 2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
    return x / (1 + math.exp(-u2)) if u2 > -700 else 0.0 * x


INF, NAN = np.inf, np.nan
ALPHA = float(np.float32(0.7))  # attributes are float32
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
# op, attributes, opset, float64 oracle, sample range, special (x, f(x)) pairs
ACTIVATIONS: dict[str, tuple[str, dict, int, Callable[[float], float], tuple, list]] = {
    "sigmoid": ("Sigmoid", {}, 13, lambda x: 1 / (1 + math.exp(-x)) if x > -700 else 0.0,
                (-110.0, 40.0),
                [(0.0, 0.5), (INF, 1.0), (-INF, 0.0), (NAN, NAN), (-120.0, 0.0), (20.0, 1.0)]),
    "tanh": ("Tanh", {}, 13, math.tanh, (-12.0, 12.0),
             [(0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (NAN, NAN), (1e-30, 1e-30),
              (-1e-40, -1e-40), (9.1, 1.0)]),
    "softplus": ("Softplus", {}, 13, _softplus, (-110.0, 100.0),
                 [(INF, INF), (-INF, 0.0), (NAN, NAN), (-120.0, 0.0), (1e-30, math.log(2)),
                  (100.0, 100.0)]),
    "softsign": ("Softsign", {}, 13, lambda x: x / (1 + abs(x)), (-1e4, 1e4),
                 [(0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (NAN, NAN)]),
    "mish": ("Mish", {}, 18, lambda x: x * math.tanh(_softplus(x)), (-60.0, 30.0),
             [(0.0, 0.0), (INF, INF), (NAN, NAN), (30.0, 30.0)]),
    "elu": ("Elu", {"alpha": 0.7}, 13, lambda x: x if x >= 0 else ALPHA * math.expm1(x),
            (-30.0, 5.0),
            [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, np.float32(-0.7)), (NAN, NAN)]),
    "selu": ("Selu", {}, 13,
             lambda x: SELU_GAMMA * (x if x > 0 else SELU_ALPHA * math.expm1(x)),
             (-30.0, 5.0), [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (NAN, NAN)]),
    "celu": ("Celu", {"alpha": 2.0}, 13, lambda x: max(x, 0.0) + min(2 * math.expm1(x / 2), 0.0),
             (-30.0, 5.0), [(0.0, 0.0), (INF, INF), (-INF, -2.0), (NAN, NAN), (-1e-30, -1e-30)]),
    "gelu": ("Gelu", {}, 20, lambda x: x * math.erfc(-x * SQRT_HALF) / 2, (-14.0, 6.0),
             [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -0.0), (NAN, NAN), (-16.0, -0.0),
              (10.0, 10.0)]),
    "gelu_tanh": ("Gelu", {"approximate": "tanh"}, 20, _gelu_tanh, (-14.0, 6.0),
                  [(0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -0.0), (NAN, NAN), (10.0, 10.0)]),
    "hard_swish": ("HardSwish", {}, 14, lambda x: x * min(max(x / 6 + 0.5, 0.0), 1.0),
                   (-5.0, 5.0),
                   [(0.0, 0.0), (INF, INF), (-INF, -0.0), (NAN, NAN), (3.0, 3.0), (-3.0, -0.0)]),
}  # fmt: skip


def _sample(op: str, low: float, high: float, specials: list) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, op)))
    sample = rng.uniform(low, high, 20_000).astype(np.float32)
    return np.concatenate([np.array([x for x, _ in specials], dtype=np.float32), sample])


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_are_within_a_float32_step_of_the_float64_function(name: str) -> None:
    """Special values exactly; 20,000 samples at most one float32 step from the math module's
    float64 function rounded once, and fewer than 0.1% differing at all."""
    op_type, attributes, opset, function, (low, high), specials = ACTIVATIONS[name]
    x = _sample(name, low, high, specials)
    count = len(specials)
    oracle = correctly_rounded(function, x[count:])
    model, feeds = one_node_model(op_type, [x], attributes, opset=opset)
    (got,) = exact_run(model, feeds)
    limits = canonical(np.array([y for _, y in specials], dtype=np.float32))
    assert_bits(got[:count], limits, f"{name} of {specials}")
    assert ulp_distance(got[count:], oracle).max() <= 1
    assert np.count_nonzero(got[count:] != oracle) <= x.size // 1000


def test_pow_is_within_a_float32_step_of_math_pow() -> None:
    """Positive bases over a wide range and exponents in (−8, 8); negative bases with integer
    exponents; and C's special cases (0, ±inf, NaN, ±1), which must match exactly."""
    rng = np.random.default_rng(41)
    base = np.float32(np.exp(rng.uniform(-10, 10, 20_000)))
    exponent = rng.uniform(-8, 8, 20_000).astype(np.float32)
    base[:3000] *= -1
    exponent[:3000] = np.rint(exponent[:3000])
    specials = [
        (0.0, 2.0), (-0.0, 3.0), (-0.0, -3.0), (0.0, -1.5), (np.inf, -2.0), (-np.inf, 3.0),
        (-np.inf, 2.0), (np.nan, 0.0), (1.0, np.nan), (-1.0, np.inf), (-2.0, 0.5),
        (2.0, np.inf), (0.5, np.inf), (-8.0, 1 / 3), (np.nan, 2.0), (3.0, 2.0),
    ]  # fmt: skip
    base = np.concatenate([np.float32([b for b, _ in specials]), base])
    exponent = np.concatenate([np.float32([e for _, e in specials]), exponent])

    def power(b: float, e: float) -> float:
        if math.isnan(b) and e == 0:
            return 1.0
        if b == 0 and e < 0:
            return math.copysign(math.inf, b) if e % 2 == 1 else math.inf
        try:
            return math.pow(b, e)
        except OverflowError:
            return -math.inf if b < 0 and e % 2 == 1 else math.inf
        except ValueError:
            return math.nan

    with np.errstate(over="ignore"):
        values = [power(float(b), float(e)) for b, e in zip(base, exponent, strict=True)]
        oracle = canonical(np.array(values).astype(np.float32))
    model, feeds = one_node_model("Pow", [base, exponent], {}, opset=15)
    (got,) = exact_run(model, feeds)
    count = len(specials)
    assert_bits(got[:count], oracle[:count], "Pow of C's special cases")
    assert ulp_distance(got[count:], oracle[count:]).max() <= 1
    assert np.count_nonzero(got[count:] != oracle[count:]) <= base.size // 1000


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
@pytest.mark.parametrize("name", ["sigmoid", "tanh", "gelu", "softplus"])
def test_other_float_types_round_once_from_the_same_float64_value(name: str, dtype) -> None:
    """float16 and float64 outputs are the float64 formula rounded once into the type, on every
    backend alike."""
    op_type, attributes, opset, _, (low, high), _ = ACTIVATIONS[name]
    x = np.random.default_rng(3).uniform(low, high, 500).astype(dtype)
    model, feeds = one_node_model(op_type, [x], attributes, opset=opset)
    got32 = exact_run(*one_node_model(op_type, [x.astype(np.float32)], attributes, opset=opset))
    (got,) = exact_run(model, feeds)
    assert got.dtype == dtype
    if dtype == np.float16:  # float32's extra rounding is innocuous only near, not on, ties
        assert np.max(np.abs(got.astype(np.float64) - got32[0].astype(np.float64))) <= np.max(
            np.spacing(np.abs(got)).astype(np.float64)
        )
    assert_reference_bits(name, op_type, [x], attributes, opset, "checked-device")


# op, math oracle, sample range, (x, f(x)) special values
TRIGONOMETRIC: dict[str, tuple[Callable[[float], float], tuple, list]] = {
    "Sin": (math.sin, (-1e5, 1e5), [(0.0, 0.0), (-0.0, -0.0), (INF, NAN), (NAN, NAN)]),
    "Cos": (math.cos, (-1e5, 1e5), [(0.0, 1.0), (-INF, NAN), (NAN, NAN)]),
    "Tan": (math.tan, (-20.0, 20.0), [(0.0, 0.0), (-0.0, -0.0), (INF, NAN)]),
    "Asin": (math.asin, (-1.0, 1.0), [(1.0, math.pi / 2), (-1.0, -math.pi / 2), (2.0, NAN)]),
    "Acos": (math.acos, (-1.0, 1.0), [(1.0, 0.0), (-1.0, math.pi), (-2.0, NAN)]),
    "Atan": (math.atan, (-30.0, 30.0), [(INF, math.pi / 2), (-INF, -math.pi / 2), (-0.0, -0.0)]),
    "Sinh": (math.sinh, (-80.0, 80.0), [(-0.0, -0.0), (INF, INF), (-INF, -INF), (100.0, INF)]),
    "Cosh": (math.cosh, (-80.0, 80.0), [(0.0, 1.0), (-INF, INF), (100.0, INF)]),
    "Asinh": (
        math.asinh,
        (-1e4, 1e4),
        [(-0.0, -0.0), (INF, INF), (-INF, -INF), (3e38, math.asinh(float(np.float32(3e38))))],
    ),
    "Acosh": (math.acosh, (1.0, 1e4), [(1.0, 0.0), (INF, INF), (0.5, NAN)]),
    "Atanh": (math.atanh, (-0.9999, 0.9999), [(1.0, INF), (-1.0, -INF), (-0.0, -0.0), (2.0, NAN)]),
}


@pytest.mark.parametrize("op_type", sorted(TRIGONOMETRIC))
def test_trigonometric_functions_are_within_a_float32_step_of_the_math_module(op_type: str) -> None:
    """As the activations: the special values exactly, 20,000 samples within one float32 step
    of the math module's float64 function rounded once (measured: none differs), on every
    backend alike (the checked-device stand-in)."""
    function, (low, high), specials = TRIGONOMETRIC[op_type]
    x = _sample(op_type, low, high, specials)
    count = len(specials)
    oracle = correctly_rounded(function, x[count:])
    model, feeds = one_node_model(op_type, [x], {}, opset=9)
    (got,) = exact_run(model, feeds)
    limits = canonical(np.array([y for _, y in specials], dtype=np.float32))
    assert_bits(got[:count], limits, f"{op_type} of {specials}")
    assert ulp_distance(got[count:], oracle).max() <= 1
    assert np.count_nonzero(got[count:] != oracle) <= x.size // 1000
    assert_reference_bits(op_type, op_type, [x], {}, 9, "checked-device")


@pytest.mark.parametrize("size", [3, 700, 20_000])  # stacked below horner_segments' limit
def test_stacked_polynomials_give_the_bits_of_the_separate_functions(size: int) -> None:
    """sigmoid_and_tanh64 (an LSTM step's gates) and tanh64 (whose expm1 stacks its two
    polynomials) against sigmoid64, expm1 and tanh64 written out without stacking."""
    from onemodel.backends import exact_arrays, exact_elementary
    from onemodel.backends.checked_device import checked_xp

    rng = np.random.default_rng(size)
    scales = rng.choice([1e-6, 0.1, 0.3, 1.0, 4.0, 30.0, 800.0], size)
    values = rng.standard_normal(size) * scales
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 0.34657359027997264, -0.3465735902799726]
    x = np.concatenate([values, specials]).reshape(1, -1)
    split = x.shape[1] // 3

    def exp64(v: np.ndarray) -> np.ndarray:
        return exact_arrays.exp64(np, v)

    def tanh_unstacked(v: np.ndarray) -> np.ndarray:
        twice = np.minimum(np.abs(v), 22.0) * 2
        near = np.clip(twice, -math.log(2) / 2, math.log(2) / 2)
        series = exact_arrays.horner(np, near, exact_elementary.EXPM1_TERMS) * near
        e = np.where(np.abs(twice) < math.log(2) / 2, series, exp64(twice) - 1)
        return np.copysign(e / (e + 2), v)

    want_sigmoid = 1 / (exp64(-x[:, :split]) + 1)
    want_tanh = tanh_unstacked(x[:, split:])
    for xp in (np, checked_xp):
        host = getattr(xp, "asnumpy", np.asarray)
        sigmoid, tanh = map(host, exact_elementary.sigmoid_and_tanh64(xp, xp.asarray(x), split))
        assert np.array_equal(sigmoid, want_sigmoid, equal_nan=True)
        assert np.array_equal(tanh, want_tanh, equal_nan=True)
        assert np.array_equal(np.signbit(tanh), np.signbit(want_tanh))
        alone = host(exact_elementary.tanh64(xp, xp.asarray(x)))
        assert np.array_equal(alone, tanh_unstacked(x), equal_nan=True)
