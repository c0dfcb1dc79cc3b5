"""Depthwise 2-D convolution (one input and one output channel per group) tap by tap.

im2col copies kh·kw values per output and then runs one tiny GEMM per channel (a BLAS call
per channel: 960 of them for a 7×7 MobileNet layer). Here the padded image is flattened row
by row into one contiguous run, so tap (i, j) of every output position reads the same run
shifted by i·Wq + j: each tap is one multiply by the weights and one add over contiguous
memory, for all channels and images at once, into an accumulator with Wq − Wo columns of
slack that the final copy drops. A stride s first splits the padded image into its s² phases
(rows and columns by residue mod s), so a strided tap reads one phase at a shift and stays
contiguous: the phases pooling reads too (backends/flat_phases.py).

Two layouts of that run, chosen by the plane's size:
- channel planes (N, C, rows·Wq): each channel's plane is one row of the run, multiplied by
  its weight as a (C, 1) column. Rows of a few hundred elements (14×14 planes) leave NumPy's
  ufunc loops short: a tap over 576 planes of 14×16 took 0.053 ms, 0.41 ns per element.
- channels last (N, rows·Wq, C), for small planes: tap (i, j) shifts the run by (i·Wq + j)·C,
  and every tap's weights, repeated along the run into rows of about 8192 elements, make each
  multiply one long contiguous loop (the same tap: 0.035 ms), for a transposing copy in and
  one out.
Either way a tap costs two passes (NumPy has no fused multiply-add), so this path is bound by
NumPy's element-wise rate: docs/kernel-seam.md states the bound against onnxruntime.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onemodel.backends.array_types import Scratch
from onemodel.backends.flat_phases import PhaseGrid, fill_phases, flat_phases, phase_grid

# Planes (output rows × padded row length) of at most this many elements go channels last
# (min CPU time against the channel planes, AMD EPYC, 1 thread, a loaded machine: 960 channels
# at 7×7 0.78×, 384 at 14×14 0.91×, 144 at 28×28 stride 2 0.93×, 240 at 14×14 by 5×5 0.97×;
# 192 at 28×28, an 840-element plane, 1.25×, 96 at 56×56 1.48×: the two transposing copies
# then cost more than the longer loops save).
CHANNELS_LAST_PLANE = 256
# Elements per row of a channels-last tap's operands (a whole number of pixels).
_ROW_ELEMENTS = 8192
# Images go through the taps a few at a time, so that a tap's operands stay in cache: all 8
# images of a 96 × 56 × 56 batch in one run streamed 10 MB arrays from memory 17 times.
# (Blocks of channels within one large image measured no gain: 32 × 112 × 112 1.7 → 2.0 ms.)
_CHUNK_ELEMENTS = 1 << 19


def depthwise_conv(
    x: np.ndarray,
    taps: np.ndarray,
    out: np.ndarray,
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    kernel: Sequence[int],
    allocate: Scratch,
    bias: np.ndarray | None = None,
) -> None:
    """out (N, C, Ho, Wo) = the depthwise convolution of x (N, C, H, W) by `taps` (C, kh·kw),
    leading `pads`, plus `bias` (C,) when given (in the final copy), all in one floating
    type."""
    geometry = phase_grid(tuple(out.shape[2:]), tuple(kernel), tuple(strides), tuple(dilations))
    layout = _channels_last if geometry.span <= CHANNELS_LAST_PLANE else _channel_planes
    per_image = x.shape[1] * geometry.rows * geometry.cols
    step = max(1, _CHUNK_ELEMENTS // per_image)
    for first in range(0, x.shape[0], step):
        images = slice(first, first + step)
        window = (kernel, strides, pads, dilations)
        layout(x[images], taps, out[images], window, geometry, allocate, bias)


def _channel_planes(
    x: np.ndarray,
    taps: np.ndarray,
    out: np.ndarray,
    window: tuple[Sequence[int], ...],
    g: PhaseGrid,
    allocate: Scratch,
    bias: np.ndarray | None,
) -> None:
    """Phases (sh, sw, N, C, rows·cols + slack), as pooling reads them (`flat_phases`): one
    row per channel plane."""
    kernel, strides, pads, dilations = window
    phases = flat_phases(x, g.out_hw, kernel, strides, pads, dilations, 0, allocate)
    weights = taps.T[:, :, None]  # [tap, channel, 1]
    total = allocate(phases.run_shape, x.dtype)
    product = allocate(phases.run_shape, x.dtype)
    for tap, run in enumerate(phases.taps()):
        if tap == 0:
            np.multiply(run, weights[tap], out=total)
        else:
            np.multiply(run, weights[tap], out=product)
            np.add(total, product, out=total)
    if bias is None:
        phases.crop(total, out)
    else:
        np.add(phases.kept(total), bias.reshape(-1, 1, 1), out=out)


def _channels_last(
    x: np.ndarray,
    taps: np.ndarray,
    out: np.ndarray,
    window: tuple[Sequence[int], ...],
    g: PhaseGrid,
    allocate: Scratch,
    bias: np.ndarray | None,
) -> None:
    """Phases (sh, sw, flat run): images one after another, each (rows·cols + slack, C). A
    tap's run crosses from one image into the next only at positions the final copy drops,
    so one multiply and one add per tap cover every image, in rows of `_ROW_ELEMENTS`."""
    batch, channels = x.shape[:2]
    _, strides, pads, _ = window
    sh, sw = strides
    (out_h, out_w), area = g.out_hw, g.rows * g.cols
    image = g.length * channels  # one image's stretch of the run
    row = max(1, _ROW_ELEMENTS // channels) * channels
    count = -(-batch * image // row)  # rows of the accumulator, past the last image
    reach = max(shift for _, _, shift in g.shifts) * channels
    length = max(reach + count * row, batch * image)
    phases = allocate((sh, sw, length), x.dtype)
    phases[:, :, batch * image :] = 0
    grids = (
        phases[:, :, : batch * image]
        .reshape(sh, sw, batch, image)[..., : area * channels]
        .reshape(sh, sw, batch, g.rows, g.cols, channels)
        .transpose(0, 1, 2, 5, 3, 4)
    )
    fill_phases(x, grids, strides, pads, 0)
    weights = np.tile(taps.T, (1, row // channels))  # [tap, row of repeated channels]
    total = allocate((count, row), x.dtype)
    product = allocate((count, row), x.dtype)
    for tap, (ry, rx, shift) in enumerate(g.shifts):
        start = shift * channels
        run = phases[ry, rx, start : start + count * row].reshape(count, row)
        if tap == 0:
            np.multiply(run, weights[tap], out=total)
        else:
            np.multiply(run, weights[tap], out=product)
            np.add(total, product, out=total)
    if bias is not None:
        np.add(total, np.tile(bias, row // channels), out=total)
    kept = (
        total.reshape(-1)[: batch * image]
        .reshape(batch, image)[:, : out_h * g.cols * channels]
        .reshape(batch, out_h, g.cols, channels)[:, :, :out_w]
    )
    out[...] = kept.transpose(0, 3, 1, 2)
