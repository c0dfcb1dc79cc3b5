"""A stride-1 depthwise convolution that keeps its planes' size: columns copied straight from x.

When the output plane is the input's size (pads that add up to the kernel's reach), tap (i, j)
of output pixel p reads input pixel p + (i·dh − top)·W + (j·dw − left) of the same flat
plane: its column over the whole plane is one contiguous shifted run of x, copied as it is.
Only two things are wrong in such a run: the pixels it would read above the first row or
below the last (left out of the copy, so the held buffer's zeros stay there) and, in every
row, the pixels whose window wraps round into the previous or next row (rezeroed after the
copy, a few strided values per row). Then one BLAS matrix-vector product per channel
(weights (1, taps) @ columns (taps, H·W)) writes the channel's plane straight into out, and
the bias is one contiguous add: no padded copy of x and no crop of a padded grid, which the
gathered columns (numpy_cpu/depthwise.py) pay (AMD EPYC, one thread, held: 144 channels at
56×56 by 3×3 0.71 ms against 0.87, 32 at 112×112 0.63 against 0.75).

`ShiftedColumns` holds its columns buffer and copies for one x shape; a bound step keeps one
(numpy_cpu/fast.py `held_conv`), an unbound run makes one over its scratch: the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.array_types import Scratch

# Column elements per block of channels (in cache between the copies and the products):
# 144 channels at 56×56 by 3×3 took 0.77 ms in blocks of 2^18, 0.71 of 2^19, 0.73 of 2^20.
_BLOCK_ELEMENTS = 1 << 19


def keeps_plane_size(
    x_shape: Sequence[int], out_shape: Sequence[int], strides: Sequence[int]
) -> bool:
    """Whether a 2-D convolution's output planes are its input's, at unit strides."""
    return tuple(strides) == (1, 1) and tuple(out_shape[2:]) == tuple(x_shape[2:])


class ShiftedColumns:
    """out (N, C, H, W) = the depthwise convolution of x (N, C, H, W) by `taps` (C, kh·kw) at
    unit strides with leading `pads` whose output keeps the plane size, plus a bias; see
    the module docstring. Call it as (x, out, bias or None); it returns False, having
    written nothing, for an out that is not one C-contiguous array."""

    def __init__(
        self,
        x_shape: Sequence[int],
        taps: np.ndarray,
        kernel: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        allocate: Scratch | None = None,
    ) -> None:
        _, channels, height, width = x_shape
        (kh, kw), (dh, dw), (top, left) = kernel, dilations, pads[:2]
        count, pixels = kh * kw, height * width
        self.block = max(1, min(channels, _BLOCK_ELEMENTS // (count * pixels)))
        columns = (allocate or _own)((self.block, count, pixels), taps.dtype)
        columns.fill(0)
        grid = columns.reshape(self.block, count, height, width)
        self.columns = columns
        self.copies: list[tuple[np.ndarray, slice]] = []  # (columns of a tap, x's run for it)
        self.wraps: list[np.ndarray] = []  # the pixels of a tap's columns that wrap a row
        for tap in range(count):
            down, across = tap // kw * dh - top, tap % kw * dw - left
            shift = down * width + across
            first, last = max(0, -shift), min(pixels, pixels - shift)
            if first < last:
                run = slice(first + shift, last + shift)
                self.copies.append((columns[:, tap, first:last], run))
            if across < 0:
                self.wraps.append(grid[:, tap, :, : min(width, -across)])
            elif across > 0:
                self.wraps.append(grid[:, tap, :, max(0, width - across) :])
        self.weights = taps.reshape(channels, 1, count)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        if not out.flags.c_contiguous:
            return False
        batch, channels = x.shape[:2]
        planes, results = x.reshape(batch, channels, -1), out.reshape(batch, channels, 1, -1)
        block = self.block
        for image in range(batch):
            for first in range(0, channels, block):
                group = slice(first, min(channels, first + block))
                count = group.stop - first
                for target, run in self.copies:
                    np.copyto(target[:count], planes[image, group, run])
                for wrap in self.wraps:
                    wrap[:count] = 0
                result = results[image, group]
                np.matmul(self.weights[group], self.columns[:count], out=result)
                if bias is not None:
                    np.add(result, bias[group, None, None], out=result)
        return True


def _own(shape: Sequence[int], dtype: Any) -> np.ndarray:
    return np.empty(tuple(shape), dtype)
