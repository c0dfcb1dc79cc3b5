"""Depthwise 2-D convolution (one input and one output channel per group) tap by tap.

im2col copies kh·kw values per output and then runs one tiny GEMM per channel (a BLAS call
per channel: 960 of them for a 7×7 MobileNet layer). Here the padded image of every channel
is flattened row by row into one contiguous run, so tap (i, j) of every output position reads
the same run shifted by i·Wq + j: each tap is one multiply by the per-channel weights and one
add over contiguous memory, for all channels and images at once, into an accumulator with
Wq − Wo columns of slack that the final copy drops. A stride s first splits the padded image
into its s² phases (rows and columns by residue mod s), so a strided tap reads one phase at a
shift and stays contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onemodel.backends.array_types import Scratch


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
    batch, channels, height, width = x.shape
    kh, kw = kernel
    (sh, sw), (dh, dw), (top, left) = strides, dilations, pads
    out_h, out_w = out.shape[2:]
    # Tap i of output row o reads phase (i·dh) mod sh at its row o + (i·dh) // sh.
    reach_h, reach_w = (kh - 1) * dh // sh, (kw - 1) * dw // sw
    rows, cols = out_h + reach_h, out_w + reach_w
    length = rows * cols + reach_w  # the last taps read reach_w past a phase's last row
    phases = allocate((sh, sw, batch, channels, length), x.dtype)
    grid = phases[..., : rows * cols].reshape(sh, sw, batch, channels, rows, cols)
    phases[..., rows * cols :] = 0
    for ry in range(sh):
        first_y = (ry - top) % sh  # the first input row in this phase
        row0 = (first_y + top) // sh
        count_y = max(0, min(len(range(first_y, height, sh)), rows - row0))
        for rx in range(sw):
            first_x = (rx - left) % sw
            col0 = (first_x + left) // sw
            count_x = max(0, min(len(range(first_x, width, sw)), cols - col0))
            phase = grid[ry, rx]
            phase[:, :, :row0] = 0
            phase[:, :, row0 + count_y :] = 0
            inside = phase[:, :, row0 : row0 + count_y]
            inside[..., :col0] = 0
            inside[..., col0 + count_x :] = 0
            inside[..., col0 : col0 + count_x] = x[
                :, :, first_y : first_y + count_y * sh : sh, first_x : first_x + count_x * sw : sw
            ]
    weights = taps.T[:, :, None]  # [tap, channel, 1]
    total = allocate((batch, channels, out_h * cols), x.dtype)
    product = allocate((batch, channels, out_h * cols), x.dtype)
    for tap in range(kh * kw):
        (qy, ry), (qx, rx) = divmod(tap // kw * dh, sh), divmod(tap % kw * dw, sw)
        shift = qy * cols + qx
        run = phases[ry, rx, :, :, shift : shift + out_h * cols]
        if tap == 0:
            np.multiply(run, weights[tap], out=total)
        else:
            np.multiply(run, weights[tap], out=product)
            np.add(total, product, out=total)
    kept = total.reshape(batch, channels, out_h, cols)[..., :out_w]
    if bias is None:
        out[...] = kept
    else:
        np.add(kept, bias.reshape(channels, 1, 1), out=out)
