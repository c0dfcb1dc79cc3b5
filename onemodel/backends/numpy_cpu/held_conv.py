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

A 2-D convolution holds its input split by stride phase (one phase at unit strides),
P[n, c, py, px, h, w] = padded[n, c, h·sy + py, w·sx + px]: then every tap reads a contiguous
run of each output row rather than every s-th value (the ResNet stem's 7×7/2 columns from
3 × 224 × 224: 0.26 ms against 0.68 ms from stride-2 windows, AMD EPYC, 1 thread), and rows
up to `_WIDE_GRID_WIDTH` (or of `_WIDE_GRID_CHANNELS` input channels or more) are computed on
a grid as wide as a phase's plane, where each tap's columns are one run (`HeldConv._phased`).
Windows that tile the input (kernel = strides, no pads) are patches: one transposing copy
writes the columns and no phase buffer is held (`HeldConv._patched`).

The buffers belong to the run state that bound the step; run states are never shared by
concurrent runs (onemodel/graph/run_state.py). An unbound run makes the same computation
over its scratch (`NumpyKernels._conv`), so both give the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from onemodel.backends.array_types import Scratch, own_memory
from onemodel.backends.numpy_cpu.channels_last_conv import ChannelsLastConv, takes_channels_last
from onemodel.backends.numpy_cpu.ufunc_buffers import small_buffers

_BLAS_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
# Elements of one task's columns: small enough to stay in cache between the column copy and
# the GEMM (the stem, 1 thread: 1.68 ms a run in bands of 2^19 elements, 1.92 ms at 2^18,
# 2.09 ms at 2^17), large enough for efficient GEMMs.
_BAND_ELEMENTS = 1 << 19
# The widest output rows a 2-D convolution computes on the wide grid (`HeldConv._phased`),
# whatever its channels; from this many input channels, any rows (their columns, C·kh·kw rows
# each, then outweigh the crop of M output rows: 16 -> 32 by 3x3/2 to 80x80 0.97x the
# copied rows' time, 32 -> 64 to 40x40 0.92x, 64 -> 16 by 3x3 at 80x80 0.94x; 3 -> 32 by 3x3/2
# to 112x112 1.19x, the ResNet stem 1.02x).
_WIDE_GRID_WIDTH = 32
_WIDE_GRID_CHANNELS = 16


def held_conv(
    x_shape: Sequence[int],
    dtype: Any,
    matrix: np.ndarray,
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    allocate: Scratch | None = None,
) -> HeldConv | ChannelsLastConv | None:
    """The held convolution of x (`x_shape`, `dtype`) by the (M, C·ΠK) `matrix` into an
    output of `out_shape` with leading `pads`, or None where it does not apply (another type
    than float32/float64, or an empty shape): channels last over small planes
    (numpy_cpu/channels_last_conv.py), else planar. Its buffers come from `allocate` (a run's
    scratch, for a convolution made for one run) or are its own."""
    dtype = np.dtype(dtype)
    if dtype not in _BLAS_TYPES or matrix.dtype != dtype or 0 in x_shape or 0 in out_shape:
        return None
    geometry = tuple(map(tuple, (kernel, strides, pads, dilations)))
    channels_last = takes_channels_last(x_shape, out_shape, kernel, strides, dilations)
    form = ChannelsLastConv if channels_last else HeldConv
    return form(tuple(x_shape), matrix, tuple(out_shape), *geometry, allocate=allocate)


