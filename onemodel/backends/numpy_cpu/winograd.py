"""Winograd convolution F(m×m, 3×3) for stride-1 3×3 convolutions (fast mode, NumPy).

A 3×3 convolution computes each m×m block of outputs from an (m+2)×(m+2) tile of inputs.
Winograd's minimal filtering turns that block into (m+2)² element-wise products in a transformed
space: V = Bᵀ d B (input tile), U = G g Gᵀ (filter, once per plan), Y = Aᵀ (U ⊙ V) A. Summed
over input channels, the products become (m+2)² GEMMs (M, C) × (C, tiles), so F(2×2, 3×3)
does 16 multiplications per 4 outputs (2.25× fewer than the direct 9 per output) and
F(4×4, 3×3) 36 per 16 (4× fewer). BLAS runs the GEMMs at the same rate as im2col's, so the
saving is the multiplications; the transforms are small GEMMs (K = m+2) over whole bands of
tiles, one pass each.

Dilation d reads every d-th input: outputs of one residue (o mod d) along each axis form an
undilated convolution over the inputs of that residue, so the input's residue images are
convolved as a batch (DeepLabV3's dilated 3×3 convolutions).

Error (float32, unit-scale data): F(2×2) within about 1e-6 and F(4×4) within about 2e-5 of
the largest output, relative (tests/test_winograd.py states the bound it checks). Exact mode
never comes here.

The steps around the core GEMMs (the tiles' strided copy, the K = m + 2 passes, the copy
into NCHW) cost about as much as the GEMMs, and no cheaper NumPy form of them was found:
tools/winograd_floor.py times each step in every form tried (64 → 64 at 56×56, 1 thread:
GEMMs 0.58 ms, the rest 0.69, the kernel 1.07× that floor; docs/kernel-seam.md lists them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.array_types import Scratch

# Input transform Bᵀ, filter transform G and output transform Aᵀ per output block size m
# (interpolation points 0, ±1 for m = 2; 0, ±1, ±2 and ∞ for m = 4).
_TRANSFORMS: dict[int, tuple[list[list[float]], list[list[float]], list[list[float]]]] = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}

# Elements of one band's transformed tiles: the band's arrays stay in cache between passes
# (64 -> 64 at 56x56, batch 8, 1 thread: 8.2 ms a run at 2^18, 9.1 ms at 2^19, 12.5 at 2^20).
_BAND_ELEMENTS = 1 << 18
# The fewest tile columns (GEMM columns: images × tiles × residues) that let a block size run at
# all (`winograd_fits`); `winograd_block` chooses among the sizes that do.
_MIN_COLUMNS = {4: 16, 2: 16}
# F(4×4) from this many tile columns whatever its padding waste, F(2×2) below it unless F(4×4)'s
# tiles cover the output within `_TIGHT_COVER`. Measured per layer (AMD EPYC Zen 5, 1 thread,
# OpenBLAS Haswell and SkylakeX kernels alike; time / direct im2col):
#   512 → 512 at 7×7, one image (F4: 4 columns): F2 0.74-0.95, F4 1.22-1.51
#   256 → 256 at 14×14 (F4: 16 columns, covering 256 of 196 outputs): F2 0.55-0.66, F4 0.72-0.75
#   128 → 256 at 8×32 (F4: 16 columns, exact cover): F2 0.57, F4 0.40
#   512 → 512 at 7×7, 8 images (F4: 32 columns): F2 0.58-0.60, F4 0.49-0.54
#   128 → 128 at 28×28 (49 columns): F2 0.68-0.80, F4 0.43-0.44
_WIDE_COLUMNS = 32
_TIGHT_COVER = 1.15
# The most outputs a block size's tiles may compute per output the convolution has: F(4×4)
# makes 36 products per 16 outputs and F(2×2) 16 per 4 against the direct 9, so a cover beyond
# these leaves little or nothing of the saving for the transforms. A large dilation makes the
# residues small (DeepLabV3's rate 12 at 14×14: 2×2 outputs per residue; F4 covered 2304 for
# 196 outputs, F2 576), and its layer took 61 ms against the direct path's 4.
_MAX_COVER = {4: 2.5, 2: 1.6}
# A transformed filter larger than this needs `_WIDE_COLUMNS` tile columns, else the direct path:
# in a whole model the weights come from memory, not cache, every run, and U is (m + 2)²/9 times
# W's size while few columns reuse each of its elements little. 512 → 512 at 7×7, one image
# (F2: 16 columns, U 16.8 MB), three ResNet-50 bottlenecks in one session, Intel Xeon, 1 thread:
# 20.5-21.8 ms with F2 against 18.1-18.6 direct (onnxruntime 9.4-10.2); 256 → 256 at 14×14 (F2:
# 49 columns, U 4.2 MB) 11.7-11.8 against 11.4-11.6, so smaller filters keep Winograd.
_STREAMED_FILTER_BYTES = 8 << 20
# The fewest multiply-adds of the direct sum (M·C·9·outputs) it takes: below, the transforms'
# dozen calls cost more than they save (32 → 32 at 16×16 2.4M: F4 1.17× the direct time; 64 →
# 64 at 10×10 3.7M: F2 1.06×; 48 → 48 at 16×16 5.3M: F4 0.86×; 96 → 96 at 8×8: F2 0.84×).
_MIN_PRODUCTS = 1 << 22
# More input channels than this, or the direct path: Winograd measured from 32 channels (F(4×4),
# AMD EPYC, 1 thread: 32 → 64 at 56×56 0.87× the direct time, 64 → 64 at 56×56 0.76×, 64 → 64
# at 28×28 0.93×, 16 → 64 at 56×56 1.4×). A bank of identical filters (the ONNX suite's light
# SqueezeNet) never comes here: the fast backend computes one filter and copies it
# (numpy_cpu/fast.py), since per-frequency GEMMs, like any GEMM, round equal rows by position.
_MAX_DIRECT_CHANNELS = 31
_MIN_FILTERS = 32  # output channels; fewer measured no gain


@dataclass(frozen=True)
class WinogradFilter:
    """A filter transformed once per plan: U (t², M, C) for output blocks of `block` × `block`,
    t = block + 2, in float32."""

    block: int
    transformed: np.ndarray

    @property
    def tile(self) -> int:
        return self.block + 2

    def conv(
        self,
        x: np.ndarray,
        out: np.ndarray,
        pads: tuple[int, ...],
        dilations: tuple[int, ...],
        allocate: Scratch,
        matmul: Any,
        bias: np.ndarray | None,
    ) -> None:
        """`winograd_conv` by this filter, for outputs that `WinogradFilters.for_output`
        chose it for."""
        winograd_conv(x, self, out, pads, dilations, allocate, matmul, bias)


class WinogradFilters:
    """The Winograd transforms of one float32 W (M, C, 3, 3), each block size's made on first
    use and kept for the plan: which size pays depends on the output's tiles
    (`winograd_block`), known only once a step is bound or run."""

    def __init__(self, w: np.ndarray) -> None:
        self._w = w
        self._by_block: dict[int, WinogradFilter] = {}

    def for_output(
        self, batch: int, out_spatial: tuple[int, ...], dilations: tuple[int, ...]
    ) -> WinogradFilter | None:
        """The transform for `batch` outputs of `out_spatial`, or None: the direct path."""
        products = math.prod(self._w.shape) * batch * math.prod(out_spatial)
        block = (
            winograd_block(batch, out_spatial, dilations, self._w.shape[0] * self._w.shape[1])
            if products >= _MIN_PRODUCTS
            else None
        )
        if block is None:
            return None
        prepared = self._by_block.get(block)
        if prepared is None:  # concurrent first runs may both compute it: the same values
            prepared = self._by_block[block] = transformed_filter(self._w, block)
        return prepared


def winograd_filter(w: np.ndarray, group: int) -> WinogradFilters | None:
    """The transforms of a float32 W (M, C, 3, 3) with channels enough for Winograd to pay,
    else None."""
    if (
        w.dtype != np.float32
        or group != 1
        or w.shape[2:] != (3, 3)
        or w.shape[1] <= _MAX_DIRECT_CHANNELS
        or w.shape[0] < _MIN_FILTERS
    ):
        return None
    return WinogradFilters(w)


def winograd_block(
    batch: int, out_spatial: tuple[int, ...], dilations: tuple[int, ...], pairs: int
) -> int | None:
    """F(4×4) where its tiles are many or cover the output tightly, else F(2×2) where its
    tiles fill the GEMMs, else None (see `_WIDE_COLUMNS`); `pairs` (output · input channels)
    sizes the transformed filter (`_STREAMED_FILTER_BYTES`)."""
    (out_h, out_w), (dh, dw) = out_spatial, dilations
    rows, cols = -(-out_h // dh), -(-out_w // dw)  # outputs per residue and axis

    def columns(m: int) -> int:
        return batch * dh * dw * -(-rows // m) * -(-cols // m)

    def fills(m: int) -> bool:
        streamed = (m + 2) ** 2 * pairs * 4 > _STREAMED_FILTER_BYTES
        return columns(m) >= (_WIDE_COLUMNS if streamed else _MIN_COLUMNS[m])

    def cover(m: int) -> float:  # outputs computed (every residue's tiles) per output
        return m * m * dh * dw * -(-rows // m) * -(-cols // m) / (out_h * out_w)

    if cover(4) <= _MAX_COVER[4] and (
        columns(4) >= _WIDE_COLUMNS or (fills(4) and cover(4) <= _TIGHT_COVER)
    ):
        return 4
    return 2 if fills(2) and cover(2) <= _MAX_COVER[2] else None


def transformed_filter(w: np.ndarray, block: int) -> WinogradFilter:
    """U = G g Gᵀ of every (output, input) channel pair of W (M, C, 3, 3) for F(block, 3×3),
    computed in float64 and rounded once to float32."""
    g = np.array(_TRANSFORMS[block][1])
    tile = block + 2
    u = np.einsum("ik,mckl,jl->ijmc", g, w.astype(np.float64), g)
    return WinogradFilter(
        block, np.ascontiguousarray(u.reshape(tile * tile, *w.shape[:2]), np.float32)
    )


def winograd_fits(
    prepared: WinogradFilter,
    batch: int,
    out_spatial: tuple[int, ...],
    dilations: tuple[int, ...],
) -> bool:
    """Whether the tiles of `batch` outputs of `out_spatial` fill Winograd's GEMMs
    (`_MIN_COLUMNS`), so that `winograd_conv` takes them."""
    m = prepared.block
    (out_h, out_w), (dh, dw) = out_spatial, dilations
    tiles = -(-out_h // (m * dh)) * dh * -(-out_w // (m * dw)) * dw
    return batch * tiles >= _MIN_COLUMNS[m]


def winograd_conv(
    x: np.ndarray,
    prepared: WinogradFilter,
    out: np.ndarray,
    pads: tuple[int, ...],
    dilations: tuple[int, ...],
    allocate: Scratch,
    matmul: Any,
    bias: np.ndarray | None = None,
) -> bool:
    """out (N, M, Ho, Wo) = the stride-1 3×3 convolution of float32 x (N, C, H, W), leading
    `pads`, `dilations`, plus `bias` (M,) when given, when its tiles fill the GEMMs (else
    False and nothing written). `matmul(a, b, out)` is the backend's GEMM."""
    if not winograd_fits(prepared, x.shape[0], out.shape[2:], dilations):
        return False
    if tuple(dilations) == (1, 1):
        _undilated(x, prepared, out, pads, allocate, matmul, bias)
    else:
        _dilated(x, prepared, out, pads, dilations, allocate, matmul, bias)
    return True


