"""A depthwise convolution over small planes, channels last, all taps in one einsum.

Over a 14×14 or 7×7 plane the planar layouts pay per channel: a BLAS call per channel for
the gathered columns, a loop per plane row for tap passes. Channels last, the input padded
to (N, rows, cols, C), tap (i, j) of output row y reads one contiguous run of out_w·C
values at unit column strides (C values per output pixel otherwise), so one `np.einsum`
over that window view and the weights repeated along each run sums every tap as one
multiply-add loop per (image, tap, row), where NumPy's multiply then add take two passes a
tap (AMD EPYC, one thread: 960 channels at 7×7 by 3×3, the taps alone 0.06 ms against 0.08
in passes). What it costs is the two transposing copies, x into the padded buffer and the
result into out, which is why larger planes take the shifted columns
(numpy_cpu/shifted_columns.py; the limits are numpy_cpu/depthwise.py's).

`ChannelsLastTaps` holds all of it for one x shape: the zero-bordered buffer (its border
written once), the window view, the repeated weights and the result. A bound step keeps
one (numpy_cpu/fast.py `held_conv`); an unbound run makes one over its scratch, so both give
the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onemodel.backends.array_types import Scratch, own_memory
from onemodel.backends.numpy_cpu.movement import transpose_copy

# Result elements per einsum: a chunk of images whose result stays in cache across taps.
_CHUNK_ELEMENTS = 1 << 16
# Planes of at most this many pixels go back to channel planes by one np.copyto, larger ones
# through the blocked transpose (numpy_cpu/movement.py): 960 channels at 7×7 took 0.012 ms
# against 0.026 blocked, 384 at 14×14 0.051 against 0.031, 240 at 28×28 0.092 against 0.070.
_DIRECT_TRANSPOSE_PIXELS = 64


class ChannelsLastTaps:
    """out (N, C, Ho, Wo) = the depthwise convolution of x (`x_shape`) by `taps` (C, kh·kw)
    at unit strides with leading `pads`, plus a bias; see the module docstring. Call it as
    (x, out, bias or None); it returns True (any out layout)."""

    def __init__(
        self,
        x_shape: Sequence[int],
        taps: np.ndarray,
        out_shape: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        allocate: Scratch | None = None,
    ) -> None:
        empty = allocate or own_memory
        batch, channels, height, width = x_shape
        (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel, strides, dilations, pads[:2]
        out_h, out_w = out_shape[2:]
        rows, cols = (out_h - 1) * sh + (kh - 1) * dh + 1, (out_w - 1) * sw + (kw - 1) * dw + 1
        kept_h, kept_w = min(height, rows - top), min(width, cols - left)
        dtype = taps.dtype
        padded = empty((batch, rows, cols, channels), dtype)
        padded.fill(0)
        self.source = (slice(None), slice(None), slice(0, kept_h), slice(0, kept_w))
        self.interior = padded[:, top : top + kept_h, left : left + kept_w].transpose(0, 3, 1, 2)
        image, row, column, item = padded.strides
        weights = empty((kh, kw, out_w, channels), dtype)
        np.copyto(weights, taps.T.reshape(kh, kw, 1, channels))
        self.result = empty((batch, out_h, out_w, channels), dtype)
        if sw == 1:  # each output row's tap is one run of out_w·C values
            run = out_w * channels
            shape, steps = (out_h, run), (sh * row, item)
            self.weights, self.sums = weights.reshape(kh, kw, run), "nijyq,ijq->nyq"
        else:
            shape, steps = (out_h, out_w, channels), (sh * row, sw * column, item)
            self.weights, self.sums = weights, "nijyxc,ijxc->nyxc"
        self.windows = as_strided(
            padded,
            (batch, kh, kw, *shape),
            (image, dh * row, dw * column, *steps),
            writeable=False,
        )
        self.step = max(1, _CHUNK_ELEMENTS // self.result[0].size)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        np.copyto(self.interior, x[self.source])
        result = self.result
        sums = result.reshape(self.windows.shape[:1] + self.windows.shape[3:])
        for first in range(0, result.shape[0], self.step):
            images = slice(first, first + self.step)
            np.einsum(self.sums, self.windows[images], self.weights, out=sums[images])
        if bias is not None:
            np.add(result, bias, out=result)
        if out.flags.c_contiguous and result[0, ..., 0].size > _DIRECT_TRANSPOSE_PIXELS:
            batch, channels = out.shape[:2]
            planes = out.reshape(batch, channels, -1)
            transpose_copy(result.reshape(batch, -1, channels), (0, 2, 1), planes)
        else:
            np.copyto(out, result.transpose(0, 3, 1, 2))
        return True
