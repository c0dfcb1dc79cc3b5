"""3×3 stride-2 max and row-major sum pooling (pad 1, even height and width) of float32
without strided loops over columns.

A stride-2 window reads every other column, which NumPy reads only through a strided loop (a
strided copy of x's column phases costs 36 us at [1, 64, 64, 64], AMD EPYC, one thread). Two
float32 columns side by side are one uint64, so a truncating uint64→uint32 cast of x viewed as
uint64 is its even columns and the same cast of x shifted by one float its odd columns: casts
of 17 us each, bits moved unchanged (NaN payloads too).

Max (`PairMaxPool`): the two column phases of whole x, then four contiguous maxima over flat
runs (columns, then rows over whole rows at once) and small border fix-ups: 145 against 295 us
at [1, 64, 64, 64] (onnxruntime 164, the same loaded run); 2.4 against 4.1 ms at
[1, 64, 256, 256] in plane blocks. The taps combine in row-major window order, columns first,
as the shared kernel's: the same bits, the first NaN wins.

Sums (`PairSumPool`, onnxruntime's row-major order of opset 19): the four row and column phases
cast into held grids padded by −0 (x + −0 = x), then every tap one flat run of a grid, in
row-major window order; the division by the counts drops the slack.
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


def pair_pool_fits(
    x_shape: Sequence[int],
    out_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    dtype: Any,
) -> bool:
    """Whether the pair kernels compute this pooling, and pay: float32 (N, C, H, W) of at least
    PAIR_POOL_MIN elements with H and W even and W ≥ 4, a 3×3 window moved by 2 from a leading
    pad of 1, no dilation, H/2 × W/2 windows."""
    if len(x_shape) != 4 or np.dtype(dtype) != np.float32 or sys.byteorder != "little":
        return False
    height, width = x_shape[2:]
    return (
        height % 2 == 0
        and width % 2 == 0
        and height >= 2
        and width >= 4
        and math.prod(x_shape) >= PAIR_POOL_MIN
        and tuple(out_hw) == (height // 2, width // 2)
        and tuple(kernel) == (3, 3)
        and tuple(strides) == (2, 2)
        and tuple(pads) == (1, 1)
        and tuple(dilations) == (1, 1)
    )


def _cast_pairs(target: Any, source: Any) -> None:
    """target (float32) = the low float of each pair of `source` (float32, last axis of even
    length, contiguous): a truncating uint64→uint32 cast, little-endian."""
    np.copyto(target.view(np.uint32), source.view(np.uint64), casting="unsafe")


class _PairPool:
    """What the pair kernels share: (N, C, H, W) float32 arrays of one shape that
    `pair_pool_fits`, pooled a block of planes at a time (plane_blocks) into a C-contiguous
    output, with this instance's work arrays (one per run state, or per call), made at the
    first call as large as its first (largest) block needs."""

    def __init__(self, x_shape: Sequence[int]) -> None:
        n, c, height, width = x_shape
        self.out_shape = (n, c, height // 2, width // 2)
        self.work: Any = None

    def __call__(self, x: Any, out: Any) -> None:
        """out = the pooling of x; NumPy's errors ignored already."""
        x = np.ascontiguousarray(x)
        target = out if out.flags.c_contiguous else np.empty(self.out_shape, np.float32)
        for block_x, block_out in plane_blocks(x, target):
            self._pool(block_x, block_out)
        if target is not out:
            np.copyto(out, target)

    def _pool(self, x: Any, out: Any) -> None:
        raise NotImplementedError


class PairMaxPool(_PairPool):
    """Max pooling, columns then rows, over the two column phases of each block."""

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
        _cast_pairs(even, flat)
        _cast_pairs(odd[:-1], flat[1:-1])
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


class PairSumPool(_PairPool):
    """Window sums in onnxruntime's row-major tap order, divided by `divisor` (broadcasting to
    (H/2, W/2): AveragePool's counts). The grids are x's four (row, column) phases of x padded
    by one −0 row and column in front: grid (a, b)[u, v] = x[2u + a − 1, 2v + b − 1], so tap
    (ky, kx) of window (i, j) is grid (ky % 2, kx % 2)[i + ky // 2, j + kx // 2], a flat run
    of a grid of (H/2 + 1) × (W/2 + 1) per plane whose last row and column are slack."""

    def __init__(self, x_shape: Sequence[int], divisor: Any) -> None:
        super().__init__(x_shape)
        self.divisor = np.broadcast_to(divisor, self.out_shape[2:])

    def _pool(self, x: Any, out: Any) -> None:
        height, width = x.shape[2:]
        planes = x.shape[0] * x.shape[1]
        rows, cols = height // 2 + 1, width // 2 + 1
        if self.work is None or self.work[0].shape[2] < planes:
            grids = np.full((2, 2, planes, rows, cols), -0.0, np.float32)
            total = np.empty(planes * rows * cols, np.float32)
            divisor = np.empty((planes, rows - 1, cols - 1), np.float32)
            divisor[...] = self.divisor
            self.work = (grids, total, divisor)
        grids, total, divisor = self.work
        grids = grids[:, :, :planes]
        # the interiors (the −0 border is never written): even x rows and columns go to grid
        # (1, 1) from (0, 0), odd rows to grids (0, ·) from row 1, odd columns to grids (·, 0)
        # from column 1, the last odd column a small copy (its pair would run off the row)
        image = x.reshape(planes, height, width)
        for a, x_rows in ((1, image[:, 0::2]), (0, image[:, 1::2])):
            grid_rows = slice(1 - a, rows - a)
            _cast_pairs(grids[a, 1, :, grid_rows, : cols - 1], x_rows)
            _cast_pairs(grids[a, 0, :, grid_rows, 1 : cols - 1], x_rows[:, :, 1 : width - 1])
            np.copyto(grids[a, 0, :, grid_rows, cols - 1], x_rows[:, :, width - 1])
        runs = [[grids[a, b].reshape(-1) for b in (0, 1)] for a in (0, 1)]
        size = planes * rows * cols - cols - 1
        taps = [
            runs[ky % 2][kx % 2][shift : shift + size]
            for ky in range(3)
            for kx in range(3)
            for shift in [(ky // 2) * cols + kx // 2]
        ]
        running = total[:size]
        np.add(taps[0], taps[1], out=running)
        for tap in taps[2:]:
            np.add(running, tap, out=running)
        # the counts divide as the slack is dropped (against a divisor of out's shape: 17
        # against 24 us broadcasting one plane's at [1, 64, 64, 64])
        windows = total[: planes * rows * cols].reshape(planes, rows, cols)[:, :-1, :-1]
        np.divide(windows, divisor[:planes], out=out.reshape(planes, rows - 1, cols - 1))
