"""What tells a runtime's outputs from onnxruntime's, for the export sweeps in tools/ (one
rule for all of them: integers equal, float16 within 1e-2, wider floats rtol 1e-3, atol 1e-4)."""

from __future__ import annotations

from typing import Any

import numpy as np


def tolerance(dtype: np.dtype) -> dict[str, float]:
    """float16 within a few of its ulps (2**-10 at 1); float32 and wider as targets.md asks."""
    return {"rtol": 1e-2, "atol": 1e-2} if dtype == np.float16 else {"rtol": 1e-3, "atol": 1e-4}


def first_difference(got: list[Any], want: list[np.ndarray]) -> str | None:
    """None when every output matches, else what differs first."""
    if len(got) != len(want):
        return f"{len(got)} outputs, not {len(want)}"
    for index, (have, expected) in enumerate(zip(got, want, strict=True)):
        have = np.asarray(have)
        if have.dtype != expected.dtype or have.shape != expected.shape:
            return f"output {index}: {have.dtype}{have.shape}, not {expected.dtype}{expected.shape}"
        if expected.dtype.kind in "biu":
            if not np.array_equal(have, expected):
                return f"output {index}: integers differ"
        elif expected.size and not np.allclose(
            have, expected, equal_nan=True, **tolerance(expected.dtype)
        ):
            gap = np.nanmax(np.abs(have.astype(np.float64) - expected))
            return f"output {index}: max abs difference {gap:.3g}"
    return None
