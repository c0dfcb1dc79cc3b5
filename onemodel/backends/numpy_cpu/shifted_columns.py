"""A depthwise convolution whose taps' columns are shifted runs of out-sized planes.

Split x (unpadded) by stride phase, P[r, q][a, b] = x[a·sh + r, b·sw + q] (at unit strides
x's own planes), and store each phase as a plane of the output's size (out_h × out_w, zeros
past its data). Tap (i, j), at input offset (i·dh − top, j·dw − left), reads for every output
pixel one phase at one shift (s_y, s_x) of its flat plane: its column over the whole plane is
one contiguous shifted run, copied as it is. Only two kinds of pixel in such a run are wrong,
and both read padding: those it would read above the first row or below the last (left out of
the copy, so the held buffer's zeros stay there) and, in every row, those whose window wraps
round into the previous or next row (rezeroed after the copy, a few strided values a row).
That needs every phase's data to fit the output plane (`fits_output_planes`), as it does for
the padding that keeps a plane's size at unit strides and halves it at stride 2. Then one BLAS
matrix-vector product per channel (weights (1, taps) @ columns (taps, out_h·out_w)) writes the
channel's plane straight into out, and the bias is one contiguous add: no padded copy of x
and no crop of a padded grid, which the gathered columns and the tap passes over flat phases
(numpy_cpu/depthwise.py) pay. Groups of several channels or outputs are the same with one
matrix product per group (its outputs' weights (outputs, channels · taps) @ its channels'
columns), a batched matmul per block of groups.

AMD EPYC, one thread, held as a bound step holds it, against those layouts in the same run
(ms): 32 channels at 112×112 by 3×3 0.54 against 0.70, 144 at 56×56 0.65 against 0.86; 96
at 112×112 by 3×3/2 0.92 against 1.13, 144 at 56×56 by 5×5/2 0.70 against 0.82 (there the
phase split's strided copies are most of what is left).

`ShiftedColumns` holds its phase planes, columns buffer and copies for one x shape; a bound
step keeps one (numpy_cpu/fast.py `held_conv`), an unbound run makes one over its scratch:
the same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onemodel.backends.array_types import Scratch, own_memory
from onemodel.backends.numpy_cpu.ufunc_buffers import small_buffers

# Column elements per block of channels (in cache between the copies and the products):
# 144 channels at 56×56 by 3×3 took 0.77 ms in blocks of 2^18, 0.71 of 2^19, 0.73 of 2^20.
_BLOCK_ELEMENTS = 1 << 19


def _phase_reads(
    kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int]
) -> list[tuple[int, int, int, int]]:
    """Per tap in row-major order: its phase (r, q) and shift (s_y, s_x) in the phase's grid,
    input offset i·dh − top = s_y·sh + r (and so across)."""
    (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel, strides, dilations, pads[:2]
    reads = []
    for i in range(kh):
        s_y, r = divmod(i * dh - top, sh)
        for j in range(kw):
            s_x, q = divmod(j * dw - left, sw)
            reads.append((r, q, s_y, s_x))
    return reads


def fits_output_planes(
    x_shape: Sequence[int],
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> bool:
    """Whether every stride phase that a tap reads holds at most out_h × out_w values of x,
    so that whatever a shifted run reads past a phase's data is padding."""
    (height, width), (sh, sw), (out_h, out_w) = x_shape[2:], strides, out_shape[2:]
    return all(
        len(range(r, height, sh)) <= out_h and len(range(q, width, sw)) <= out_w
        for r, q, _, _ in _phase_reads(kernel, strides, pads, dilations)
    )


