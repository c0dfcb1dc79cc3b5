"""Whether the CuPy backend can run here: asked by the backend table on every selection, so it
imports nothing but CuPy itself (the backend's kernels load only when the backend is built)."""

from __future__ import annotations


def unavailable_reason() -> str | None:
    """Why the CuPy backend cannot run here, or None when it can."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # a missing library, driver or device all mean "not here"
        return f"CuPy cannot reach a CUDA device: {type(error).__name__}: {error}"
    if count <= 0:
        return "CuPy found no CUDA device"
    return None


def available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    return unavailable_reason() is None