def _dilated(
    x: np.ndarray,
    prepared: WinogradFilter,
    out: np.ndarray,
    pads: tuple[int, ...],
    dilations: tuple[int, ...],
    allocate: Scratch,
    matmul: Any,
    bias: np.ndarray | None,
) -> None:
    """The outputs of one residue (o mod d per axis) are an undilated convolution of the
    inputs of that residue: the padded input split into its dh·dw residue images (space to
    batch), those convolved as one batch, the results interleaved back. With the residues as
    tile columns instead, every gather ran d-element inner loops (128 channels at 32×32,
    d = 2, 1 thread: 1.30 against 1.64 ms)."""
    batch, channels = x.shape[:2]
    filters, (out_h, out_w), (dh, dw) = out.shape[1], out.shape[2:], dilations
    rows, cols = -(-out_h // dh), -(-out_w // dw)  # outputs per residue and axis
    padded = _padded(x, pads, ((rows + 2) * dh, (cols + 2) * dw), allocate)
    residues = allocate((dh, dw, batch, channels, rows + 2, cols + 2), x.dtype)
    split = padded.reshape(batch, channels, rows + 2, dh, cols + 2, dw)
    residues[...] = split.transpose(3, 5, 0, 1, 2, 4)
    results = allocate((dh, dw, batch, filters, rows, cols), out.dtype)
    _undilated(
        residues.reshape(-1, channels, rows + 2, cols + 2),
        prepared,
        results.reshape(-1, filters, rows, cols),
        (0, 0),
        allocate,
        matmul,
        bias,
    )
    for row in range(dh):
        for col in range(dw):
            target = out[:, :, row::dh, col::dw]
            target[...] = results[row, col, :, :, : target.shape[2], : target.shape[3]]


def _undilated(
    x: np.ndarray,
    prepared: WinogradFilter,
    out: np.ndarray,
    pads: tuple[int, ...],
    allocate: Scratch,
    matmul: Any,
    bias: np.ndarray | None,
) -> None:
    """`winograd_conv` at dilation 1, a band of tile rows at a time."""
    m, t = prepared.block, prepared.tile
    batch, channels = x.shape[:2]
    out_h, out_w = out.shape[2:]
    rows, cols = -(-out_h // m), -(-out_w // m)  # tiles per axis
    per_row = batch * cols  # GEMM columns per tile row
    band = max(1, min(rows, _BAND_ELEMENTS // (t * t * max(channels, out.shape[1]) * per_row)))
    band = max(band, min(rows, -(-_MIN_COLUMNS[m] // per_row)))
    padded = _padded(x, pads, (rows * m + 2, cols * m + 2), allocate)
    sn, sc, sh, sw = padded.strides
    # [i, j, c, n, tile row, tile column]
    tiles = np.lib.stride_tricks.as_strided(
        padded,
        (t, t, channels, batch, rows, cols),
        (sh, sw, sc, sn, m * sh, m * sw),
        writeable=False,
    )
    bt, _, at = (np.array(a, dtype=np.float32) for a in _TRANSFORMS[m])
    u = prepared.transformed
    filters = u.shape[1]
    # Blocks go straight into `out` when they tile it exactly and it is one C-contiguous array
    # (a Concat's slice, for one, is not: reshaping it would copy).
    aligned = out_h == rows * m and out_w == cols * m and out.flags.c_contiguous
    # Output positions as [n, m, tile row, block row, tile column, block column].
    blocks = out.reshape(batch, filters, rows, m, cols, m) if aligned else None
    columns_max = band * per_row
    gathered = allocate((t * t * channels * columns_max,), np.float32)
    halfway = allocate((t * t * channels * columns_max,), np.float32)
    spectrum = allocate((t * t * filters * columns_max,), np.float32)
    stage = allocate((m * t * filters * columns_max,), np.float32)
    final = allocate((m * m * filters * columns_max,), np.float32)
    staged = None if aligned else allocate((batch, filters, band * m, cols * m), np.float32)
    for start in range(0, rows, band):
        stop = min(start + band, rows)
        n_cols = (stop - start) * per_row
        d = gathered[: t * t * channels * n_cols]
        d.reshape(t, t, channels, batch, stop - start, cols)[...] = tiles[:, :, :, :, start:stop]
        half = halfway[: d.size]
        matmul(bt, d.reshape(t, -1), half.reshape(t, -1))  # Bᵀ along the tile's rows
        v = gathered[: d.size]
        matmul(bt, half.reshape(t, t, -1), v.reshape(t, t, -1))  # then along its columns
        y = spectrum[: t * t * filters * n_cols].reshape(t * t, filters, n_cols)
        matmul(u, v.reshape(t * t, channels, n_cols), y)
        z = stage[: m * t * filters * n_cols]
        matmul(at, y.reshape(t, -1), z.reshape(m, -1))
        # Aᵀ along the columns last, block column innermost: the copy into the output then
        # moves whole rows of blocks.
        result = final[: m * m * filters * n_cols].reshape(m, -1, m)
        for row in range(m):
            matmul(z.reshape(m, t, -1)[row].T, at.T, result[row])
        if bias is not None:  # while the band's blocks are in cache, before they move
            np.add(
                result.reshape(m, filters, -1), bias[:, None], out=result.reshape(m, filters, -1)
            )
        ordered = result.reshape(m, filters, batch, stop - start, cols, m).transpose(
            2, 1, 3, 0, 4, 5
        )
        if blocks is not None:
            blocks[:, :, start:stop] = ordered
        else:
            first, last = start * m, min(stop * m, out_h)
            target = staged[:, :, : (stop - start) * m]
            target.reshape(batch, filters, stop - start, m, cols, m)[...] = ordered
            out[:, :, first:last] = target[:, :, : last - first, :out_w]


def _padded(
    x: np.ndarray, pads: tuple[int, ...], extent: tuple[int, int], allocate: Scratch
) -> np.ndarray:
    """x placed at `pads` in zeros of spatial `extent` (the whole tile grid)."""
    batch, channels, height, width = x.shape
    padded = allocate((batch, channels, *extent), x.dtype)
    top, left = pads
    kept_h, kept_w = min(height, extent[0] - top), min(width, extent[1] - left)
    padded[:, :, :top] = 0
    padded[:, :, top + kept_h :] = 0
    padded[:, :, top : top + kept_h, :left] = 0
    padded[:, :, top : top + kept_h, left + kept_w :] = 0
    padded[:, :, top : top + kept_h, left : left + kept_w] = x[:, :, :kept_h, :kept_w]
    return padded
