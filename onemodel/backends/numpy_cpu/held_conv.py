"""Im2col convolution with its buffers and decisions held by one run state (fast mode, NumPy).

A static Conv step pads the same input shape, reads the same windows and multiplies the same
matrix in every run, so `HeldConv` settles all of it once, when the step is bound
(`ConvOp.bind`): a zero-bordered input buffer whose border is never rewritten, the window
views over it, a columns buffer, and the list of copies and GEMMs. A run is one copy of x into
the buffer's interior, then per task its column copies, one GEMM straight into the output and
the bias, added while the task's block is in cache. The images of a batch share one batched
GEMM (W (M, K) @ columns (N, K, P) -> (N, M, P), no transpose) when their columns fit a band;
a larger image is cut into bands of output rows whose columns stay in cache between the copy
that writes them and the GEMM that reads them.

A strided 2-D convolution holds its input split by stride phase, P[n, c, py, px, h, w] =
padded[n, c, h·sy + py, w·sx + px]: then every tap reads a contiguous run of each output row
rather than every s-th value (the ResNet stem's 7×7/2 columns from 3 × 224 × 224: 0.26 ms
against 0.68 ms from stride-2 windows, AMD EPYC, 1 thread).

The buffers belong to the run state that bound the step; run states are never shared by
concurrent runs (onemodel/graph/run_state.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

_BLAS_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
# Elements of one task's columns: small enough to stay in cache between the column copy and
# the GEMM (the stem, 1 thread: 1.68 ms a run in bands of 2^19 elements, 1.92 ms at 2^18,
# 2.09 ms at 2^17), large enough for efficient GEMMs.
_BAND_ELEMENTS = 1 << 19


def held_conv(
    x_shape: Sequence[int],
    dtype: Any,
    matrix: np.ndarray,
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> HeldConv | None:
    """The held convolution of x (`x_shape`, `dtype`) by the (M, C·ΠK) `matrix` into an
    output of `out_shape` with leading `pads`, or None where it does not apply (another type
    than float32/float64, or an empty shape)."""
    dtype = np.dtype(dtype)
    if dtype not in _BLAS_TYPES or matrix.dtype != dtype or 0 in x_shape or 0 in out_shape:
        return None
    return HeldConv(
        tuple(x_shape), matrix, tuple(out_shape), *map(tuple, (kernel, strides, pads, dilations))
    )


class HeldConv:
    """out = W ⋆ x + bias for one x shape, with every buffer and view made once (see the
    module docstring). Call it as (x, out, bias or None); it returns False, having written
    nothing, for an out that is not one C-contiguous array (a Concat's slice)."""

    interior: list[tuple[np.ndarray, tuple]]  # (part of the held buffer, x's part for it)
    # Per task: (column copies, columns or None for x itself, (first image, last image,
    # first output pixel, last)).
    tasks: list[tuple[list, np.ndarray | None, tuple[int, int, int, int]]]

    def __init__(
        self,
        x_shape: tuple[int, ...],
        matrix: np.ndarray,
        out_shape: tuple[int, ...],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
    ) -> None:
        batch, channels, *spatial = x_shape
        out_spatial = out_shape[2:]
        self.matrix = matrix.reshape(matrix.shape[-2], -1)
        self.flat_shape = (batch, out_shape[1], math.prod(out_spatial))
        reach = [
            (o - 1) * s + (k - 1) * d + 1
            for o, s, k, d in zip(out_spatial, strides, kernel, dilations, strict=True)
        ]
        kept = [min(n, r - p) for n, r, p in zip(spatial, reach, pads, strict=True)]
        self.source = (..., *(slice(0, k) for k in kept))
        depth = self.matrix.shape[1]
        self.interior = []
        if all(k == 1 for k in kernel) and not any(pads):
            self._pointwise(x_shape, out_spatial, strides)
            return
        phased = len(kernel) == 2 and any(s > 1 for s in strides)
        if phased:
            held = self._phase_buffer(x_shape, reach, kept, kernel, strides, pads, dilations)
        else:
            held = np.zeros((batch, channels, *reach), matrix.dtype)
            inside = tuple(slice(p, p + k) for p, k in zip(pads, kept, strict=True))
            self.interior.append((held[(..., *inside)], ()))
        rows, *rest = out_spatial
        row_pixels = math.prod(rest)
        per_image = depth * rows * row_pixels
        images = max(1, min(batch, _BAND_ELEMENTS // per_image))
        band = rows if images > 1 else max(1, min(rows, _BAND_ELEMENTS // (depth * row_pixels)))
        buffer = np.empty(images * depth * band * row_pixels, matrix.dtype)
        self.tasks = []
        for first in range(0, batch, images):
            last = min(first + images, batch)
            for start in range(0, rows, band):
                stop = min(start + band, rows)
                width = (stop - start) * row_pixels
                columns = buffer[: (last - first) * depth * width]
                blocks = columns.reshape(last - first, channels, *kernel, stop - start, *rest)
                where = (slice(first, last), slice(start, stop))
                if phased:
                    copies = _phase_copies(held, blocks, where, kernel, strides, dilations)
                else:
                    windows = _windows(held, kernel, out_spatial, strides, dilations)
                    every_tap = (slice(None),) * (1 + len(kernel))
                    copies = [(blocks, windows[(where[0], *every_tap, where[1])])]
                columns = columns.reshape(last - first, depth, width)
                span = (first, last, start * row_pixels, stop * row_pixels)
                self.tasks.append((copies, columns[0] if last - first == 1 else columns, span))

    def _pointwise(
        self, x_shape: tuple[int, ...], out_spatial: tuple[int, ...], strides: tuple[int, ...]
    ) -> None:
        """A 1×1 kernel without pads: x is its own columns at unit strides, else its every
        s-th value copied once into a held buffer (ResNet's 1×1/2 downsampling); one GEMM."""
        batch, channels = x_shape[:2]
        pixels = self.flat_shape[2]
        columns = None
        if any(s > 1 for s in strides):
            held = np.empty((batch, channels, *out_spatial), self.matrix.dtype)
            self.interior.append((held, (..., *(slice(None, None, s) for s in strides))))
            columns = held.reshape(batch, channels, pixels)
            columns = columns[0] if batch == 1 else columns
        self.tasks = [([], columns, (0, batch, 0, pixels))]

    def _phase_buffer(
        self,
        x_shape: tuple[int, ...],
        reach: list[int],
        kept: list[int],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
    ) -> np.ndarray:
        """The zero buffer P[n, c, py, px, h, w] of the padded input split by stride phase,
        with the interior copies of x noted in `self.interior` for the phases some tap reads
        (a 1×1/2 convolution reads one of four)."""
        (sy, sx), (top, left) = strides, pads
        heights = [-(-r // s) for r, s in zip(reach, strides, strict=True)]
        held = np.zeros((*x_shape[:2], sy, sx, *heights), self.matrix.dtype)
        rows_read = {i * dilations[0] % sy for i in range(kernel[0])}
        columns_read = {j * dilations[1] % sx for j in range(kernel[1])}
        for py in sorted(rows_read):
            h0 = (py - top) % sy
            for px in sorted(columns_read):
                w0 = (px - left) % sx
                count_h, count_w = len(range(h0, kept[0], sy)), len(range(w0, kept[1], sx))
                if not count_h or not count_w:
                    continue
                a, b = (h0 + top) // sy, (w0 + left) // sx
                target = held[:, :, py, px, a : a + count_h, b : b + count_w]
                index = (..., slice(h0, kept[0], sy), slice(w0, kept[1], sx))
                self.interior.append((target, index))
        return held

    def copy_columns(self, x: np.ndarray) -> None:
        """Only the copies of a run, x into the buffer and every task's columns, without the
        GEMMs (what tools/conv_floor.py times as the cost of building columns)."""
        x = x[self.source]
        for target, index in self.interior:
            np.copyto(target, x[index])
        for copies, _, _ in self.tasks:
            for target, source in copies:
                np.copyto(target, source)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        if not out.flags.c_contiguous:
            return False
        x = x[self.source]
        for target, index in self.interior:
            np.copyto(target, x[index])
        flat = out.reshape(self.flat_shape)
        matrix = self.matrix
        channel_bias = None if bias is None else bias[:, None]
        for copies, columns, (first, last, begin, end) in self.tasks:
            for target, source in copies:
                np.copyto(target, source)
            product = flat[first:last, :, begin:end]
            if last - first == 1:
                product = product[0]
            if columns is None:  # a unit-stride 1×1 kernel: x is its own columns
                columns = x.reshape(x.shape[0], x.shape[1], -1)
                columns = columns[0] if last - first == 1 else columns
            np.matmul(matrix, columns, out=product)
            if channel_bias is not None:
                np.add(product, channel_bias, out=product)
        return True


def _windows(
    held: np.ndarray,
    kernel: tuple[int, ...],
    out_spatial: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> np.ndarray:
    """The (N, C, *K, *O) view of the padded buffer whose [n, c, k…, o…] tap k of output o
    reads."""
    axis = held.strides[2:]
    taps = (a * d for a, d in zip(axis, dilations, strict=True))
    steps = (a * s for a, s in zip(axis, strides, strict=True))
    return np.lib.stride_tricks.as_strided(
        held,
        (*held.shape[:2], *kernel, *out_spatial),
        (*held.strides[:2], *taps, *steps),
        writeable=False,
    )


def _phase_copies(
    held: np.ndarray,
    blocks: np.ndarray,
    where: tuple[slice, slice],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(columns, source) copies of one task from the phase buffer: per kernel row, one copy
    for each set of taps in one column phase. Tap (i, j) reads phase (i·dy mod sy, j·dx mod
    sx) from row i·dy // sy and column j·dx // sx on; the taps of one phase are every
    sx / g-th column of the kernel, their starts dx / g apart (g = gcd(sx, dx))."""
    (kh, kw), (sy, sx), (dy, dx) = kernel, strides, dilations
    images, rows = where
    sn, sc, _, _, sh, sw = held.strides
    step = sx // math.gcd(sx, dx)
    copies = []
    for i in range(kh):
        py, top = (i * dy) % sy, (i * dy) // sy
        for j0 in range(min(step, kw)):
            px, left = (j0 * dx) % sx, (j0 * dx) // sx
            target = blocks[:, :, i, j0::step]
            plane = held[images, :, py, px, top + rows.start : top + rows.stop, left:]
            source = np.lib.stride_tricks.as_strided(
                plane,
                target.shape,
                (sn, sc, (dx // math.gcd(sx, dx)) * sw, sh, sw),
                writeable=False,
            )
            copies.append((target, source))
    return copies
