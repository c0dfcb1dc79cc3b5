"""The GPU backend; importable without CuPy, which is loaded only when the backend is built.

Its kernels (and the shared array kernels under them) load on first use of `CupyKernels`, so
that asking whether CuPy is here costs a NumPy session's cold start nothing more.
"""

from typing import Any

from onemodel.backends.cupy_gpu.availability import available, unavailable_reason

__all__ = ["CupyKernels", "available", "unavailable_reason"]


def __getattr__(name: str) -> Any:
    if name == "CupyKernels":
        from onemodel.backends.cupy_gpu.backend import CupyKernels

        return CupyKernels
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
