"""A dilated Conv computed tap by tap over the outputs each tap reads x for (fast mode).

Along each spatial axis an output y reads, through tap i, input row y·s + i·d − pad: the
outputs for which that row lies inside x form one interval, so a tap reads x for a box of
outputs and only padding elsewhere. Summing each tap's product over its box alone multiplies
no padding: per tap one GEMM of its weights (M, C) by x's rows and columns for the box, added
into the box of out. At a dilation about as large as the input (DeepLabV3's atrous rates 12,
24 and 36 over 14×14 features) the outer taps' boxes are small or empty, and the 3×3 over
960 channels, im2col of a padded grid mostly of zeros, took 44-770 ms where onnxruntime's
NCHWc kernel, which skips such taps, took 1.3-2.3. At smaller dilations the boxes are most of
the output, but the im2col's wide padded grid and its bands of few columns (each repacking the
whole weight matrix in OpenBLAS) cost more than the per-tap sums.

Fast mode only: a sum without its zero terms may differ in the sign of a zero result. A
weight of inf or NaN on a tap that reads only padding then contributes nothing rather than
0·inf = NaN, as in onnxruntime, whose kernel skips such taps too (a test checks both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product
from typing import Any

from onemodel.graph.operators.base import Array

# Taps by their boxes where those hold at most this share of the kernel's products over every
# output; above it the backend's own paths (Winograd over the dilation's residues, im2col)
# are faster (128 → 128 at 32×32, dilation 2, share 0.88: 4.1 against 2.3 ms Winograd; 960 →
# 256 at 14×14, dilation 6, share 0.51: 6.1 against 20.9 ms im2col, onnxruntime 5.6).
MAX_SHARE = 0.6


@dataclass(frozen=True)
class TapBox:
    """One tap's weights (M, C) and where they apply: out[..., *outputs] += W_tap ·
    x[..., *inputs] (the same number of positions per axis)."""

    outputs: tuple[slice, ...]
    inputs: tuple[slice, ...]
    weights: Array


@dataclass(frozen=True)
class LiveTaps:
    """Every tap that reads x for some output of the input shape `spatial`, with its box."""

    spatial: tuple[int, ...]
    taps: tuple[TapBox, ...]


def tap_interval(size: int, stride: int, offset: int, outputs: int) -> tuple[int, int]:
    """The outputs [first, stop) that read x through a tap whose row is y·stride + offset."""
    first = max(0, -(offset // stride))
    stop = min(outputs, (size - 1 - offset) // stride + 1)
    return first, max(first, stop)


def live_taps(
    w: Array,
    spatial: tuple[int, ...],
    strides: tuple[int, ...],
    pads: tuple[int, ...],
    dilations: tuple[int, ...],
    out_spatial: tuple[int, ...],
    xp: Any,
) -> LiveTaps | None:
    """The per-tap boxes of W (M, C, *K) for a dilated convolution over `spatial` (one group)
    whose boxes hold at most MAX_SHARE of its products, else None."""
    if all(d == 1 for d in dilations):
        return None
    boxes, positions = [], 0
    for tap in product(*(range(k) for k in w.shape[2:])):
        outputs, inputs = [], []
        for i, size, s, d, begin, out in zip(
            tap, spatial, strides, dilations, pads, out_spatial, strict=True
        ):
            first, stop = tap_interval(size, s, i * d - begin, out)
            start = first * s + i * d - begin
            outputs.append(slice(first, stop))
            inputs.append(slice(start, start + (stop - first - 1) * s + 1, s))
        if all(o.stop > o.start for o in outputs):
            boxes.append((tap, tuple(outputs), tuple(inputs)))
            positions += math.prod(o.stop - o.start for o in outputs)
    if not boxes or positions > MAX_SHARE * math.prod(w.shape[2:]) * math.prod(out_spatial):
        return None
    return LiveTaps(
        tuple(spatial),
        tuple(
            TapBox(outputs, inputs, xp.ascontiguousarray(w[(slice(None), slice(None), *tap)]))
            for tap, outputs, inputs in boxes
        ),
    )


def run_live_taps(
    xp: Any,
    matmul: Any,
    taps: LiveTaps,
    x: Array,
    out: Array,
    bias: Array | None,
    scratch: Any,
) -> None:
    """out (N, M, *O) = Σ over taps of W_tap · x's box, plus the bias, in x's float type."""
    batch, channels = x.shape[:2]
    filters = out.shape[1]
    if bias is None:
        out[...] = 0
    else:
        out[...] = bias.reshape(-1, *(1,) * (out.ndim - 2))
    for box in taps.taps:
        extent = tuple(o.stop - o.start for o in box.outputs)
        positions = math.prod(extent)
        columns = scratch((batch, channels, *extent), x.dtype)
        columns[...] = x[(slice(None), slice(None), *box.inputs)]
        products = scratch((batch, filters, positions), out.dtype)
        matmul(box.weights, columns.reshape(batch, channels, positions), products)
        target = out[(slice(None), slice(None), *box.outputs)]
        xp.add(target, products.reshape(batch, filters, *extent), out=target)
