"""Im2col channels last for a dense 2-D convolution over small planes (fast mode, NumPy).

In the planar layout (numpy_cpu/held_conv.py) a tap's columns are runs of one output row (or
of a phase plane's row on the wide grid): 8 values at 8×8, so the column copy moves a few
values per loop step, and the wide grid multiplies (rows + 2)·(cols + 2)/(rows·cols) times the
pixels. Channels last, x padded to (N, rows, cols, C), the taps (j, c) of one kernel row
are one contiguous run of kw·C values for every output pixel, so the columns
(N·Ho·Wo, kh·kw·C) are one copy of runs that long, and one GEMM by the reordered weights
(kh·kw·C, M) gives the result (N·Ho·Wo, M), which one transposing add of the bias puts
into out's channel planes. Two transposing copies (x in, the result out) are the price, which
pays where planes are small and kw·C long (`takes_channels_last`; AMD EPYC, 1 thread, 3×3:
32 channels at 8×8 0.031 against 0.047 ms held, 64 at 14×14 0.30 against 0.35, 512 at 7×7
4.7 against 6.8, batch 2; 3 channels at 32×32 0.074 against 0.038, 64 at 28×28 even).

`ChannelsLastConv` holds all of it for one x shape, like `HeldConv`: a bound step keeps one,
an unbound run makes one over its scratch, so both give the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onemodel.backends.array_types import Scratch, own_memory
from onemodel.backends.numpy_cpu.ufunc_buffers import small_buffers

# Output pixels per image up to which channels last pays (see the module docstring: 16×16
# gained 0.80-0.87, 28×28 at unit strides broke even, 32×32 lost).
_MOST_PIXELS = 256
# The shortest run of kw·C values worth a channels-last column copy (3×3 by 8 channels lost
# at 32×32, 16 channels gained from 16×16 down).
_LEAST_RUN = 48
# Column elements per GEMM: a chunk of images whose columns stay in cache (as `HeldConv`).
_CHUNK_ELEMENTS = 1 << 19


def takes_channels_last(
    x_shape: Sequence[int],
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
) -> bool:
    """Whether a dense 2-D convolution runs channels last: small output planes, windows that
    overlap at unit column dilation, and long enough runs of kw·C values. Windows that tile
    the input (strides as large as the kernel, ConvNeXt's 2×2/2 downsampling) are left to the
    planar patches (numpy_cpu/held_conv.py), one copy of whole planes already (80 channels at
    28×28, 2×2/2: 0.218 against 0.226 ms through the phase buffer before the patches, not worth
    another summation order than onnxruntime's)."""
    return (
        len(kernel) == 2
        and any(s < k for s, k in zip(strides, kernel, strict=True))
        and dilations[1] == 1
        and math.prod(out_shape[2:]) <= _MOST_PIXELS
        and kernel[1] * x_shape[1] >= _LEAST_RUN
    )


class ChannelsLastConv:
    """out (N, M, Ho, Wo) = W ⋆ x + bias for one x shape, channels last (module docstring).
    Call it as (x, out, bias or None); it returns True (any out layout)."""

    def __init__(
        self,
        x_shape: tuple[int, ...],
        matrix: np.ndarray,
        out_shape: tuple[int, ...],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
        allocate: Scratch | None = None,
    ) -> None:
        empty = allocate or own_memory
        batch, channels, height, width = x_shape
        filters, (out_h, out_w) = out_shape[1], out_shape[2:]
        (kh, kw), (sh, sw), (dh, _), (top, left) = kernel, strides, dilations, pads[:2]
        rows, cols = (out_h - 1) * sh + (kh - 1) * dh + 1, (out_w - 1) * sw + kw
        kept_h, kept_w = min(height, rows - top), min(width, cols - left)
        dtype = matrix.dtype
        padded = empty((batch, rows, cols, channels), dtype)
        padded.fill(0)
        self.source = (slice(None), slice(None), slice(0, kept_h), slice(0, kept_w))
        self.interior = padded[:, top : top + kept_h, left : left + kept_w].transpose(0, 3, 1, 2)
        image, row, column, item = padded.strides
        self.windows = as_strided(
            padded,
            (batch, out_h, out_w, kh, kw * channels),
            (image, sh * row, sw * column, dh * row, item),
            writeable=False,
        )
        weights = empty((kh, kw, channels, filters), dtype)
        np.copyto(weights, matrix.reshape(filters, channels, kh, kw).transpose(2, 3, 1, 0))
        self.weights = weights.reshape(-1, filters)
        depth = self.weights.shape[0]
        self.step = max(1, min(batch, _CHUNK_ELEMENTS // (out_h * out_w * depth)))
        self.columns = empty((self.step, out_h, out_w, kh, kw * channels), dtype)
        self.result = empty((batch * out_h * out_w, filters), dtype)
        self.planes = self.result.reshape(batch, out_h, out_w, filters).transpose(0, 3, 1, 2)

    def copy_columns(self, x: np.ndarray) -> None:
        """Only the copies of a run, x into the buffer and the columns, without the GEMMs
        (what tools/conv_floor.py times as the cost of building columns)."""
        np.copyto(self.interior, x[self.source])
        for first in range(0, self.windows.shape[0], self.step):
            images = self.windows[first : first + self.step]
            np.copyto(self.columns[: images.shape[0]], images)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        np.copyto(self.interior, x[self.source])
        windows, columns, weights, result = self.windows, self.columns, self.weights, self.result
        pixels = math.prod(windows.shape[1:3])
        for first in range(0, windows.shape[0], self.step):
            images = windows[first : first + self.step]
            count = images.shape[0]
            chunk = columns[:count]
            np.copyto(chunk, images)
            rows = result[first * pixels : (first + count) * pixels]
            np.matmul(chunk.reshape(count * pixels, -1), weights, out=rows)
        with small_buffers():  # the transposing add would buffer 8192 elements
            if bias is None:
                np.copyto(out, self.planes)
            else:
                np.add(self.planes, bias.reshape(-1, 1, 1), out=out)
        return True
