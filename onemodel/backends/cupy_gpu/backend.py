"""The CuPy backend: the shared array kernels over CUDA device memory.

CuPy is imported only inside functions, so this module (and the backend table that names it)
imports on machines without CuPy or a GPU; asking for the backend there raises
BackendUnavailableError with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.cupy_gpu.availability import unavailable_reason
from onemodel.backends.cupy_gpu.elementwise import ElementwiseSource, generated_tail
from onemodel.backends.errors import BackendUnavailableError
from onemodel.tensors import DType, Memory
from onemodel.tensors.buffers import ALIGNMENT


def device_memory() -> Memory:
    """CuPy's memory: device bytes, copied to the host with `cupy.asnumpy`."""
    reason = unavailable_reason()
    if reason is not None:
        raise BackendUnavailableError(f"the cupy backend is unavailable: {reason}")
    import cupy

    def allocate(nbytes: int) -> Any:
        block = cupy.empty(nbytes, dtype=cupy.uint8)
        if block.data.ptr % ALIGNMENT:
            raise RuntimeError(
                f"CuPy returned device memory at {block.data.ptr:#x}, not {ALIGNMENT}-byte aligned"
            )
        return block

    return Memory("cupy", cupy, allocate, to_host=cupy.asnumpy, array_dtype=_array_dtype)


def _array_dtype(dtype: DType) -> np.dtype:
    """CuPy has no bfloat16, so BFLOAT16 elements are kept as their uint16 bit patterns."""
    return np.dtype(np.uint16) if dtype is DType.BFLOAT16 else dtype.numpy


class CupyKernels(ArrayKernels):
    """The array kernels with cupy as `xp`; raises BackendUnavailableError without CUDA.

    CuPy compiles its element-wise kernels with -ftz=true (appended to any options given), so
    their arithmetic and comparisons read and write subnormals as zeros of the same sign; moves
    (copies, the value a select picks) keep the bits.
    """

    flushes_subnormals = True

    def __init__(self) -> None:
        super().__init__(device_memory(), name="cupy")
        self._kernels: dict[ElementwiseSource, Any] = {}

    def synchronize(self) -> None:
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    # The element-wise tail of a Fused step as one generated kernel (Fused calls both).
    elementwise_tail = staticmethod(generated_tail)

    def run_elementwise_chain(
        self, source: ElementwiseSource, x: Any, operands: list[Any], out: Any
    ) -> None:
        """out = the generated chain over x and the operands (broadcast), in one launch; each
        source is compiled once (CuPy also caches the binary on disk)."""
        kernel = self._kernels.get(source)
        if kernel is None:
            import cupy

            kernel = cupy.ElementwiseKernel(
                source.in_params, source.out_params, source.operation, source.name,
                options=source.options,
            )  # fmt: skip
            kernel = self._kernels.setdefault(source, kernel)
        kernel(x, *operands, out)
