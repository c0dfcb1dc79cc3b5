"""Convolution kernels (Conv and ConvTranspose, N-D, grouped), shared by NumPy and CuPy.

`ConvolutionKernels` is a mixin of `ArrayKernels` (array_kernels.py): it computes with the
backend's namespace `self.xp` and GEMM `self.matmul_arrays`, so NumPy and CuPy share one
implementation; NumPy-only fast paths (Winograd, depthwise tap by tap) live in
numpy_cpu/ and override `conv_arrays` there. docs/kernel-seam.md describes the paths.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onemodel.backends.array_types import NARROW_FLOATS, Scratch
from onemodel.backends.fp_errors import quiet
from onemodel.backends.ieee_float32 import store, widen


class ConvolutionKernels:
    """Convolution entry points of the array kernels (`xp` and `matmul_arrays` come from
    `ArrayKernels`)."""

    xp: Any
    matmul_arrays: Any  # (a, b, out) -> None: the backend's GEMM
    # Whether `held_conv` has forms for a channels-last x or out (graph/layouts.py).
    holds_channels_last = False
    exact_matmul_arrays: Any  # (a, b, out) -> None: exact mode's product

    def held_conv(
        self,
        x_shape: Sequence[int],
        dtype: Any,
        out_shape: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        weights: Any,
        *,
        x_channels_last: bool = False,
        out_channels_last: bool = False,
    ) -> Any:
        """A call (x, out, bias) -> bool for a fast-mode Conv of one static x shape whose
        buffers and decisions are made once, here (`weights`: `conv_weights`' result), for a
        backend that has one; None: `conv_arrays` in every run. x or out may be held channels
        last (graph/layouts.py), on a backend whose `holds_channels_last` says it takes them."""
        return None

    def conv_weights(self, w: Any, group: int) -> Any:
        """W (M, C/group, *K) as `conv_arrays` multiplies it: (group, M/group, C/group·ΠK),
        C-contiguous, in the compute type (float32 for float16 and bfloat16). The Conv operator
        prepares a constant W once per plan rather than in every run."""
        matrix = w.reshape(group, w.shape[0] // group, -1)
        return self.xp.ascontiguousarray(matrix, dtype=_compute_type(self.xp, w.dtype))

    def conv_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        scratch: Scratch | None = None,
        weights: Any | None = None,
        bias: Any | None = None,
    ) -> None:
        """Cross-correlation of x (N, C, *S) with w (M, C/group, *K) into out (N, M, *O), plus
        `bias` (M,) when given (fast mode: one rounded add after the sum, as a separate Add).

        Output o reads x at o·stride − pad + k·dilation (`pads` are the leading pads; positions
        outside the input read as zero). `weights` is `conv_weights(w, group)` when the caller
        has it already. A 1×1 convolution with unit strides and no padding is one GEMM per
        group straight on x; any other is im2col, a band of output rows at a time, and one GEMM
        per group and band (depthwise included here; the NumPy backend takes its own
        Winograd and depthwise paths first, numpy_cpu/fast.py). Temporaries live in
        `scratch` memory when given (a run's arena). float16 and bfloat16 compute in float32
        and round once into `out`.
        """
        xp = self.xp
        allocate = scratch or (lambda shape, dtype: xp.empty(shape, dtype=dtype))
        if weights is None:
            weights = self.conv_weights(w, group)
        compute = weights.dtype
        result = out if out.dtype == compute else allocate(out.shape, compute)
        if x.dtype != compute:
            widened = allocate(x.shape, compute)
            widened[...] = x
            x = widened
        kernel, out_spatial = w.shape[2:], out.shape[2:]
        geometry = conv_geometry(
            tuple(kernel), tuple(out_spatial), tuple(strides), tuple(pads), tuple(dilations)
        )
        with quiet():  # inf · 0 and overflow are results, as in `binary`
            if geometry.pointwise and tuple(out_spatial) == tuple(x.shape[2:]):
                batch, pixels = x.shape[0], _product(out_spatial)
                self.matmul_arrays(
                    weights,
                    x.reshape(batch, group, -1, pixels),
                    result.reshape(batch, group, -1, pixels),
                )
            elif geometry.shiftable(group, x.shape[1], out.shape[1]):
                self._shifted_conv(x, weights, result, geometry, allocate)
            else:
                self._im2col_conv(x, weights, result, geometry, allocate)
        if result is not out:
            out[...] = result
        if bias is not None:
            add_channel_bias(xp, out, bias)

    def _shifted_conv(
        self, x: Any, weights: Any, out: Any, geometry: _ConvGeometry, allocate: Scratch
    ) -> None:
        """A 2-D stride-1 convolution with fewer output than input channels, without im2col:
        with the padded image flattened row by row (width Wp), tap (i, j) of every output
        position reads the same contiguous run shifted by i·d·Wp + j·d, so one GEMM of all
        taps' weights (kh·kw·M, C) by the flat image gives each tap's products for every
        position of a Wp-wide grid, and the output sums kh·kw shifted, cropped views of them.
        It writes kh·kw·M values per position where im2col copies kh·kw·C, so it wins when M
        is well below C (DenseNet's 3×3 convolutions: 128 → 32)."""
        xp = self.xp
        batch, channels = x.shape[:2]
        (kh, kw), (dh, dw) = geometry.kernel, geometry.dilations
        out_h, out_w = geometry.out_spatial
        height, width = geometry.reach
        slack = (kw - 1) * dw  # the last taps read this far past the grid's last row
        grid = out_h * width
        per_tap = weights.shape[1]
        taps = weights.reshape(per_tap, channels, kh * kw).transpose(2, 0, 1)
        stacked = allocate((kh * kw * per_tap, channels), weights.dtype)
        stacked.reshape(kh * kw, per_tap, channels)[...] = taps
        flat = allocate((channels, height * width + slack), x.dtype)
        products = allocate((kh * kw, per_tap, height * width + slack), out.dtype)
        flat[...] = 0  # the padding; every image then overwrites the same inside
        image = flat[:, : height * width].reshape(channels, height, width)
        kept = [
            min(e, r - p)
            for e, r, p in zip(x.shape[2:], geometry.reach, geometry.pads, strict=True)
        ]
        inside = tuple(slice(p, p + k) for p, k in zip(geometry.pads, kept, strict=True))
        for n in range(batch):
            image[(slice(None), *inside)] = x[n, :, : kept[0], : kept[1]]
            self.matmul_arrays(stacked, flat, products.reshape(kh * kw * per_tap, -1))
            for tap in range(kh * kw):
                i, j = divmod(tap, kw)
                shift = i * dh * width + j * dw
                view = products[tap, :, shift : shift + grid].reshape(per_tap, out_h, width)
                if tap == 0:
                    out[n] = view[:, :, :out_w]
                else:
                    xp.add(out[n], view[:, :, :out_w], out=out[n])

    def _im2col_conv(
        self, x: Any, weights: Any, out: Any, geometry: _ConvGeometry, allocate: Scratch
    ) -> None:
        """Per image and band of output rows (first spatial axis): columns (C·ΠK, rows·Π rest)
        copied from strided windows, then one GEMM per group. Bands keep the columns near
        _BAND_ELEMENTS, so they stay in cache and memory does not grow with the image. A band's
        GEMM may round differently from a whole-image one; bands depend on shapes only, so the
        bits still do not depend on threads."""
        x = self._padded(x, geometry, allocate)
        batch, channels = x.shape[:2]
        groups, per_group = weights.shape[0], weights.shape[1]
        windows = self._windows(x, geometry)  # (N, C, *K, *O)
        rows, *rest = geometry.out_spatial
        row_pixels = _product(rest)
        depth = channels * _product(geometry.kernel)
        band = max(1, min(rows, _BAND_ELEMENTS // max(depth * row_pixels, 1)))
        buffer = allocate((depth * band * row_pixels,), x.dtype)
        pixels = rows * row_pixels
        flat_out = out.reshape(batch, groups, per_group, pixels)
        product = (
            None if band == rows else allocate((groups * per_group * band * row_pixels,), out.dtype)
        )
        taps = (slice(None),) * (1 + len(geometry.kernel))
        for n in range(batch):
            for start in range(0, rows, band):
                stop = min(start + band, rows)
                width = (stop - start) * row_pixels
                columns = buffer[: depth * width]
                columns.reshape(channels, *geometry.kernel, stop - start, *rest)[...] = windows[
                    (n, *taps, slice(start, stop))
                ]
                columns = columns.reshape(groups, depth // groups, width)
                if product is None:
                    self.matmul_arrays(weights, columns, flat_out[n])
                else:
                    target = product[: groups * per_group * width].reshape(groups, per_group, width)
                    self.matmul_arrays(weights, columns, target)
                    flat_out[n, :, :, start * row_pixels : stop * row_pixels] = target

    def _padded(self, x: Any, geometry: _ConvGeometry, allocate: Scratch) -> Any:
        """x, or a zero-padded copy of it when some window reaches past it."""
        batch, channels, *spatial = x.shape
        reach = geometry.reach
        if not any(geometry.pads) and all(r <= n for r, n in zip(reach, spatial, strict=True)):
            return x
        padded = allocate((batch, channels, *reach), x.dtype)
        kept = [min(n, r - p) for n, r, p in zip(spatial, reach, geometry.pads, strict=True)]
        # Zeros only around the copy (a whole-buffer fill first measured 0.28 against 0.11 ms
        # for 16 × 162 × 162, a YOLO stem's input).
        for axis, (p, k) in enumerate(zip(geometry.pads, kept, strict=True)):
            before = (slice(None),) * (2 + axis)
            padded[(*before, slice(0, p))] = 0
            padded[(*before, slice(p + k, None))] = 0
        inside = (slice(p, p + k) for p, k in zip(geometry.pads, kept, strict=True))
        padded[(..., *inside)] = x[(..., *(slice(0, k) for k in kept))]
        return padded

    def _windows(self, x: Any, geometry: _ConvGeometry) -> Any:
        """The (N, C, *K, *O) view of x whose [n, c, k…, o…] is the input that tap k of output
        o reads (x already padded)."""
        axis_strides = x.strides[2:]
        return self.xp.lib.stride_tricks.as_strided(
            x,
            shape=(*x.shape[:2], *geometry.kernel, *geometry.out_spatial),
            strides=(
                *x.strides[:2],
                *(a * d for a, d in zip(axis_strides, geometry.dilations, strict=True)),
                *(a * s for a, s in zip(axis_strides, geometry.strides, strict=True)),
            ),
        )

    def conv_transpose_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        scratch: Scratch | None = None,
        exact: bool = False,
    ) -> None:
        """Transposed convolution of x (N, C, *S) with w (C, M/group, *K) into out (N, M, *O).

        Input i adds w[·, ·, k]·x[i] at output position i·stride + k·dilation − pad (`pads` are
        the leading pads): one matmul per group to columns, then one add per kernel offset into
        the output's stride phases and one strided copy per phase (col2im). Temporaries live in
        `scratch` memory when given (a run's arena, whose pages are already mapped: fresh 3 MB
        columns cost as much as their GEMM in page faults).
        `exact`: the columns by exact_matmul_arrays (each the exact dot product over the input
        channels rounded once into float32, or for float64 the ordered float64 sum), the adds
        in float64 in kernel-offset row-major order from +0, rounded once into `out`.
        """
        xp = self.xp
        allocate = scratch or (lambda shape, dtype: xp.empty(shape, dtype=dtype))
        batch, channels, *spatial = x.shape
        groups, kernel = group, w.shape[2:]
        out_channels = out.shape[1]
        compute = xp.float32 if out.dtype in NARROW_FLOATS else out.dtype
        accumulate = xp.float64 if exact else compute
        weights = w.reshape(groups, channels // groups, -1).swapaxes(1, 2)
        inputs = x.reshape(batch, groups, channels // groups, -1)
        columns = allocate((batch, groups, weights.shape[1], inputs.shape[-1]), compute)
        (self.exact_matmul_arrays if exact else self.matmul_arrays)(weights, inputs, columns)
        if exact and columns.dtype != accumulate:  # float32 columns, subnormals kept
            columns = widen(xp, columns)
        columns = columns.reshape(batch, out_channels, *kernel, *spatial)
        if (
            not exact
            and tuple(kernel) == tuple(strides)
            and all(d == 1 for d in dilations)
            and not any(pads)
            and tuple(out.shape[2:]) == tuple(n * s for n, s in zip(spatial, strides, strict=True))
        ):
            # Kernel = stride (U-Net's and DB's 2×2/2 upsampling): every output position gets
            # exactly one product, so each kernel offset's columns are copied once into their
            # strided positions, rather than zeros and strided adds (one transposing copy of
            # everything measured 3× slower than these per-offset copies).
            for taps in itertools.product(*(range(k) for k in kernel)):
                target = tuple(slice(t, None, k) for t, k in zip(taps, kernel, strict=True))
                out[(..., *target)] = columns[(slice(None), slice(None), *taps)]
            return
        # The output positions from min(−pad, 0) (a negative pad starts the output before the
        # first position any input reaches), split by residue modulo the stride: tap t of input
        # i lands at position f = m + i·s + t·d, in phase f mod s at row f // s, so each tap's
        # add is one shifted block with contiguous rows rather than a write to every s-th
        # value; one strided copy per phase then interleaves and crops (4×4/2, 64 → 32 from
        # 40×40: the node 1.70 → 1.47× onnxruntime, AMD EPYC). Every position still sums its
        # taps in row-major order from +0, so exact mode's bits are those of a direct scatter.
        out_spatial = out.shape[2:]
        margins = [max(-p, 0) for p in pads]
        reach = [
            m + max(_span(n, s, k, d), p + o)
            for m, n, s, k, d, p, o in zip(
                margins, spatial, strides, kernel, dilations, pads, out_spatial, strict=True
            )
        ]
        rows = [-(-r // s) for r, s in zip(reach, strides, strict=True)]
        phases = allocate((*strides, batch, out_channels, *rows), accumulate)
        phases[...] = 0
        with quiet():
            for taps in itertools.product(*(range(k) for k in kernel)):
                first = [m + t * d for m, t, d in zip(margins, taps, dilations, strict=True)]
                phase = tuple(f % s for f, s in zip(first, strides, strict=True))
                target = tuple(
                    slice(f // s, f // s + n)
                    for f, s, n in zip(first, strides, spatial, strict=True)
                )
                phases[phase][(..., *target)] += columns[(slice(None), slice(None), *taps)]
        crop = [m + p for m, p in zip(margins, pads, strict=True)]  # out[o] is position o + crop
        for phase in itertools.product(*(range(s) for s in strides)):
            starts = [(r - c) % s for r, c, s in zip(phase, crop, strides, strict=True)]
            counts = [
                len(range(a, o, s)) for a, o, s in zip(starts, out_spatial, strides, strict=True)
            ]
            if 0 in counts:
                continue
            source = tuple(
                slice((a + c) // s, (a + c) // s + n)
                for a, c, s, n in zip(starts, crop, strides, counts, strict=True)
            )
            target = tuple(slice(a, None, s) for a, s in zip(starts, strides, strict=True))
            store(xp, out[(..., *target)], phases[phase][(..., *source)])


def add_channel_bias(xp: Any, out: Any, bias: Any) -> None:
    """out (N, M, *S) += bias (M,) along the channel axis, in place."""
    xp.add(out, bias.reshape(-1, *(1,) * (out.ndim - 2)), out=out)


@functools.lru_cache(maxsize=256)
def conv_geometry(*args: tuple[int, ...]) -> _ConvGeometry:
    """_ConvGeometry by its arguments: every run of a convolution asks for the same one."""
    return _ConvGeometry(*args)


def _span(count: int, stride: int, kernel: int, dilation: int) -> int:
    """The positions that `count` windows at `stride`, each of `kernel` taps `dilation` apart,
    reach from the first window's first tap to the last window's last."""
    return (count - 1) * stride + (kernel - 1) * dilation + 1


def _product(values: Sequence[int]) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


# Elements of one band of im2col columns (4 MiB of float32): large enough for an efficient GEMM,
# small enough to stay in cache between the copy that writes it and the GEMM that reads it.
_BAND_ELEMENTS = 1 << 20


def _compute_type(xp: Any, dtype: Any) -> Any:
    """float32 for float16 and bfloat16 (no BLAS for them), else the type itself."""
    return xp.dtype(xp.float32) if dtype in NARROW_FLOATS else xp.dtype(dtype)


@dataclass(frozen=True)
class _ConvGeometry:
    """Where the taps of a convolution read, per spatial axis (`pads` are the leading pads)."""

    kernel: tuple[int, ...]
    out_spatial: tuple[int, ...]
    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]

    def __init__(self, kernel, out_spatial, strides, pads, dilations) -> None:
        for name, values in (
            ("kernel", kernel),
            ("out_spatial", out_spatial),
            ("strides", strides),
            ("pads", pads),
            ("dilations", dilations),
        ):
            object.__setattr__(self, name, tuple(int(v) for v in values))

    def shiftable(self, group: int, in_channels: int, out_channels: int) -> bool:
        """Whether `_shifted_conv` applies and pays: 2-D, stride 1, a kernel wider than one
        tap, one group, and at most half as many output as input channels."""
        return (
            len(self.kernel) == 2
            and group == 1
            and self.strides == (1, 1)
            and self.kernel != (1, 1)
            and 2 * out_channels <= in_channels
        )

    @property
    def pointwise(self) -> bool:
        """A 1×1 kernel at unit strides without leading pads: the output reads x as it is."""
        return not any(self.pads) and all(k == 1 for k in self.kernel + self.strides)

    @property
    def reach(self) -> list[int]:
        """Per axis, the padded input extent the windows read."""
        return [
            _span(o, s, k, d)
            for o, s, k, d in zip(
                self.out_spatial, self.strides, self.kernel, self.dilations, strict=True
            )
        ]
