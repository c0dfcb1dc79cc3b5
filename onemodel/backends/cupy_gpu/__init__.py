"""The GPU backend; importable without CuPy, which is loaded only when the backend is built."""

from onemodel.backends.cupy_gpu.backend import CupyKernels, available, unavailable_reason

__all__ = ["CupyKernels", "available", "unavailable_reason"]
