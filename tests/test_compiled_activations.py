"""The numba-compiled activations (numpy_cpu/compiled_activations.py) against the shared NumPy
kernels they replace on the host: the same bits (each operation rounded as NumPy rounds it),
NaN, ±0 and ±inf included, in place and in a channels-last layout; and the cases they
decline."""

from __future__ import annotations

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


def test_every_compiled_kernel_is_tested():
    assert set(COMPILED) == set(PARAMETERS)


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
    assert not run_compiled(activations.gelu, x, out, ())  # no compiled form
    assert np.isnan(out).all()
