"""The NumPy fast backend: the shared array kernels over host memory, BLAS threads per run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.array_types import Scratch
from onemodel.backends.fp_errors import quiet
from onemodel.backends.numpy_cpu.depthwise import depthwise_conv
from onemodel.backends.numpy_cpu.movement import take_checked, transpose_copy
from onemodel.backends.numpy_cpu.threads import BLAS_THREADS
from onemodel.backends.numpy_cpu.winograd import WinogradFilter, winograd_conv, winograd_filter
from onemodel.tensors import HOST

_DEPTHWISE_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


@dataclass(frozen=True)
class PreparedConv:
    """A constant W prepared once per plan: the matrix the direct paths multiply and, for a
    3×3 filter worth it, its Winograd transform."""

    matrix: Any
    winograd: WinogradFilter


class NumpyKernels(ArrayKernels):
    """Whatever NumPy does fastest (BLAS matmul, SIMD ufuncs). Bits may vary across machines
    and BLAS thread counts (OpenBLAS picks other GEMM kernels when threaded); exact mode is
    the one whose bits do not."""

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy")

    def use_threads(self, count: int) -> None:
        BLAS_THREADS.use(count)

    def conv_weights(self, w: Any, group: int) -> Any:
        """The shared matrix, with the Winograd transform of a 3×3 filter that has one."""
        matrix = super().conv_weights(w, group)
        transformed = winograd_filter(w, group)
        return matrix if transformed is None else PreparedConv(matrix, transformed)

    def conv_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        scratch: Scratch | None = None,
        weights: Any | None = None,
    ) -> None:
        """Winograd for a stride-1 3×3 float32 convolution with a prepared transform whose
        tiles fill its GEMMs, tap by tap for a 2-D depthwise one (numpy_cpu/depthwise.py:
        0.5–0.8× im2col's time, 1 thread), the shared paths for the rest."""
        if isinstance(weights, PreparedConv):
            with quiet():  # inf · 0 and overflow are results, as in `binary`
                done = (
                    tuple(strides) == (1, 1)
                    and x.dtype == out.dtype == weights.winograd.transformed.dtype
                    and winograd_conv(
                        x,
                        weights.winograd,
                        out,
                        tuple(pads),
                        tuple(dilations),
                        scratch or self._allocate,
                        self.matmul_arrays,
                    )
                )
            if done:
                return
            weights = weights.matrix
        if (
            x.ndim == 4
            and group == x.shape[1] == w.shape[0]
            and w.shape[2:] != (1, 1)
            and x.dtype == out.dtype
            and x.dtype in _DEPTHWISE_TYPES
        ):
            taps = w.reshape(group, -1) if weights is None else weights.reshape(group, -1)
            with quiet():
                depthwise_conv(
                    x, taps, out, strides, pads, dilations, w.shape[2:], scratch or self._allocate
                )
            return
        super().conv_arrays(x, w, out, strides, pads, dilations, group, scratch, weights)

    def transpose_arrays(self, x: Any, perm: Sequence[int], out: Any) -> None:
        """Blocked for the cache (numpy_cpu/movement.py)."""
        transpose_copy(x, perm, out)

    def take_arrays(self, data: Any, positions: Any, axis: int, out: Any) -> None:
        take_checked(data, positions, axis, out)

    @staticmethod
    def _allocate(shape: Sequence[int], dtype: Any) -> Any:
        return np.empty(tuple(shape), dtype=dtype)
