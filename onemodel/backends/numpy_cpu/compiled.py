"""Numba, where it is installed, for the loops NumPy cannot write as a few whole-array passes.

A depthwise convolution in NumPy is taps × 2 passes over memory, or a copy of every tap's
columns and a BLAS product per channel (numpy_cpu/depthwise.py); compiled, every output pixel
sums its taps in registers in one pass. Numba is optional: where it is missing, fails to
import, or ONEMODEL_JIT=0 is set, `jitted` returns None and the NumPy forms run. It is
imported only when a session first binds a step that has a compiled form, so loading and
running a model without one never pays its import (tests/test_cold_start.py).

Compiled code is cached on disk (numba's `cache=True`: beside this package where it can
write, else in the user's cache folder, else not at all), so a kernel compiles once per
machine and specialisation, not once per process. Fast mode only: exact mode never runs
these forms.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

# Set to 0 to run the NumPy forms only (the comparison in tests, or a platform where numba
# misbehaves).
ENVIRONMENT_SWITCH = "ONEMODEL_JIT"


@functools.cache
def _numba() -> Any | None:
    if os.environ.get(ENVIRONMENT_SWITCH, "1") == "0":
        return None
    try:
        import numba
    except Exception:  # not installed, or built for another NumPy: the NumPy forms run
        return None
    return numba


@functools.cache
def jitted(function: Callable[..., Any], contract: bool = True) -> Callable[..., Any] | None:
    """`function` compiled by numba (no Python objects, bounds unchecked, IEEE division, and
    with `contract` a multiply and an add fused into one rounding where the compiler likes),
    or None where numba is not available."""
    numba = _numba()
    if numba is None:
        return None
    # error_model "numpy": a division by zero is IEEE's, not a Python exception (whose check
    # stops a loop with a division from vectorising).
    options = {
        "boundscheck": False,
        "error_model": "numpy",
        "fastmath": {"contract"} if contract else False,
    }
    try:
        return numba.njit(cache=True, **options)(function)
    except RuntimeError:  # no folder numba can write its cache to: compile once per process
        return numba.njit(**options)(function)
