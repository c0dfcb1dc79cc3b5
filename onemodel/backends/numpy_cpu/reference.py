"""The reference kernels: the definition every other backend is measured against.

Element-wise operations are inherited unchanged (each is one correctly rounded NumPy ufunc, so
there is nothing to define differently); matmul and max pooling are restated here as direct
transcriptions of their rules, deliberately unlike the fast code, so the two check each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.pooling import PoolGeometry
from onemodel.tensors import HOST, Tensor


class ReferenceKernels(ArrayKernels):
    """Plain single-threaded NumPy with a fixed order of operations: same bits on any machine.

    Exact mode's entry points (`exact_*_arrays`) are inherited unchanged: exact_arrays.py is
    their one definition, so this path and "numpy" give the same exact bits by construction.
    """

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy-reference")

    def _matmul(self, a: Any, b: Any, out: Any) -> None:
        """Float64 accumulation in the canonical order k = 0, 1, …, K−1, then one rounding.

        Each float32 product is exact in float64, so only the K float64 additions and the final
        rounding to float32 round, always in the same order (for float64, only the additions).
        """
        a64 = a.astype(np.float64)
        b64 = b.astype(np.float64)
        acc = np.zeros(out.shape, dtype=np.float64)
        for k in range(a.shape[-1]):
            acc += a64[..., :, k, None] * b64[..., None, k, :]
        out[...] = acc.astype(out.dtype)

    def matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """Floating matmuls (and so the convolutions built on them) in the canonical order.

        Integer matmuls are exact in any order, so they keep NumPy's.
        """
        if out.dtype.kind in "iu":
            super().matmul_arrays(a, b, out)
        else:
            self.exact_matmul_arrays(a, b, out)

    def _max_pool2d(self, x: Any, out: Any, geometry: PoolGeometry, indices: Any | None) -> None:
        """For each window offset in row-major order, over every window at once: a real element
        is taken if the window has no value yet, if it is greater, or if it is the first NaN."""
        rows, cols = geometry.rows, geometry.cols
        ys = np.array([rows.position(o, 0) for o in range(rows.extent)])[:, None]
        xs = np.array([cols.position(o, 0) for o in range(cols.extent)])[None, :]
        best = np.zeros(out.shape, dtype=out.dtype)
        where = np.zeros(out.shape, dtype=np.int32)
        has_value = np.zeros(out.shape, dtype=bool)
        for ky, kx in geometry.window_offsets():
            y, x_pos = ys + ky, xs + kx
            real = (y >= 0) & (y < rows.size) & (x_pos >= 0) & (x_pos < cols.size)
            values = x[:, :, y.clip(0, rows.size - 1), x_pos.clip(0, cols.size - 1)]
            first_nan = np.isnan(values) & ~np.isnan(best)
            take = real & (~has_value | (values > best) | first_nan)
            best = np.where(take, values, best)
            where = np.where(take, y * cols.size + x_pos, where)
            has_value |= real
        out[...] = best
        if indices is not None:
            indices[...] = where

    def reduce_sum(self, x: Tensor, out: Tensor) -> None:
        """The canonical order (exact_reduce_sum) is the meaning of the eager layer's sum."""
        self.exact_reduce_sum(x, out)
