"""The numba-compiled depthwise form (numpy_cpu/compiled_taps.py) against a float64 direct sum,
planar and channels last, in each layout x and out can be held in; the rule that picks it; and
the NumPy forms that run where numba is switched off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from onemodel.backends.numpy_cpu import compiled_taps, depthwise
from onemodel.backends.numpy_cpu.compiled_taps import CompiledTaps
from tests.test_depthwise_held import CASES, direct_depthwise

# Beyond test_depthwise_held's small planes: rows long enough to take the vector loop and its
# remainder, a stride of 2 across wide rows, a 7×7 kernel.
LAYER_CASES = {
    "3x3 56 wide": ((1, 5, 20, 56), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    "3x3/2 45 wide": ((2, 3, 9, 45), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "7x7 batch 2": ((2, 4, 15, 19), (7, 7), (1, 1), (3, 3, 3, 3), (1, 1)),
    "5x5/2 asymmetric": ((1, 17, 14, 14), (5, 5), (2, 2), (1, 2, 2, 1), (1, 1)),
}
ALL_CASES = {**CASES, **LAYER_CASES}
LAYOUTS = {
    "planar": (False, False),
    "x channels last": (True, False),
    "out channels last": (False, True),
    "both channels last": (True, True),
}


def _held(array: np.ndarray, channels_last: bool) -> np.ndarray:
    """`array`'s values, held NHWC when `channels_last` (an NCHW view with NHWC strides)."""
    if not channels_last:
        return array.copy()
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("plane_rule", ["by plane size", "every plane channels last"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", ALL_CASES)
def test_the_compiled_form_matches_the_direct_sum(name, layout, plane_rule, with_bias, monkeypatch):
    if plane_rule != "by plane size":
        monkeypatch.setattr(compiled_taps, "CHANNELS_LAST_PIXELS", 1 << 30)
    x_shape, kernel, strides, pads, dilations = ALL_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((x_shape[1], 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(x_shape[1]).astype(np.float32)
    expected = direct_depthwise(x, w, strides, pads, dilations)
    expected += b.reshape(-1, 1, 1) if with_bias else 0
    x_last, out_last = LAYOUTS[layout]
    held = depthwise.held_grouped(
        x.shape, w.reshape(w.shape[0], -1), expected.shape, kernel, strides, pads, dilations,
        x_channels_last=x_last, out_channels_last=out_last,
    )  # fmt: skip
    assert isinstance(held, CompiledTaps)
    out = _held(np.full(expected.shape, np.nan, np.float32), out_last)
    assert held(_held(x, x_last), out, b if with_bias else None)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    # A second run gives the same bits: the padded buffer's margins stayed zero.
    again = np.empty_like(out)
    assert held(_held(x, x_last), again, b if with_bias else None)
    np.testing.assert_array_equal(again, out)


@pytest.mark.parametrize("channels_last", [False, True], ids=["planar", "channels last"])
def test_an_output_not_contiguous_in_its_layout_is_declined_untouched(channels_last, monkeypatch):
    """A channel slice of a larger array (a Concat's input): False, nothing written, so that
    the step's unbound run writes it."""
    monkeypatch.setattr(compiled_taps, "CHANNELS_LAST_PIXELS", (1 << 30) if channels_last else 0)
    _, kernel, strides, pads, dilations = CASES["3x3"]
    x_shape = (2, 5, 9, 8)  # two images: a channel slice is not one contiguous run
    x = np.ones(x_shape, np.float32)
    taps = np.ones((x_shape[1], 9), np.float32)
    whole = np.full((2, x_shape[1] + 2, *x_shape[2:]), np.nan, np.float32)
    out = whole[:, 1:-1]
    held = CompiledTaps(x_shape, taps, out.shape, kernel, strides, pads, dilations)
    assert not held(x, out, None)
    assert np.isnan(whole).all()


def test_the_rule_takes_the_compiled_form_for_float32_windows_it_specialises():
    x_shape, taps = (1, 8, 12, 12), np.ones((8, 9), np.float32)
    window = ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
    assert isinstance(depthwise.held_grouped(x_shape, taps, x_shape, *window), CompiledTaps)
    assert not isinstance(
        depthwise.held_grouped(x_shape, taps.astype(np.float64), x_shape, *window), CompiledTaps
    )
    # Strides past LARGEST_STRIDE keep the NumPy forms.
    strided = ((3, 3), (3, 3), (1, 1, 1, 1), (1, 1))
    held = depthwise.held_grouped(x_shape, taps, (1, 8, 4, 4), *strided)
    assert not isinstance(held, CompiledTaps)


def test_with_numba_switched_off_the_numpy_forms_run():
    """ONEMODEL_JIT=0 in a fresh interpreter: no compiled form, numba never imported, and a
    depthwise model still gives the direct sum."""
    script = """
import json, sys
import numpy as np
from onemodel.backends.numpy_cpu import depthwise
from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.compiled_taps import _depthwise_planes
x_shape, taps = (1, 8, 12, 12), np.ones((8, 9), np.float32)
held = depthwise.held_grouped(x_shape, taps, x_shape, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
print(json.dumps([type(held).__name__, jitted(_depthwise_planes) is None, "numba" in sys.modules]))
"""
    env = {**os.environ, "ONEMODEL_JIT": "0"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    form, no_kernel, imported = json.loads(result.stdout.splitlines()[-1])
    assert form != "CompiledTaps" and no_kernel and not imported