class ShiftedColumns:
    """out (N, M, Ho, Wo) = the grouped convolution of x (N, C, H, W) by `taps` (M, C/G ·
    kh·kw, each filter's channels then taps in row-major order) in `groups` groups, leading
    `pads`, plus a bias, where `fits_output_planes`; see the module docstring (a depthwise
    filter is C groups of one channel and one output). Call it as (x, out, bias or None); it
    returns False, having written nothing, for an out that is not one C-contiguous array."""

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
        groups: int | None = None,
    ) -> None:
        empty = allocate or own_memory
        _, channels, height, width = x_shape
        (sh, sw), (out_h, out_w) = strides, out_shape[2:]
        reads = _phase_reads(kernel, strides, pads, dilations)
        count, pixels = len(reads), out_h * out_w
        groups = groups or channels
        self.per_group, self.outputs = channels // groups, out_shape[1] // groups
        depth = self.per_group * count  # one group's columns
        self.groups = max(1, min(groups, _BLOCK_ELEMENTS // (depth * pixels)))  # a block's
        self.block = self.groups * self.per_group  # channels a block
        # x's planes are the one phase where they have the output's size, else held copies.
        phases = sorted({(r, q) for r, q, _, _ in reads})
        self.planes = None
        self.fills: list[tuple[np.ndarray, tuple]] = []  # (a phase's data, x's part for it)
        if (height, width) != (out_h, out_w) or len(phases) > 1:
            self.planes = empty((len(phases), self.block, pixels), taps.dtype)
            self.planes.fill(0)
            grids = self.planes.reshape(len(phases), self.block, out_h, out_w)
            for index, (r, q) in enumerate(phases):
                rows, cols = len(range(r, height, sh)), len(range(q, width, sw))
                part = (slice(r, r + rows * sh, sh), slice(q, q + cols * sw, sw))
                self.fills.append((grids[index, :, :rows, :cols], part))
        columns = empty((self.block, count, pixels), taps.dtype)
        columns.fill(0)
        grid = columns.reshape(self.block, count, out_h, out_w)
        self.columns = columns
        self.copies: list[tuple[np.ndarray, int, slice]] = []  # (tap's columns, phase, run)
        for tap, (r, q, s_y, s_x) in enumerate(reads):
            shift = s_y * out_w + s_x
            first, last = max(0, -shift), min(pixels, pixels - shift)
            if first < last:
                run = slice(first + shift, last + shift)
                self.copies.append((columns[:, tap, first:last], phases.index((r, q)), run))
        # The pixels whose window wraps a row, for each kernel column's taps at once (their
        # shift across is the column's).
        self.wraps: list[np.ndarray] = []
        kw = kernel[1]
        for column, (*_, s_x) in enumerate(reads[:kw]):
            if s_x < 0:
                self.wraps.append(grid[:, column::kw, :, : min(out_w, -s_x)])
            elif s_x > 0:
                self.wraps.append(grid[:, column::kw, :, max(0, out_w - s_x) :])
        self.weights = taps.reshape(groups, self.outputs, depth)

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        if not out.flags.c_contiguous:
            return False
        with small_buffers():  # the bias add buffers less (144 × 56 × 56: 0.61 -> 0.57 ms)
            self._run(x, out.reshape(*out.shape[:2], 1, -1), bias)
        return True

    def _run(self, x: np.ndarray, results: np.ndarray, bias: np.ndarray | None) -> None:
        batch, channels = x.shape[:2]
        block, per_group, outputs = self.block, self.per_group, self.outputs
        for image in range(batch):
            for first in range(0, channels, block):
                group = slice(first, min(channels, first + block))
                count = group.stop - first
                block_groups = slice(first // per_group, group.stop // per_group)
                made = slice(block_groups.start * outputs, block_groups.stop * outputs)
                if self.planes is None:
                    planes = x[image, group].reshape(1, count, -1)
                else:
                    planes = self.planes[:, :count]
                    for target, part in self.fills:
                        np.copyto(target[:count], x[(image, group, *part)])
                for target, phase, run in self.copies:
                    np.copyto(target[:count], planes[phase, :, run])
                for wrap in self.wraps:
                    wrap[:count] = 0
                result = results[image, made]
                columns = self.columns[:count].reshape(count // per_group, -1, result.shape[-1])
                np.matmul(
                    self.weights[block_groups],
                    columns,
                    out=result.reshape(columns.shape[0], outputs, -1),
                )
                if bias is not None:
                    np.add(result, bias[made, None, None], out=result)
