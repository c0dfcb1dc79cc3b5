"""Max pooling whose windows tile the input (kernel = strides, no dilation, none of the
padding read): CRNN's and VGG's 2×2/2 and 2×1/2×1, a 1-D CNN's 3/3.

Each window is a kh × kw block, so the maxima are kw − 1 passes over the column phases
(strided reads of every kw-th column), then kh − 1 over whole output rows of them (contiguous
runs: the rows of a window are consecutive stretches of one plane). The taps combine in
row-major window order, columns first, as the shared kernel's: the same bits, the first NaN
wins. [1, 64, 32, 128] 2×2/2: 88 against 225 us through the shared kernel (AMD EPYC, 1 thread).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.numpy_cpu.ufunc_buffers import small_buffers

# From this many input elements; below, the padded kernel's fewer calls win.
TILED_POOL_MIN = 1 << 12


def tiled_pool_fits(
    x_shape: Sequence[int],
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> bool:
    """Whether the windows of this 1-D or 2-D pooling tile the input from its first element:
    kernel = strides, no dilation, out = ⌊extent / kernel⌋ (so no window reads padding)."""
    spatial = tuple(x_shape[2:])
    return (
        len(spatial) in (1, 2)
        and math.prod(x_shape) >= TILED_POOL_MIN
        and tuple(kernel) == tuple(strides)
        and all(d == 1 for d in dilations)
        and tuple(out_spatial) == tuple(n // k for n, k in zip(spatial, kernel, strict=True))
        and all(o > 0 for o in out_spatial)
    )


class TiledMaxPool:
    """out = the max pooling of x (one shape that `tiled_pool_fits`), with its work array (one
    per run state, or per call) made at the first call."""

    def __init__(self, x_shape: Sequence[int], kernel: Sequence[int]) -> None:
        self.kernel = (1, *kernel) if len(kernel) == 1 else tuple(kernel)
        n, c, *spatial = x_shape
        height, width = (1, *spatial) if len(spatial) == 1 else spatial
        self.planes = (n, c, height, width)
        self.out_hw = (height // self.kernel[0], width // self.kernel[1])
        self.work: Any = None

    def __call__(self, x: Any, out: Any) -> None:
        """NumPy's errors ignored already. Small ufunc buffers: the default 8192-element ones
        would copy the strided column phases through 64 KB of temporaries a call."""
        with small_buffers():
            self._pool(x, out)

    def _pool(self, x: Any, out: Any) -> None:
        (kh, kw), (out_h, out_w) = self.kernel, self.out_hw
        n, c = self.planes[:2]
        x = x.reshape(self.planes)[:, :, : out_h * kh]
        target = out.reshape(n, c, out_h, out_w)
        if kw == 1:
            columns = x[:, :, :, :out_w]
        else:
            columns = target if kh == 1 else self._columns(x.dtype)
            np.maximum(x[..., 0 : out_w * kw : kw], x[..., 1 : out_w * kw : kw], out=columns)
            for j in range(2, kw):
                np.maximum(columns, x[..., j : out_w * kw : kw], out=columns)
        if kh == 1:
            if kw == 1:
                np.copyto(target, columns)
            return
        rows = columns.reshape(n, c, out_h, kh * columns.shape[3])
        step = columns.shape[3]
        np.maximum(rows[..., :out_w], rows[..., step : step + out_w], out=target)
        for i in range(2, kh):
            np.maximum(target, rows[..., i * step : i * step + out_w], out=target)

    def _columns(self, dtype: Any) -> np.ndarray:
        n, c, _, _ = self.planes
        (kh, _), (out_h, out_w) = self.kernel, self.out_hw
        if self.work is None:
            self.work = np.empty((n, c, out_h * kh, out_w), dtype)
        return self.work