class HeldConv:
    """out = W ⋆ x + bias for one x shape, with every buffer and view made once (see the
    module docstring). Call it as (x, out, bias or None); it returns False, having written
    nothing, for an out that is not one C-contiguous array (a Concat's slice)."""

    interior: list[tuple[np.ndarray, tuple]]  # (part of the held buffer, x's part for it)
    # Per task: (column copies, columns or None for x itself, None or the wide grid's GEMM
    # product and its view cropped to out's rows, (first image, last image, first output
    # pixel, last)).
    tasks: list[tuple[list, Any, Any, Any, tuple[int, int, int, int]]]

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
        self._empty = allocate or own_memory
        batch, _, *spatial = x_shape
        out_spatial = out_shape[2:]
        self.matrix = matrix.reshape(matrix.shape[-2], -1)
        self.flat_shape = (batch, out_shape[1], math.prod(out_spatial))
        reach = [
            (o - 1) * s + (k - 1) * d + 1
            for o, s, k, d in zip(out_spatial, strides, kernel, dilations, strict=True)
        ]
        kept = [min(n, r - p) for n, r, p in zip(spatial, reach, pads, strict=True)]
        self.source = (..., *(slice(0, k) for k in kept))
        self.interior = []
        self.tasks = []
        self.patches: np.ndarray | None = None
        if all(k == 1 for k in kernel) and not any(pads):
            self._pointwise(x_shape, out_spatial, strides)
        elif len(kernel) == 2 and kernel == strides and not any(pads) and dilations == (1, 1):
            self._patched(x_shape, out_spatial, kernel)
        elif len(kernel) == 2:
            self._phased(x_shape, out_spatial, kernel, strides, pads, dilations, reach, kept)
        else:
            self._windowed(x_shape, out_spatial, kernel, strides, pads, dilations, reach, kept)

    def _pointwise(
        self, x_shape: tuple[int, ...], out_spatial: tuple[int, ...], strides: tuple[int, ...]
    ) -> None:
        """A 1×1 kernel without pads: x is its own columns at unit strides, else its every
        s-th value copied once into a held buffer (ResNet's 1×1/2 downsampling); one GEMM."""
        batch, channels = x_shape[:2]
        pixels = self.flat_shape[2]
        columns = None
        if any(s > 1 for s in strides):
            held = self._empty((batch, channels, *out_spatial), self.matrix.dtype)
            self.interior.append((held, (..., *(slice(None, None, s) for s in strides))))
            columns = held.reshape(batch, channels, pixels)
            columns = columns[0] if batch == 1 else columns
        self.tasks.append(([], columns, None, None, (0, batch, 0, pixels)))

    def _patched(
        self, x_shape: tuple[int, ...], out_spatial: tuple[int, ...], kernel: tuple[int, ...]
    ) -> None:
        """Windows that tile the image (kernel = strides, no pads: ViT's, Swin's and ConvNeXt's
        patch embeddings, SegFormer's reductions): x's patches are its columns in another
        order, so one transposing copy writes them all, C·kh·kw rows of out_h·out_w, and one
        GEMM (batched over images) reads them; no phase buffer and no tap copies."""
        batch, channels = x_shape[:2]
        (kh, kw), (out_h, out_w) = kernel, out_spatial
        held = self._empty((batch, channels, kh, kw, out_h, out_w), self.matrix.dtype)
        self.patches = held.transpose(0, 1, 4, 2, 5, 3)  # [n, c, y, i, x, j]
        columns = held.reshape(batch, -1, out_h * out_w)
        self.tasks.append(([], columns[0] if batch == 1 else columns, None, None,
                           (0, batch, 0, out_h * out_w)))  # fmt: skip

    def _windowed(
        self,
        x_shape: tuple[int, ...],
        out_spatial: tuple[int, ...],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
        reach: list[int],
        kept: list[int],
    ) -> None:
        """1-D and 3-D: one copy per task from the (N, C, *K, *O) window view of the padded
        buffer (a 1-D window's rows are contiguous runs already)."""
        batch, channels = x_shape[:2]
        held = self._zeros((batch, channels, *reach))
        inside = tuple(slice(p, p + k) for p, k in zip(pads, kept, strict=True))
        self.interior.append((held[(..., *inside)], ()))
        windows = _windows(held, kernel, out_spatial, strides, dilations)
        rows, *rest = out_spatial
        every_tap = (slice(None),) * (1 + len(kernel))
        for images, band, columns in self._bands(batch, rows, math.prod(rest)):
            blocks = columns.reshape(images.stop - images.start, channels, *kernel, -1, *rest)
            copies = [(blocks, windows[(images, *every_tap, band)])]
            self._add_task(copies, columns, None, images, band, math.prod(rest))

    def _phased(
        self,
        x_shape: tuple[int, ...],
        out_spatial: tuple[int, ...],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
        reach: list[int],
        kept: list[int],
    ) -> None:
        """2-D, from the phase buffer: per task one copy for each set of taps that read one
        stride phase at evenly spaced rows and columns (`tap_groups`; one copy at unit
        strides). Output rows up to `_WIDE_GRID_WIDTH` wide, or of `_WIDE_GRID_CHANNELS` input
        channels or more, are computed on a grid as wide as a phase's plane, so each tap's
        columns are one contiguous run of the plane rather than a copy loop over short rows;
        the GEMM fills the grid and the run crops it into out, adding the bias. Other rows are
        copied as they are (the crop then costs more than it saves: the stem 1.53 against 1.38
        ms on the grid)."""
        batch, channels = x_shape[:2]
        out_h, out_w = out_spatial
        heights = [-(-r // s) for r, s in zip(reach, strides, strict=True)]
        wide = out_w <= _WIDE_GRID_WIDTH or channels >= _WIDE_GRID_CHANNELS
        # On the grid, the last tap's run ends past the plane's last row by its column offset.
        plane = (heights[0] + wide, heights[1])
        held = self._phase_buffer(x_shape, plane, kept, kernel, strides, pads, dilations)
        sn, sc, _, _, sh, sw = held.strides
        taps = [tap_groups(k, s, d) for k, s, d in zip(kernel, strides, dilations, strict=True)]
        filters, row = self.matrix.shape[0], plane[1] if wide else out_w
        product_buffer = None
        for images, band, columns in self._bands(batch, out_h, row):
            count, rows = images.stop - images.start, band.stop - band.start
            inner = ((rows * row,), (sw,)) if wide else ((rows, out_w), (sh, sw))
            blocks = columns.reshape(count, channels, *kernel, *inner[0])
            copies = []
            for first_i, step_i, taps_i, phase_i, top, down in taps[0]:
                for first_j, step_j, taps_j, phase_j, left, across in taps[1]:
                    start = held[images, :, phase_i, phase_j, top + band.start :, left:]
                    source = np.lib.stride_tricks.as_strided(
                        start,
                        (count, channels, taps_i, taps_j, *inner[0]),
                        (sn, sc, down * sh, across * sw, *inner[1]),
                        writeable=False,
                    )
                    copies.append((blocks[:, :, first_i::step_i, first_j::step_j], source))
            grid = None
            if wide:
                if product_buffer is None:  # the first task is the largest
                    size = columns.size // self.matrix.shape[1] * filters
                    product_buffer = self._empty((size,), self.matrix.dtype)
                product = product_buffer[: count * filters * rows * row]
                grid = (product, product.reshape(count, filters, rows, row)[..., :out_w])
            self._add_task(copies, columns, grid, images, band, out_w)

    def _bands(
        self, batch: int, rows: int, row_pixels: int
    ) -> Iterator[tuple[slice, slice, np.ndarray]]:
        """(images, output rows, columns) per task: all the images whose columns fit a band
        at once, else one image in bands of output rows, over one held columns buffer."""
        depth = self.matrix.shape[1]
        images = max(1, min(batch, _BAND_ELEMENTS // (depth * rows * row_pixels)))
        band = rows if images > 1 else max(1, min(rows, _BAND_ELEMENTS // (depth * row_pixels)))
        buffer = self._empty((images * depth * band * row_pixels,), self.matrix.dtype)
        for first in range(0, batch, images):
            last = min(first + images, batch)
            for start in range(0, rows, band):
                stop = min(start + band, rows)
                size = (last - first) * depth * (stop - start) * row_pixels
                yield slice(first, last), slice(start, stop), buffer[:size]

    def _add_task(
        self,
        copies: list,
        columns: np.ndarray,
        grid: tuple[np.ndarray, np.ndarray] | None,
        images: slice,
        band: slice,
        row_pixels: int,
    ) -> None:
        """A task of the GEMM of `columns` straight into out, or into `grid`'s (product,
        cropped view), for `images` and the output rows `band`."""
        count = images.stop - images.start
        columns = columns.reshape(count, self.matrix.shape[1], -1)
        product, cropped = (None, None) if grid is None else grid
        if product is not None:
            product = product.reshape(count, self.matrix.shape[0], -1)
        if count == 1:
            columns = columns[0]
            product, cropped = (None, None) if grid is None else (product[0], cropped[0])
        span = (images.start, images.stop, band.start * row_pixels, band.stop * row_pixels)
        self.tasks.append((copies, columns, product, cropped, span))

    def _phase_buffer(
        self,
        x_shape: tuple[int, ...],
        plane: tuple[int, int],
        kept: list[int],
        kernel: tuple[int, ...],
        strides: tuple[int, ...],
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
    ) -> np.ndarray:
        """The zero buffer P[n, c, py, px, h, w] of the padded input split by stride phase
        (one phase at unit strides), planes of `plane`, with the interior copies of x noted
        in `self.interior` for the phases some tap reads (a 1×1/2 kernel reads one of four)."""
        (sy, sx), (top, left) = strides, pads
        held = self._zeros((*x_shape[:2], sy, sx, *plane))
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

    def _zeros(self, shape: tuple[int, ...]) -> np.ndarray:
        """A zero buffer: the border that no run rewrites."""
        buffer = self._empty(shape, self.matrix.dtype)
        buffer.fill(0)
        return buffer

    def copy_columns(self, x: np.ndarray) -> None:
        """Only the copies of a run, x into the buffer and every task's columns, without the
        GEMMs (what tools/conv_floor.py times as the cost of building columns)."""
        self._copy_in(x[self.source])
        for copies, *_ in self.tasks:
            for target, source in copies:
                np.copyto(target, source)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        if not out.flags.c_contiguous:
            return False
        x = x[self.source]
        self._copy_in(x)
        with small_buffers():  # the crop's broadcast add would buffer 8192 elements
            self._run_tasks(x, out.reshape(self.flat_shape), bias)
        return True

    def _copy_in(self, x: np.ndarray) -> None:
        """x (cropped to what the windows read) into the held buffer's interior or patches."""
        if self.patches is not None:
            np.copyto(self.patches, x.reshape(self.patches.shape))
        for target, index in self.interior:
            np.copyto(target, x[index])

    def _run_tasks(self, x: np.ndarray, flat: np.ndarray, bias: np.ndarray | None) -> None:
        matrix = self.matrix
        channel_bias = None if bias is None else bias[:, None]
        for copies, columns, product, cropped, (first, last, begin, end) in self.tasks:
            for target, source in copies:
                np.copyto(target, source)
            result = flat[first:last, :, begin:end]
            if last - first == 1:
                result = result[0]
            if columns is None:  # a unit-stride 1×1 kernel: x is its own columns
                columns = x.reshape(x.shape[0], x.shape[1], -1)
                columns = columns[0] if last - first == 1 else columns
            if product is None:
                np.matmul(matrix, columns, out=result)
                if channel_bias is not None:
                    np.add(result, channel_bias, out=result)
                continue
            np.matmul(matrix, columns, out=product)
            rows = result.reshape(cropped.shape)
            if channel_bias is None:
                np.copyto(rows, cropped)
            else:
                np.add(cropped, channel_bias[:, None], out=rows)


def tap_groups(kernel: int, stride: int, dilation: int) -> list[tuple[int, ...]]:
    """Along one axis, the taps that read one stride phase at evenly spaced rows, as (first
    tap, tap step, taps, phase, first row, row step): tap t reads phase t·d mod s from row
    t·d // s on, so taps step = s / gcd(s, d) apart share a phase and start d / gcd rows
    apart."""
    common = math.gcd(stride, dilation)
    step = stride // common
    return [
        (first, step, len(range(first, kernel, step)), first * dilation % stride,
         first * dilation // stride, dilation // common)
        for first in range(min(step, kernel))
    ]  # fmt: skip


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
