"""Fast mode's float32 activation kernels (onemodel/backends/activations.py) against the same
operators evaluated in float64, special values included, and blocked against whole arrays."""

import numpy as np
import pytest

from onemodel.backends import activations, blocking
from onemodel.backends.numpy_cpu import compiled_activations
from tests.operator_harness import run_node

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e30, -1e30, 88.0, -88.0, -104.0]
# (operator, attributes, opset, absolute error allowed besides 4 float32 ulps of the result,
# times max(1, |x|): float32 steps such as alpha·x + beta cancel near a zero result, and exp(t) - 1
# stands for expm1, within an ulp of 1 times its factor)
CASES = [
    ("Relu", {}, 14, 0.0),
    ("LeakyRelu", {"alpha": 0.1}, 16, 0.0),
    ("LeakyRelu", {"alpha": 3.0}, 16, 0.0),
    ("LeakyRelu", {"alpha": -0.5}, 16, 0.0),
    ("Sigmoid", {}, 13, 2.0**-24),  # 1/2 + tanh(x/2)/2: absolute (test_sigmoid_...)
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 6, 2.0**-23),
    ("HardSwish", {}, 14, 2.0**-23),
    ("Softsign", {}, 1, 0.0),
    ("Elu", {"alpha": 0.7}, 6, 0.7 * 2.0**-23),
    ("Celu", {"alpha": 2.0}, 12, 2.0 * 2.0**-23),
    ("Selu", {}, 6, 1.76 * 2.0**-23),
    ("Softplus", {}, 1, 0.0),
    ("Mish", {}, 18, 0.0),
    ("ThresholdedRelu", {"alpha": 0.5}, 10, 0.0),
    ("ThresholdedRelu", {"alpha": -0.5}, 10, 0.0),
]


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(5)
    spread = rng.standard_normal(4000) * 10.0 ** rng.integers(-6, 3, 4000)
    return np.concatenate([SPECIAL, np.linspace(-12, 12, 4801), spread]).astype(np.float32)


@pytest.mark.parametrize(("op_type", "attributes", "opset", "absolute"), CASES)
def test_fast_float32_activations_match_the_float64_formula(op_type, attributes, opset, absolute):
    x = _inputs()
    (fast,) = run_node(op_type, [x], attributes, opset=opset)
    (wide,) = run_node(op_type, [x.astype(np.float64)], attributes, opset=opset)
    assert fast.dtype == np.float32
    truth = wide.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(truth), err_msg=op_type)
    finite = np.isfinite(truth)
    infinite = ~finite & ~np.isnan(truth)
    np.testing.assert_array_equal(fast[infinite], truth[infinite])
    # float32's exp overflows (to a 0 result) where the true result is below the smallest normal
    ulps = np.spacing(np.abs(truth[finite])).astype(np.float64) + 2.0**-126
    gap = np.abs(fast[finite].astype(np.float64) - wide[finite])
    allowed = 4 * ulps + (absolute * np.maximum(1.0, np.abs(x[finite])) if absolute else 0.0)
    assert np.all(gap <= allowed), (op_type, x[finite][np.argmax(gap / allowed)])


@pytest.mark.parametrize(("op_type", "attributes", "opset", "absolute"), CASES[:3] + CASES[4:6])
def test_signed_zero_results_as_the_formula_gives_them(op_type, attributes, opset, absolute):
    x = np.array([-0.0, -1.0, -100.0], np.float32)
    (fast,) = run_node(op_type, [x], attributes, opset=opset)
    (wide,) = run_node(op_type, [x.astype(np.float64)], attributes, opset=opset)
    zero = wide == 0
    np.testing.assert_array_equal(np.signbit(fast[zero]), np.signbit(wide[zero]))


def test_blocks_give_the_bits_of_the_whole_array(monkeypatch) -> None:
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32) * 5
    whole = np.empty_like(x)

    def scratch(shape, dtype):
        return np.empty(shape, dtype)

    activations.run_blocked(activations.gelu, np, x, whole, scratch, 4)
    monkeypatch.setattr(blocking, "BLOCKED_ABOVE", 1000)
    monkeypatch.setattr(blocking, "BLOCK", 777)  # blocks that do not divide the size
    blocked = np.empty_like(x)
    activations.run_blocked(activations.gelu, np, x, blocked, scratch, 4)
    np.testing.assert_array_equal(blocked, whole)
    in_place = x.copy()
    activations.run_blocked(activations.gelu, np, in_place, in_place, scratch, 4)
    np.testing.assert_array_equal(in_place, whole)


@pytest.mark.parametrize("length", [1, 7, 8, 9, 33, 1001])
def test_relu_gives_positive_zero_and_keeps_nan_at_every_length(length) -> None:
    """NumPy's maximum(-0, +0) is +0 in its vector loops and their scalar tails alike."""
    x = np.full(length, -0.0, np.float32)
    x[length // 2] = -np.nan
    (fast,) = run_node("Relu", [x], opset=14)
    assert np.isnan(fast[length // 2]) and not np.signbit(np.delete(fast, length // 2)).any()


def test_thresholded_relu_gives_positive_zero_below_and_nan_as_zero() -> None:
    x = np.array([-0.0, 0.0, 0.5, 0.75, np.nan, -np.nan, np.inf, -np.inf, -3.0], np.float32)
    (fast,) = run_node("ThresholdedRelu", [x], {"alpha": 0.5}, opset=10)
    np.testing.assert_array_equal(fast, [0, 0, 0, 0.75, 0, 0, np.inf, 0, 0])
    assert not np.signbit(fast).any()


def test_sigmoid_is_within_an_absolute_ulp_of_one_half(monkeypatch) -> None:
    """Fast Sigmoid without numba is 1/2 + tanh(x/2)/2, onnxruntime's kind of error: absolute,
    within 2⁻²⁴ (an ulp of the results in [1/2, 1)); the sweep also finds errors above half
    that bound, which the exp form 1/(1 + exp(-x)) would not show (its error is relative: the
    compiled form's, tests/test_compiled_activations.py)."""
    monkeypatch.delitem(compiled_activations.COMPILED, activations.sigmoid)
    x = np.arange(-40.0, 40.0, 2.0**-10, dtype=np.float32)
    (fast,) = run_node("Sigmoid", [x], opset=13)
    truth = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    gap = np.abs(fast - truth)
    assert gap.max() <= 1.01 * 2.0**-24
    assert gap.max() > 0.75 * 2.0**-24
    assert np.all(fast >= 0) and np.all(fast <= 1)
