"""Grouped 2-D convolution, depthwise (one input channel per group) above all.

im2col through the shared path runs one tiny GEMM per group over columns copied window by
window. A grouped filter first gets a held form (`held_grouped`; a bound step keeps it, an
unbound run makes it over its scratch). Groups of several channels (RegNet's 16, ResNeXt's 4)
or outputs take the shifted columns (numpy_cpu/shifted_columns.py) where their stride
phases fit the output's planes: one batched matmul per block of groups straight into out
(ms, one node, AMD EPYC, 1 thread, before → after, onnxruntime: 400 channels in 25 groups at
7×7 0.42 → 0.23, 0.12; 160 in 10 at 14×14 0.38 → 0.20, 0.12; 400 in 25 at 14×14 by 3×3/2
0.51 → 0.31, 0.10; 512 in 32 at 14×14 1.07 → 0.50, 0.32; 128 in 32 at 56×56 1.29 → 0.95,
1.26). A depthwise filter (one output channel per input channel) has its form chosen by the
output plane's size alone:

- channels last (numpy_cpu/channels_last_taps.py) for planes of at most CHANNELS_LAST_PIXELS
  outputs, and up to WIDE_KERNEL_PIXELS for kernels of more than 9 taps: one einsum sums
  every tap as a multiply-add over runs of out_w·C values, where the planar forms pay per
  channel (a BLAS call, a loop per short row); two transposing copies, which a kernel of 25
  or 49 taps repays at any plane these models have;
- shifted columns (numpy_cpu/shifted_columns.py) for larger planes whose stride phases fit
  the output plane (the padding that keeps a plane or halves it): every tap's columns one
  contiguous shifted run of x (or of its phases), one BLAS matrix-vector product per
  channel straight into out, no padded copy and no crop.

Everything else (a channel multiplier, groups of several channels, planes the phases do not
fit) splits the padded image into its stride phases, each flattened row by row into one
contiguous run (backends/flat_phases.py, shared with pooling), with cols − out_w positions
of slack per row that the final copy drops, so that tap (i, j) of every output position reads
one phase at a shift:

- gathered columns (stride 1, a channel multiplier, or groups of several channels whose
  phases do not fit the output planes): a
  strided view of a phase's run is the row of columns of each of its taps, so one copy per
  phase gathers a block of groups' columns (channels, taps, out_h·cols), and one batched
  matmul by the weights (group, outputs per group, channels per group · taps) gives the
  output. (128 → 128 channels in 32 groups at 28×28 by 3×3: 0.31 ms against the shared
  im2col's 0.37; 256 at 56×56: 2.49 against 3.56.)
- channel planes (a strided depthwise filter): tap by tap, a multiply by the weights as a
  (C, 1) column and an add over all planes at once (NumPy has no fused multiply-add ufunc:
  2·taps − 1 passes).

MobileNetV2/V3's and EfficientNet-B0's layers, one thread, AMD EPYC, each a one-node session
against onnxruntime in the same run (before: gathered columns, channel planes and tap
passes channels last; ms, onemodel/onnxruntime): 32 at 112×112 by 3×3 0.87 (4.1×) → 0.53
(3.8×), 144 at 56×56 1.10 (3.9×) → 0.66 (3.6×), 96 at 112×112 by 3×3/2 1.21 (3.2×) → 0.88
(2.8×), 384 at 14×14 0.25 (6.2×) → 0.16 (4.0×), 960 at 7×7 0.28 (9.5×) → 0.13 (4.8×), 672 at
14×14 by 5×5 0.85 (7.9×) → 0.55 (5.8×), 1152 at 7×7 by 5×5 0.68 (15×) → 0.25 (6.2×). Every
form is bound by NumPy's passes over memory against onnxruntime's register-blocked kernel;
tools/conv_floor.py times that floor (`rows --filter 'Conv dw'`, `models NAME`): the shifted
columns run 1.2–1.3× their floor at stride 1 (the copies and products themselves), strided
forms pay the phase split's strided copies, and channels last its two transposes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from onemodel.backends.array_types import Scratch
from onemodel.backends.flat_phases import PhaseGrid, flat_phases, phase_grid
from onemodel.backends.numpy_cpu.channel_scale import ChannelScale
from onemodel.backends.numpy_cpu.channels_last_taps import ChannelsLastTaps
from onemodel.backends.numpy_cpu.compiled_taps import CompiledTaps, compiles
from onemodel.backends.numpy_cpu.shifted_columns import ShiftedColumns, fits_output_planes

# A depthwise filter runs channels last, every tap in one einsum (numpy_cpu/channels_last_taps.py)
# over planes of at most CHANNELS_LAST_PIXELS outputs, and a kernel of more than 9 taps over
# planes of at most WIDE_KERNEL_PIXELS; larger planes take the shifted columns (see the module
# docstring for the figures). Wide kernels, channels last against shifted columns, planar x and
# out, ms (AMD EPYC, one thread): 7×7 96 at 56×56 2.95 against 5.46, 32 at 112×112 5.19 against
# 7.92; 5×5 96 at 56×56 2.28 against 3.12, 384 at 14×14 0.55 against 1.18; 5×5/2 144 at 56×56
# 1.18 against 1.60, 32 at 112×112 1.24 against 1.35. 3×3 at 56×56 goes the other way (144
# channels: 2.04 against 1.14).
CHANNELS_LAST_PIXELS = 256
WIDE_KERNEL_PIXELS = 1 << 14
# Whether a float32 depthwise filter takes its numba-compiled form where numba is there
# (numpy_cpu/compiled_taps.py: 2× the fastest NumPy form on MobileNet's layers); tests turn
# it off to reach the NumPy forms.
COMPILED = True
# Images go through a layout a few at a time, so that its operands stay in cache: all 8
# images of a 96 × 56 × 56 batch in one run streamed 10 MB arrays 17 times tap by tap.
_CHUNK_ELEMENTS = 1 << 19
# Column elements gathered per block of channels (1 MB of float32, held in each run's
# scratch): 96 channels at 56×56 by 3×3 took 0.70 ms in blocks of 2^17, 0.65 of 2^18, 0.67
# of 2^20; 672 at 14×14 by 5×5 1.01, 0.92, 0.97 (the old tap passes: 0.77, 1.45).
_BLOCK_ELEMENTS = 1 << 18

# A layout's arguments: x, taps, out, window, geometry, allocate, bias.
Layout = Callable[..., None]


def grouped_conv(
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
    """out (N, M, Ho, Wo) = the grouped convolution of x (N, C, H, W) by `taps` (M, C/G ·
    kh·kw, each filter's channels then taps in row-major order) in G = C / (C/G) groups,
    leading `pads`, plus `bias` (M,) when given (in the final copy), all in one floating
    type."""
    held = held_grouped(x.shape, taps, out.shape, kernel, strides, pads, dilations, allocate)
    if held is not None and held(x, out, bias):
        return
    geometry = phase_grid(tuple(out.shape[2:]), tuple(kernel), tuple(strides), tuple(dilations))
    window = (kernel, strides, pads, dilations)
    depthwise = out.shape[1] == x.shape[1] and taps.shape[1] == len(geometry.shifts)
    layout = tap_layout(geometry, tuple(strides), depthwise)
    per_image = x.shape[1] * geometry.rows * geometry.cols
    step = max(1, _CHUNK_ELEMENTS // per_image)
    for first in range(0, x.shape[0], step):
        images = slice(first, first + step)
        layout(x[images], taps, out[images], window, geometry, allocate, bias)


def held_grouped(
    x_shape: Sequence[int],
    taps: np.ndarray,
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    allocate: Scratch | None = None,
    *,
    x_channels_last: bool = False,
    out_channels_last: bool = False,
) -> ChannelScale | CompiledTaps | ChannelsLastTaps | ShiftedColumns | None:
    """The held form of a grouped convolution that has one (a bound step keeps it; an
    unbound run makes it over its scratch): for a depthwise filter (one output channel per
    input channel) its compiled form where numba compiles it (numpy_cpu/compiled_taps.py),
    else channels last over small planes (CHANNELS_LAST_PIXELS, WIDE_KERNEL_PIXELS)
    or where x or out is held channels last (graph/layouts.py: its transposes are then
    gone), else columns shifted from its stride phases where they fit the output's planes
    (a 1×1 one without pads: a scale per channel, numpy_cpu/channel_scale.py);
    for any other grouped filter those shifted columns, one matmul per block of groups."""
    if len(kernel) != 2:
        return None
    window = (kernel, strides, pads, dilations)
    depthwise = out_shape[1] == x_shape[1] == taps.shape[0] and taps.shape[1] == math.prod(kernel)
    if tuple(kernel) == (1, 1):
        return ChannelScale(x_shape, taps, strides) if depthwise and not any(pads) else None
    if not depthwise:
        groups = x_shape[1] * math.prod(kernel) // taps.shape[1]
        if (
            x_channels_last
            or out_channels_last
            or not fits_output_planes(x_shape, out_shape, *window)
        ):
            return None
        return ShiftedColumns(x_shape, taps, out_shape, *window, allocate, groups=groups)
    if COMPILED and compiles(taps.dtype, kernel, strides, dilations):
        return CompiledTaps(
            x_shape, taps, out_shape, *window, warm=allocate is None,
            x_channels_last=x_channels_last, out_channels_last=out_channels_last,
        )  # fmt: skip
    wide = taps.shape[1] > 9
    if (
        x_channels_last
        or out_channels_last
        or math.prod(out_shape[2:]) <= (WIDE_KERNEL_PIXELS if wide else CHANNELS_LAST_PIXELS)
    ):
        return ChannelsLastTaps(x_shape, taps, out_shape, *window, allocate, out_channels_last)
    if fits_output_planes(x_shape, out_shape, *window):
        return ShiftedColumns(x_shape, taps, out_shape, *window, allocate)
    return None


def takes_grouped(w_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether `grouped_conv` takes a grouped convolution of filters `w_shape` into
    `out_shape`: a depthwise one always, another where one group's columns fit in a block
    (larger groups are the shared im2col's, in bands of output rows)."""
    per_group = w_shape[1]
    return per_group == 1 or per_group * math.prod(w_shape[2:]) * math.prod(out_shape[2:]) <= (
        _BLOCK_ELEMENTS
    )


def tap_layout(geometry: PhaseGrid, strides: tuple[int, int], depthwise: bool) -> Layout:
    """Gathered columns at stride 1 or unless each group is one input and one output
    channel; a strided depthwise filter tap by tap over its channel planes (see the
    module's docstring)."""
    if not depthwise or strides == (1, 1):
        return _gathered_columns
    return _channel_planes


@functools.lru_cache(maxsize=256)
def _phase_taps(
    kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], cols: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Per phase (ry, rx) that some tap reads: (ry, rx, first shift, tap rows, row step,
    tap columns, column step) in grid positions, the taps it holds forming that grid; and
    the taps' row-major indices in this phase order. The rows i with i·d ≡ ry (mod s) step
    by s / gcd(s, d), so their grid rows i·d // s step by d / gcd(s, d)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    phases, order = [], []
    for ry in range(sh):
        rows = [i for i in range(kh) if i * dh % sh == ry]
        for rx in range(sw):
            columns = [j for j in range(kw) if j * dw % sw == rx]
            if not rows or not columns:
                continue
            step_y = dh // math.gcd(sh, dh) if len(rows) > 1 else 0
            step_x = dw // math.gcd(sw, dw) if len(columns) > 1 else 0
            first = rows[0] * dh // sh * cols + columns[0] * dw // sw
            phases.append((ry, rx, first, len(rows), step_y * cols, len(columns), step_x))
            order.extend(i * kw + j for i in rows for j in columns)
    return tuple(phases), tuple(order)


def _gathered_columns(
    x: np.ndarray,
    taps: np.ndarray,
    out: np.ndarray,
    window: tuple[Sequence[int], ...],
    g: PhaseGrid,
    allocate: Scratch,
    bias: np.ndarray | None,
) -> None:
    """Per image and block of groups: one copy per phase of every tap's strided view into
    columns (block's channels, taps, out_h·cols), one matmul of the weights (block, outputs
    per group, channels per group · taps) by them (block, channels per group · taps,
    out_h·cols), one copy of the result without its slack (and with the bias) into out."""
    kernel, strides, pads, dilations = window
    phases = flat_phases(x, g.out_hw, kernel, strides, pads, dilations, 0, allocate).data
    in_phases, order = _phase_taps(tuple(kernel), tuple(strides), tuple(dilations), g.cols)
    count_taps = len(order)
    per_group = taps.shape[1] // count_taps
    groups = x.shape[1] // per_group
    outputs = out.shape[1] // groups  # per group
    depth = per_group * count_taps
    weights = taps.reshape(-1, per_group, count_taps)[:, :, order].reshape(groups, outputs, depth)
    span, item = g.span, x.itemsize
    block = max(1, min(groups, _BLOCK_ELEMENTS // (depth * span)))
    columns = allocate((block * per_group, count_taps, span), x.dtype)
    result = allocate((block, outputs, span), x.dtype)
    (out_h, out_w), cols = g.out_hw, g.cols
    for image in range(x.shape[0]):
        for first in range(0, groups, block):
            count = min(block, groups - first)
            channels = slice(first * per_group, (first + count) * per_group)
            gathered = columns[: count * per_group]
            at = 0
            for ry, rx, shift, tap_rows, step_y, tap_cols, step_x in in_phases:
                run = phases[ry, rx, image, channels, shift:]
                grid = (count * per_group, tap_rows, tap_cols, span)
                view = as_strided(
                    run,
                    shape=grid,
                    strides=(run.strides[0], step_y * item, step_x * item, item),
                    writeable=False,
                )
                np.copyto(gathered[:, at : at + tap_rows * tap_cols].reshape(grid), view)
                at += tap_rows * tap_cols
            product = result[:count]
            np.matmul(
                weights[first : first + count], gathered.reshape(count, depth, span), out=product
            )
            kept = product.reshape(count * outputs, out_h, cols)[..., :out_w]
            targets = slice(first * outputs, (first + count) * outputs)
            if bias is None:
                out[image, targets] = kept
            else:
                np.add(kept, bias[targets].reshape(-1, 1, 1), out=out[image, targets])


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
