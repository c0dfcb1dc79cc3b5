"""3×3 stride-2 max pooling (pad 1, even height and width) of float32 without strided loops.

A stride-2 window reads every other column, which NumPy reads only through a strided loop (a
strided copy of x's column phases costs 36 us at [1, 64, 64, 64], AMD EPYC, one thread). Two
float32 columns side by side are one uint64, so a truncating cast of x viewed as uint64 is the
even columns and the same cast of x shifted by one float the odd columns: contiguous casts of
17 us each, bits moved unchanged (NaN payloads too). After that, four contiguous maxima over
flat runs (columns, then rows over whole rows at once) and small border fix-ups: 145 against
295 us at [1, 64, 64, 64] (onnxruntime 164, the same loaded run); a block of planes at a time
above plane_blocks' bound (2.4 against 4.1 ms at [1, 64, 256, 256]). The taps combine in
row-major window order, columns first, as the shared kernel's: the same bits, the first NaN wins.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.numpy_cpu.plane_blocks import plane_blocks

# From this many input elements; below, the padded kernel's fewer calls win (padded_pool.py:
# 7.7 against 10.8 us at [1, 4, 16, 16], 18.1 against 15.4 at [1, 16, 32, 32]).
PAIR_POOL_MIN = 1 << 13


def pair_max_pool_fits(
    x_shape: Sequence[int],
    out_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    dtype: Any,
) -> bool:
    """Whether `PairMaxPool` computes this pooling, and pays: float32 (N, C, H, W) of at least
    PAIR_POOL_MIN elements with H and W even, a 3×3 window moved by 2 from a leading pad of 1,
    no dilation, H/2 × W/2 windows."""
    if len(x_shape) != 4 or np.dtype(dtype) != np.float32 or sys.byteorder != "little":
        return False
    height, width = x_shape[2:]
    return (
        height % 2 == 0
        and width % 2 == 0
        and height >= 2
        and width >= 2
        and math.prod(x_shape) >= PAIR_POOL_MIN
        and tuple(out_hw) == (height // 2, width // 2)
        and tuple(kernel) == (3, 3)
        and tuple(strides) == (2, 2)
        and tuple(pads) == (1, 1)
        and tuple(dilations) == (1, 1)
    )


class PairMaxPool:
    """Max pooling of (N, C, H, W) float32 arrays of one shape that `pair_max_pool_fits`,
    with this instance's work arrays (one per run state, or per call), made at the first
    call as large as its first (largest) block needs."""

    def __init__(self, x_shape: Sequence[int]) -> None:
        n, c, height, width = x_shape
        self.out_shape = (n, c, height // 2, width // 2)
        self.work: tuple[Any, Any, Any] | None = None

    def __call__(self, x: Any, out: Any) -> None:
        """out = the pooling of x; NumPy's errors ignored already."""
        x = np.ascontiguousarray(x)
        target = out if out.flags.c_contiguous else np.empty(self.out_shape, np.float32)
        for block_x, block_out in plane_blocks(x, target):
            self._pool(block_x, block_out)
        if target is not out:
            np.copyto(out, target)

    def _pool(self, x: Any, out: Any) -> None:
        height, width = x.shape[2:]
        planes = x.shape[0] * x.shape[1]
        half_w = width // 2
        flat = x.reshape(-1)
        half = flat.size // 2
        if self.work is None or self.work[0].size < half:
            self.work = tuple(np.empty(half, np.float32) for _ in range(3))
        even, odd, columns = (array[:half] for array in self.work)
        # the phases: low and high float of each uint64 pair (little-endian)
        np.copyto(even.view(np.uint32), flat.view(np.uint64), casting="unsafe")
        np.copyto(odd.view(np.uint32)[:-1], flat[1:-1].view(np.uint64), casting="unsafe")
        odd[-1] = flat[-1]
        # columns 2j−1, 2j, 2j+1; column 0's window starts at the pad
        np.maximum(odd[:-1], even[1:], out=columns[1:])
        grid = columns.reshape(planes, height, half_w)
        np.copyto(grid[:, :, 0], even.reshape(planes, height, half_w)[:, :, 0])
        np.maximum(columns, odd, out=columns)
        # rows 2i−1, 2i, 2i+1 over whole rows (every row, the odd ones dropped); row 0's
        # window starts at the pad
        above, below = even, odd  # free again
        np.maximum(columns[:-half_w], columns[half_w:], out=above[half_w:])
        np.maximum(above[: half - half_w], columns[half_w:], out=below[: half - half_w])
        result = out.reshape(planes, height // 2, half_w)
        np.copyto(result, below.reshape(planes, height // 2, 2, half_w)[:, :, 0])
        np.maximum(grid[:, 0], grid[:, 1], out=result[:, 0])
