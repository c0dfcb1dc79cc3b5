"""The NumPy fast backend: the shared array kernels over host memory, BLAS threads per run."""

from __future__ import annotations

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.numpy_cpu.threads import BLAS_THREADS
from onemodel.tensors import HOST


class NumpyKernels(ArrayKernels):
    """Whatever NumPy does fastest (BLAS matmul, SIMD ufuncs). Bits may vary across machines
    and BLAS thread counts (OpenBLAS picks other GEMM kernels when threaded); exact mode is
    the one whose bits do not."""

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy")

    def use_threads(self, count: int) -> None:
        BLAS_THREADS.use(count)
