"""A 2-D window operation as shifted reads of one flat array: the padded image's phases.

NumPy runs a ufunc over a 2-D slice as one inner loop per row, and pooling rows are short
(32–64 values), so a 3×3/2 pooling tap over 64×64×64 float32 took 0.10–0.2 ms in per-row
overhead and strided reads (AMD EPYC). Here the padded image of every (n, c) plane is split
into its sh·sw phases (rows and columns by residue modulo the stride) and each phase is
flattened row by row, with cols = out_w + reach columns: tap (i, j) of every output position
is then the same contiguous run of one phase at a shift, one long loop for all planes. The
grid's last `reach` columns are slack that the caller's final copy drops. Shared by NumPy and
CuPy (slicing and copies only).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.backends.array_types import Scratch


@dataclass(frozen=True)
class FlatPhases:
    """The phases of a padded (N, C, H, W) image, each flat: data (sh, sw, N, C, length)."""

    data: Any
    out_hw: tuple[int, int]
    cols: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]

    @property
    def run_shape(self) -> tuple[int, int, int]:
        """The shape of every tap's run: (N, C, out_h·cols)."""
        return (*self.data.shape[2:4], self.out_hw[0] * self.cols)

    def taps(self) -> Iterator[Any]:
        """Per kernel offset in row-major order, the (N, C, out_h·cols) run it reads."""
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.strides, self.dilations
        size = self.out_hw[0] * self.cols
        for i in range(kh):
            qy, ry = divmod(i * dh, sh)
            for j in range(kw):
                qx, rx = divmod(j * dw, sw)
                shift = qy * self.cols + qx
                yield self.data[ry, rx, :, :, shift : shift + size]

    def crop(self, grid: Any, out: Any) -> None:
        """out (N, C, out_h, out_w) = a (N, C, out_h·cols) result without its slack."""
        out_h, out_w = self.out_hw
        out[...] = grid.reshape(*grid.shape[:2], out_h, self.cols)[..., :out_w]


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
    batch, channels, height, width = x.shape
    out_h, out_w = out_hw
    (kh, kw), (sh, sw), (dh, dw), (top, left) = kernel, strides, dilations, pads
    reach_h, reach_w = (kh - 1) * dh // sh, (kw - 1) * dw // sw
    rows, cols = out_h + reach_h, out_w + reach_w
    length = rows * cols + reach_w  # the last taps read reach_w past a phase's last row
    data = allocate((sh, sw, batch, channels, length), x.dtype)
    grid = data[..., : rows * cols].reshape(sh, sw, batch, channels, rows, cols)
    data[..., rows * cols :] = fill
    for ry in range(sh):
        first_y = (ry - top) % sh  # the first input row in this phase
        row0 = (first_y + top) // sh  # the grid row it lands on
        count_y = max(0, min(len(range(first_y, height, sh)), rows - row0))
        for rx in range(sw):
            first_x = (rx - left) % sw
            col0 = (first_x + left) // sw
            count_x = max(0, min(len(range(first_x, width, sw)), cols - col0))
            phase = grid[ry, rx]
            phase[:, :, :row0] = fill
            phase[:, :, row0 + count_y :] = fill
            inside = phase[:, :, row0 : row0 + count_y]
            inside[..., :col0] = fill
            inside[..., col0 + count_x :] = fill
            inside[..., col0 : col0 + count_x] = x[
                :, :, first_y : first_y + count_y * sh : sh, first_x : first_x + count_x * sw : sw
            ]
    return FlatPhases(data, (out_h, out_w), cols, (kh, kw), (sh, sw), (dh, dw))
