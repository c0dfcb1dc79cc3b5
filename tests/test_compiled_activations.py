"""The numba-compiled activations (numpy_cpu/compiled_activations.py) against the shared NumPy
kernels they replace on the host: the same bits (each operation rounded as NumPy rounds it),
NaN, ±0 and ±inf included, in place and in a channels-last layout; and the cases they
decline."""

from __future__ import annotations

import math

import numpy as np
import pytest

from onemodel.backends import activations
from onemodel.backends.numpy_cpu.compiled_activations import COMPILED, run_compiled

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.0, -3.0, 1e-40, -1e-40], np.float32)
PARAMETERS = {
    activations.hard_sigmoid: [(0.2, 0.5), (1.0 / 6.0, 0.5), (-0.5, 0.25)],
    activations.hard_swish: [()],
    activations.leaky_relu: [(0.01,), (0.0,), (1.5,), (-0.3,)],
    activations.thresholded_relu: [(1.0,), (0.0,), (-2.0,)],
}


def _numpy_form(kernel, x: np.ndarray, parameters: tuple) -> np.ndarray:
    """The shared kernel's result; for LeakyRelu ONNX's definition where(x < 0, alpha·x, x),
    which the compiled form keeps and the NumPy form's max(x, alpha·x) does not at +inf with
    alpha 0 (0·inf is NaN) or at -0 with a negative alpha (+0)."""
    if kernel is activations.leaky_relu:
        with np.errstate(all="ignore"):
            return np.where(x < 0, x * np.float32(parameters[0]), x)
    out = np.empty_like(x)
    with np.errstate(all="ignore"):
        kernel(np, x, out, [np.empty_like(x) for _ in range(3)], *parameters)
    return out


def _cases():
    for kernel, sets in PARAMETERS.items():
        for parameters in sets:
            yield pytest.param(kernel, parameters, id=f"{kernel.__name__}{parameters}")


GATES = {
    activations.sigmoid: [()],
    activations.swish: [(1.0,), (1.702,), (-0.5,)],
}


# Erf and Gelu's erf form are held to their stated bounds through the operator over a dense
# sweep (tests/test_fast_erf.py); Gelu's tanh form and Erf's special values here.
ODD = {activations.gelu, activations.gelu_tanh, activations.erf}


def test_every_compiled_kernel_is_tested():
    assert set(COMPILED) == set(PARAMETERS) | set(GATES) | ODD


def test_erf_keeps_the_sign_of_zero_and_tiny_values_and_saturates():
    x = np.concatenate([SPECIAL, np.float32([1e-30, -(2.0**-126), 0.6249, 0.6251, 9.0, -40.0])])
    out = np.full_like(x, 7.0)
    assert run_compiled(activations.erf, x, out, ())
    want = np.array([math.erf(v) if not math.isnan(v) else v for v in x.tolist()], np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(want))
    np.testing.assert_allclose(out[~nan], want[~nan], rtol=4 * 2.0**-24, atol=0)


def _parameters(kernel) -> tuple:
    return {**PARAMETERS, **GATES}.get(kernel, [()])[0]


@pytest.mark.parametrize(
    "kernel", sorted(COMPILED, key=lambda k: k.__name__), ids=lambda k: k.__name__
)
def test_in_place_gives_what_apart_gives(kernel):
    """out may be x's memory (the planner reuses a dead input's buffer): each kernel reads a
    value before writing it, and takes its in-place loop there."""
    x = np.random.default_rng(5).standard_normal(3000).astype(np.float32) * 4
    x[::97] = SPECIAL[0]
    apart = np.empty_like(x)
    assert run_compiled(kernel, x, apart, _parameters(kernel))
    assert run_compiled(kernel, x, x, _parameters(kernel))
    np.testing.assert_array_equal(x, apart)


def test_overlapping_but_shifted_arrays_are_declined_untouched():
    values = np.arange(4001, dtype=np.float32)
    for kernel in COMPILED:
        assert not run_compiled(kernel, values[1:], values[:-1], _parameters(kernel))
    np.testing.assert_array_equal(values, np.arange(4001, dtype=np.float32))


