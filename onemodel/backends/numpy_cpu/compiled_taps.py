"""A depthwise 2-D convolution compiled by numba (numpy_cpu/compiled.py): per channel, one copy
of its plane into a zero-padded buffer split by column stride phase, then every output pixel
the sum of its taps, read at unit stride from that buffer, in one pass.

The kernel's height, width, strides and dilations reach numba as the lengths of tuples, so
each shape is its own specialisation with its tap loops unrolled and the pixel loop
vectorised: the taps stay in registers, where NumPy's forms stream a plane through memory
per tap or copy every tap's columns first. The column phases keep a stride-2 filter's reads
contiguous (a strided read does not vectorise). One node, AMD EPYC, one thread, against the
NumPy form that depthwise.py would choose, in the same run (ms): see `CompiledTaps`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onemodel.backends.numpy_cpu.compiled import jitted
from onemodel.backends.numpy_cpu.movement import transpose_copy

# The largest kernel extent, stride and dilation given a specialisation of their own: past
# these the NumPy forms run (each new combination costs a compile of about a second, once
# per machine).
LARGEST_KERNEL = 7
LARGEST_STRIDE = 2
LARGEST_DILATION = 8
# Output planes of at most this many pixels run channels last even between planar values: their
# rows are too short to vectorise (960 channels at 7×7 by 3×3: 0.12 ms against 0.20 planar,
# 384 at 14×14 0.15 against 0.16; 240 at 28×28 by 5×5 0.81 against 0.40).
CHANNELS_LAST_PIXELS = 256


def _depthwise_planes(x, taps, bias, out, padded, top, left, kh, kw, sh, sw, dh, dw):
    """Compiled by numba: out[n, c] = Σ taps[c, i, j] · x[n, c] at tap (i, j), + bias[c] (one
    rounded add after the sum, as every fast path adds it), each
    plane copied into `padded` (rows, columns) whose margins stay zero."""
    n_kh, n_kw, n_sh, n_sw, n_dh, n_dw = len(kh), len(kw), len(sh), len(sw), len(dh), len(dw)
    batch, channels, height, width = x.shape
    out_h, out_w = out.shape[2], out.shape[3]
    for image in range(batch):
        for channel in range(channels):
            for row in range(height):
                source = x[image, channel, row]
                target = padded[top + row, left : left + width]
                for k in range(width):
                    target[k] = source[k]
            weights = taps[channel]
            plane = out[image, channel]
            for i in range(out_h):
                result = plane[i]
                for j in range(out_w):
                    total = np.float32(0)
                    for ti in range(n_kh):
                        for tj in range(n_kw):
                            total += (
                                weights[ti, tj] * padded[i * n_sh + ti * n_dh, j * n_sw + tj * n_dw]
                            )
                    result[j] = total + bias[channel]


def _depthwise_channels_last(padded, taps, bias, result, kh, kw, sh, sw, dh, dw):
    """Compiled by numba: result[n, y, x, c] = Σ taps[i, j, c] · padded[n, at tap (i, j) of
    (y, x), c], + bias[c], every channel of a pixel at once (vectorised along C)."""
    n_kh, n_kw, n_sh, n_sw, n_dh, n_dw = len(kh), len(kw), len(sh), len(sw), len(dh), len(dw)
    batch, out_h, out_w, channels = result.shape
    for image in range(batch):
        source = padded[image]
        for i in range(out_h):
            for j in range(out_w):
                target = result[image, i, j]
                for c in range(channels):
                    total = np.float32(0)
                    for ti in range(n_kh):
                        for tj in range(n_kw):
                            total += (
                                taps[ti, tj, c]
                                * source[i * n_sh + ti * n_dh, j * n_sw + tj * n_dw, c]
                            )
                    target[c] = total + bias[c]


def compiles(
    dtype: np.dtype, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> bool:
    """Whether a depthwise filter of this type and window has a compiled form here."""
    return (
        dtype == np.float32
        and len(kernel) == 2
        and max(kernel) <= LARGEST_KERNEL
        and max(strides) <= LARGEST_STRIDE
        and max(dilations) <= LARGEST_DILATION
        and jitted(_depthwise_planes) is not None
    )


class CompiledTaps:
    """out (N, C, Ho, Wo) = the depthwise convolution of x (N, C, H, W) by `taps` (C, kh·kw)
    with leading `pads`, plus a bias, where `compiles` holds: channels last where x or out is
    held so (graph/layouts.py) or the output plane has at most CHANNELS_LAST_PIXELS (x copied
    into a padded (N, rows, cols, C) buffer, the sums vectorised along C, written into out
    held channels last or copied back to its planes), else plane by plane. Call it as (x, out,
    bias or None); it returns False, having written nothing, for an out not C-contiguous in
    its layout. The constructor runs the kernel once, so that its compile (or its load from
    numba's cache) happens when the step is bound, not in the first run (`warm`; an unbound
    run, which makes one each time, says False)."""

    def __init__(
        self,
        x_shape: Sequence[int],
        taps: np.ndarray,
        out_shape: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        *,
        warm: bool = True,
        x_channels_last: bool = False,
        out_channels_last: bool = False,
    ) -> None:
        batch, channels, height, width = x_shape
        (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
        out_h, out_w = out_shape[2:]
        top, left = pads[0], pads[1]
        rows = max(top + height, (out_h - 1) * sh + (kh - 1) * dh + 1)
        cols = max(left + width, (out_w - 1) * sw + (kw - 1) * dw + 1)
        tags = tuple((0,) * extent for extent in (kh, kw, sh, sw, dh, dw))
        self.zeros = np.zeros(channels, np.float32)
        self.out_channels_last = out_channels_last
        self.channels_last = (
            x_channels_last or out_channels_last or out_h * out_w <= CHANNELS_LAST_PIXELS
        )
        if self.channels_last:
            self.padded = np.zeros((batch, rows, cols, channels), np.float32)
            # Seen as (N, C, H, W): x in either layout copies in as it is.
            interior = self.padded[:, top : top + height, left : left + width]
            self.interior = interior.transpose(0, 3, 1, 2)
            self.taps = np.ascontiguousarray(taps.T, np.float32).reshape(kh, kw, channels)
            self.result = (
                None if out_channels_last else np.empty((batch, out_h, out_w, channels), np.float32)
            )
            self.kernel = jitted(_depthwise_channels_last)
            self.window = tags
            if warm:
                result = np.empty((1, out_h, out_w, channels), np.float32)
                self.kernel(self.padded[:1], self.taps, self.zeros, result, *tags)
        else:
            self.padded = np.zeros((rows, cols), np.float32)
            self.taps = np.ascontiguousarray(taps, np.float32).reshape(channels, kh, kw)
            self.kernel = jitted(_depthwise_planes)
            self.window = (top, left, *tags)
            if warm:
                planes = np.zeros((1, 1, height, width), np.float32)
                result = np.empty((1, 1, out_h, out_w), np.float32)
                self.kernel(planes, self.taps[:1], self.zeros, result, self.padded, *self.window)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        bias = self.zeros if bias is None else np.ascontiguousarray(bias)
        if not self.channels_last:
            if not out.flags.c_contiguous:
                return False
            self.kernel(np.ascontiguousarray(x), self.taps, bias, out, self.padded, *self.window)
            return True
        result = self.result
        if result is None:
            result = out.transpose(0, 2, 3, 1)
            if not result.flags.c_contiguous:
                return False
        elif not out.flags.c_contiguous:
            return False
        np.copyto(self.interior, x)
        self.kernel(self.padded, self.taps, bias, result, *self.window)
        if self.result is not None:
            batch, channels = out.shape[:2]
            planes = out.reshape(batch, channels, -1)
            transpose_copy(result.reshape(batch, -1, channels), (0, 2, 1), planes)
        return True
