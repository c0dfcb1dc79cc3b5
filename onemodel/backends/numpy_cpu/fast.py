"""The NumPy fast backend: the shared array kernels over host memory."""

from __future__ import annotations

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.tensors import HOST


class NumpyKernels(ArrayKernels):
    """Whatever NumPy does fastest (BLAS matmul, SIMD ufuncs); bits may vary across machines."""

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy")
