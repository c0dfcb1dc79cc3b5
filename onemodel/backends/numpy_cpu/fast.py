"""The NumPy fast backend: the shared array kernels over host memory, BLAS threads per run."""

from __future__ import annotations

from typing import Any

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.numpy_cpu.threads import BLAS_THREADS
from onemodel.tensors import HOST


class NumpyKernels(ArrayKernels):
    """Whatever NumPy does fastest (BLAS matmul, SIMD ufuncs); bits may vary across machines
    but not across thread counts."""

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy")

    def use_threads(self, count: int) -> None:
        BLAS_THREADS.use(count)

    def matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """Vector products on one BLAS thread: threaded gemv and dot split the sum over k."""
        if min(a.ndim, b.ndim) < 2 or a.shape[-2] == 1 or b.shape[-1] == 1:
            with BLAS_THREADS.single_threaded():
                super().matmul_arrays(a, b, out)
        else:
            super().matmul_arrays(a, b, out)
