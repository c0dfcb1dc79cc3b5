"""A depthwise convolution channels last, all taps of a column phase in one einsum.

Over a 14×14 or 7×7 plane the planar layouts pay per channel: a BLAS call per channel for
the gathered columns, a loop per plane row for tap passes. Channels last, the input padded
to (N, rows, cols, C), tap (i, j) of output row y reads one contiguous run of out_w·C
values, so one `np.einsum` over that window view and the weights repeated along each run
sums every tap as one multiply-add loop per (image, tap, row), where NumPy's multiply then
add take two passes a tap (AMD EPYC, one thread: 960 channels at 7×7 by 3×3, the taps alone
0.06 ms against 0.08 in passes). At a column stride s the padded columns are split into s
phases as x is copied in (runs of C values), so that each phase's taps again read runs of
out_w·C: one einsum per phase that some tap reads, the later ones added (96 channels at
112×112 by 3×3/2: 0.93 ms against 1.08 for one einsum over runs of C values per pixel). What the
form costs on planar values is two transposing copies, x into the padded buffer and the
result into out, which is why larger planar planes take the shifted columns
(numpy_cpu/shifted_columns.py; the limits are numpy_cpu/depthwise.py's); values held
channels last (graph/layouts.py) copy x in by whole runs and take the sums in out itself.

`ChannelsLastTaps` holds all of it for one x shape: the zero-bordered phase buffers (their
borders written once), the window views, the repeated weights and the result. A bound step
keeps one (numpy_cpu/fast.py `held_conv`); an unbound run makes one over its scratch, so
both give the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onemodel.backends.array_types import Scratch, own_memory
from onemodel.backends.numpy_cpu.channel_bias import LastAxisBias
from onemodel.backends.numpy_cpu.held_conv import tap_groups
from onemodel.backends.numpy_cpu.movement import transpose_copy

# Result elements per einsum: a chunk of images whose result stays in cache across taps.
_CHUNK_ELEMENTS = 1 << 16
# Planes of at most this many pixels go back to channel planes by one np.copyto, larger ones
# through the blocked transpose (numpy_cpu/movement.py): 960 channels at 7×7 took 0.012 ms
# against 0.026 blocked, 384 at 14×14 0.051 against 0.031, 240 at 28×28 0.092 against 0.070.
_DIRECT_TRANSPOSE_PIXELS = 64


class ChannelsLastTaps:
    """out (N, C, Ho, Wo) = the depthwise convolution of x (`x_shape`) by `taps` (C, kh·kw)
    with `strides` and leading `pads`, plus a bias; see the module docstring. Call it as
    (x, out, bias or None); it returns True (any out layout), except for an out held channels
    last (`out_channels_last`: no transpose back) that is not, for which it writes nothing
    and returns False. An x held channels last needs nothing of its own: its copy into the
    padded buffer is then one of whole runs."""

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
        out_channels_last: bool = False,
    ) -> None:
        empty = allocate or own_memory
        batch, channels, height, width = x_shape
        (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel, strides, dilations, pads[:2]
        out_h, out_w = out_shape[2:]
        rows, cols = (out_h - 1) * sh + (kh - 1) * dh + 1, (out_w - 1) * sw + (kw - 1) * dw + 1
        kept_h, kept_w = min(height, rows - top), min(width, cols - left)
        dtype = taps.dtype
        self.source = (slice(None), slice(None), slice(0, kept_h))
        run = out_w * channels
        self.interior: list[tuple[np.ndarray, slice]] = []  # (a phase's part, x's columns)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []  # (windows, weights) per phase
        filters = taps.T.reshape(kh, kw, 1, channels)
        for first, step, count, phase, offset, spacing in tap_groups(kw, sw, dw):
            # Padded column phase + k·sw is the phase's column k: x's columns that land there.
            held = empty((batch, rows, len(range(phase, cols, sw)), channels), dtype)
            held.fill(0)
            begin = phase + (left - phase + sw - 1) // sw * sw  # the first at or after left
            columns = slice(begin - left, kept_w, sw)
            at, many = begin // sw, len(range(begin - left, kept_w, sw))
            target = held[:, top : top + kept_h, at : at + many].transpose(0, 3, 1, 2)
            self.interior.append((target, columns))
            image, row, column, item = held.strides
            windows = as_strided(
                held[:, :, offset:],
                (batch, kh, count, out_h, run),
                (image, dh * row, spacing * column, sh * row, item),
                writeable=False,
            )
            weights = empty((kh, count, out_w, channels), dtype)
            np.copyto(weights, filters[:, first : first + step * count : step])
            self.parts.append((windows, weights.reshape(kh, count, run)))
        # An out held channels last (graph/layouts.py) takes the sums itself.
        self.out_channels_last = out_channels_last
        self.result = None if out_channels_last else empty((batch, out_h, out_w, channels), dtype)
        self.partial = empty((batch, out_h, run), dtype) if len(self.parts) > 1 else None
        self.step = max(1, _CHUNK_ELEMENTS // (out_h * run))
        self.bias = LastAxisBias(batch * out_h * out_w, channels)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        result = self.result
        if result is None:
            result = out.transpose(0, 2, 3, 1)
            if not result.flags.c_contiguous:
                return False
        x = x[self.source]
        for target, columns in self.interior:
            np.copyto(target, x[..., columns])
        sums = result.reshape(self.parts[0][0].shape[:1] + self.parts[0][0].shape[3:])
        for first in range(0, result.shape[0], self.step):
            images = slice(first, first + self.step)
            for index, (windows, weights) in enumerate(self.parts):
                if index == 0:
                    np.einsum("nijyq,ijq->nyq", windows[images], weights, out=sums[images])
                    continue
                partial = self.partial[images]
                np.einsum("nijyq,ijq->nyq", windows[images], weights, out=partial)
                np.add(sums[images], partial, out=sums[images])
        if bias is not None:
            self.bias(result, bias)
        if self.result is None:
            return True
        if out.flags.c_contiguous and result[0, ..., 0].size > _DIRECT_TRANSPOSE_PIXELS:
            batch, channels = out.shape[:2]
            planes = out.reshape(batch, channels, -1)
            transpose_copy(result.reshape(batch, -1, channels), (0, 2, 1), planes)
        else:
            np.copyto(out, result.transpose(0, 3, 1, 2))
        return True
