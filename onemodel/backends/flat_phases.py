"""A 2-D window operation as shifted reads of one flat array: the padded image's phases.

NumPy runs a ufunc over a 2-D slice as one inner loop per row, and pooling rows are short
(32–64 values), so a 3×3/2 pooling tap over 64×64×64 float32 took 0.10–0.2 ms in per-row
overhead and strided reads (AMD EPYC). Here the padded image of every (n, c) plane is split
into its sh·sw phases (rows and columns by residue modulo the stride) and each phase is
flattened row by row, with cols = out_w + reach columns: tap (i, j) of every output position
is then the same contiguous run of one phase at a shift, one long loop for all planes. The
grid's last `reach` columns are slack that the caller's final copy drops. Shared by NumPy and
CuPy (slicing and copies only): pooling reads these phases, and so do the depthwise
convolution's planar layouts (numpy_cpu/depthwise.py).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.backends.array_types import Scratch


@dataclass(frozen=True)
class PhaseGrid:
    """Where the taps read: each phase a grid of rows × cols (the last taps read `reach_w`
    past its last row, so a flat phase holds `length` values) and per tap in row-major order
    its phase row, phase column and shift in grid positions."""

    out_hw: tuple[int, int]
    rows: int
    cols: int
    reach_w: int
    shifts: tuple[tuple[int, int, int], ...]

    @property
    def length(self) -> int:
        """Values of one flat phase: the grid and the last taps' reach past it."""
        return self.rows * self.cols + self.reach_w

    @property
    def span(self) -> int:
        """Values of every tap's run: out_h·cols."""
        return self.out_hw[0] * self.cols


@functools.lru_cache(maxsize=256)
def phase_grid(
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
) -> PhaseGrid:
    """The PhaseGrid of a window: tap i of output row o reads phase (i·d) mod s at its row
    o + (i·d) // s."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    reach_h, reach_w = (kh - 1) * dh // sh, (kw - 1) * dw // sw
    rows, cols = out_hw[0] + reach_h, out_hw[1] + reach_w
    shifts = []
    for i in range(kh):
        qy, ry = divmod(i * dh, sh)
        for j in range(kw):
            qx, rx = divmod(j * dw, sw)
            shifts.append((ry, rx, qy * cols + qx))
    return PhaseGrid(out_hw, rows, cols, reach_w, tuple(shifts))


def fill_phases(x: Any, grids: Any, strides: Sequence[int], pads: Sequence[int], fill: Any) -> None:
    """grids[ry, rx] (N, C, rows, cols), a view of any layout, = phase (ry, rx) of x padded
    by `fill` at the leading `pads` (and wherever else the phase reaches past x). NumPy's
    copies run in the target's memory order, so a channels-last target is written in order."""
    height, width = x.shape[2:]
    (sh, sw), (top, left) = strides, pads
    rows, cols = grids.shape[-2:]
    for ry in range(sh):
        first_y = (ry - top) % sh  # the first input row in this phase
        row0 = (first_y + top) // sh  # the grid row it lands on
        count_y = max(0, min(len(range(first_y, height, sh)), rows - row0))
        for rx in range(sw):
            first_x = (rx - left) % sw
            col0 = (first_x + left) // sw
            count_x = max(0, min(len(range(first_x, width, sw)), cols - col0))
            phase = grids[ry, rx]
            phase[:, :, :row0] = fill
            phase[:, :, row0 + count_y :] = fill
            inside = phase[:, :, row0 : row0 + count_y]
            inside[..., :col0] = fill
            inside[..., col0 + count_x :] = fill
            inside[..., col0 : col0 + count_x] = x[
                :, :, first_y : first_y + count_y * sh : sh, first_x : first_x + count_x * sw : sw
            ]


@dataclass(frozen=True)
class FlatPhases:
    """The phases of a padded (N, C, H, W) image, each flat: data (sh, sw, N, C, length)."""

    data: Any
    grid: PhaseGrid

    @property
    def run_shape(self) -> tuple[int, int, int]:
        """The shape of every tap's run: (N, C, out_h·cols)."""
        return (*self.data.shape[2:4], self.grid.span)

    def taps(self) -> Iterator[Any]:
        """Per kernel offset in row-major order, the (N, C, out_h·cols) run it reads."""
        span = self.grid.span
        for ry, rx, shift in self.grid.shifts:
            yield self.data[ry, rx, :, :, shift : shift + span]

    def kept(self, grid: Any) -> Any:
        """The (N, C, out_h, out_w) view of a (N, C, out_h·cols) result without its slack."""
        (out_h, out_w), cols = self.grid.out_hw, self.grid.cols
        return grid.reshape(*grid.shape[:2], out_h, cols)[..., :out_w]

    def crop(self, grid: Any, out: Any) -> None:
        """out (N, C, out_h, out_w) = a (N, C, out_h·cols) result without its slack."""
        out[...] = self.kept(grid)


def flat_phases(
    x: Any,
    out_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    fill: Any,
    allocate: Scratch,
) -> FlatPhases:
    """x (N, C, H, W) padded by `fill` (leading `pads`, as much trailing as windows reach)."""
    batch, channels = x.shape[:2]
    (sh, sw) = strides
    grid = phase_grid(
        tuple(int(n) for n in out_hw),
        tuple(int(k) for k in kernel),
        (int(sh), int(sw)),
        tuple(int(d) for d in dilations),
    )
    area = grid.rows * grid.cols
    data = allocate((sh, sw, batch, channels, grid.length), x.dtype)
    data[..., area:] = fill
    grids = data[..., :area].reshape(sh, sw, batch, channels, grid.rows, grid.cols)
    fill_phases(x, grids, strides, pads, fill)
    return FlatPhases(data, grid)
