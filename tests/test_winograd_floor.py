"""tools/winograd_floor.py times the steps around Winograd's core GEMMs in several forms and
sums the cheapest: a floor only if every form does the kernel's whole work. Each form of a
step must fill the same values, and the steps together must give the kernel's convolution
(against the float64 direct sum and numpy_cpu/winograd.py itself)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from onemodel.backends.numpy_cpu import NumpyKernels, winograd
from tests.test_fast_conv import direct_conv

_PATH = Path(__file__).resolve().parent.parent / "tools" / "winograd_floor.py"
_spec = importlib.util.spec_from_file_location("winograd_floor", _PATH)
winograd_floor = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("winograd_floor", winograd_floor)  # its dataclass looks itself up
_spec.loader.exec_module(winograd_floor)


@pytest.mark.parametrize(
    "batch, channels, filters, height, width",
    [
        (2, 48, 40, 13, 17),  # F(4×4), two images, cropped blocks
        (1, 32, 64, 90, 60),  # F(4×4), several bands of tile rows
        (2, 256, 32, 9, 7),  # F(2×2) from 256 channels
    ],
)
def test_every_form_of_a_step_does_the_kernels_work(batch, channels, filters, height, width):
    rng = np.random.default_rng(height)
    x = rng.standard_normal((batch, channels, height, width)).astype(np.float32)
    w = (rng.standard_normal((filters, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
    measured = winograd_floor.steps(x, w)
    assert len(measured.forms["tiles, Bᵀ·d·B"]) == 3 and len(measured.forms["Aᵀ·y·A, copy"]) == 3
    measured.check()  # raises where two forms of a step differ
    expected = direct_conv(x, w, (1, 1), (1,) * 4, (1, 1), 1)
    assert np.abs(measured.out - expected).max() / np.abs(expected).max() < 1e-4
    prepared = winograd.winograd_filter(w, 1).for_output(x.shape[0], x.shape[2:], (1, 1))
    assert prepared.block == measured.block
    kernel = np.empty_like(measured.out)
    assert winograd.winograd_conv(
        x, prepared, kernel, (1, 1), (1, 1), np.empty, NumpyKernels().matmul_arrays
    )
    np.testing.assert_allclose(measured.out, kernel, rtol=0, atol=1e-6 * np.abs(kernel).max())