def test_gelu_tanh_is_x_times_the_sigmoid_of_2u_relatively_accurate():
    """x/(1 + e^(-2u)), u = √(2/π)·(x + 0.044715·x³), against float64's: no 1 + tanh(u) to
    cancel in the negative tail, so the error is relative there too, within (4 + 3·|2u|)·2^-24
    (2u rounded in float32 is off by up to a few ulps of itself, which e^(-2u) turns into
    that much relative error: the float32 evaluation's, not the kernel's)."""
    x = np.concatenate([np.linspace(-12, 12, 40001), np.geomspace(1e-30, 1e4, 2000)])
    x = np.concatenate([x, -x]).astype(np.float32)
    out = np.empty_like(x)
    assert run_compiled(activations.gelu_tanh, x, out, ())
    wide = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (wide + 0.044715 * wide**3)
    with np.errstate(over="ignore"):
        truth = wide / (1 + np.exp(-2 * u))
    large = np.abs(truth) >= 1e-30
    bound = (4 + 3 * np.abs(2 * u[large])) * 2.0**-24
    assert np.all(np.abs(out[large] - truth[large]) / np.abs(truth[large]) <= bound)
    assert np.all(np.abs(out[~large] - truth[~large]) <= 1e-30)


@pytest.mark.parametrize(
    ("kernel", "parameters"),
    [pytest.param(k, p, id=f"{k.__name__}{p}") for k, sets in GATES.items() for p in sets],
)
def test_the_exp_gate_is_within_3_times_2_to_the_minus_24_relative(kernel, parameters):
    """Sigmoid and Swish through Cephes' expf against float64's: relative error within
    3·2^-24, a float32 ulp and a half at most (the NumPy form's tanh is accurate to 2^-24
    absolute only), the limits at ±inf, NaN kept, and what the NumPy form gives at the
    infinities of Swish (inf, and NaN for inf·0)."""
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [SPECIAL, np.linspace(-110, 110, 20001, dtype=np.float32), rng.standard_normal(4000)]
    ).astype(np.float32)
    out = np.empty_like(x)
    assert run_compiled(kernel, x, out, parameters)
    alpha = np.float32(parameters[0] if parameters else 1.0)
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        # exp's argument as float32 forms it (-alpha·x rounded, exact for alpha 1): its
        # rounding, up to 2^-24·|alpha·x| absolute, is the parameter's, not the kernel's.
        truth = 1 / (1 + np.exp((-alpha * x).astype(np.float64)))
        truth = truth * wide if kernel is activations.swish else truth
    finite = np.isfinite(x)
    # Relative where the result is well above float32's smallest normal; below 1e-30 (the
    # exp clamped past 89, Swish's x·e^-89 with |x| up to 1e8) within 1e-30.
    large = finite & (np.abs(truth) >= 1e-30)
    error = np.abs(out[large] - truth[large]) / np.abs(truth[large])
    assert error.max() <= 3 * 2.0**-24
    assert np.all(np.abs(out[finite & ~large] - truth[finite & ~large]) <= 1e-30)
    expected_special = _numpy_form(kernel, SPECIAL, parameters)
    got = out[: len(SPECIAL)]
    for index in (0, 1, 2):  # NaN, +inf, -inf
        np.testing.assert_array_equal(got[index], expected_special[index])


@pytest.mark.parametrize(("kernel", "parameters"), list(_cases()))
def test_a_compiled_activation_gives_the_numpy_forms_values(kernel, parameters):
    rng = np.random.default_rng(5)
    x = np.concatenate([SPECIAL, (rng.standard_normal(3000) * 6).astype(np.float32)])
    x = x.reshape(3, -1)
    expected = _numpy_form(kernel, x, parameters)
    out = np.full_like(x, 7.0)
    assert run_compiled(kernel, x, out, parameters)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    # In place: out may be x's memory.
    inplace = x.copy()
    assert run_compiled(kernel, inplace, inplace, parameters)
    np.testing.assert_array_equal(inplace, out)


def test_values_held_channels_last_run_in_their_memory_order():
    rng = np.random.default_rng(6)
    held = rng.standard_normal((2, 5, 6, 7)).astype(np.float32).transpose(0, 3, 1, 2)
    out = np.empty((2, 5, 6, 7), np.float32).transpose(0, 3, 1, 2)
    assert run_compiled(activations.hard_swish, held, out, ())
    np.testing.assert_array_equal(out, _numpy_form(activations.hard_swish, held, ()))


def test_other_types_layouts_and_kernels_are_declined_untouched():
    x = np.ones((4, 6), np.float32)
    out = np.full((4, 6), np.nan, np.float32)
    assert not run_compiled(activations.hard_swish, x.astype(np.float64), out, ())
    assert not run_compiled(activations.hard_swish, x, out.astype(np.float16), ())
    assert not run_compiled(activations.hard_swish, x[:, ::2], out[:, ::2], ())  # strided
    assert not run_compiled(activations.hard_swish, x, np.full((6, 4), 0.0, np.float32).T, ())
    assert not run_compiled(activations.softplus, x, out, ())  # no compiled form
    assert np.isnan(out).all()
