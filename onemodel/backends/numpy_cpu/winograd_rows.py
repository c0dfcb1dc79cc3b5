"""Winograd convolution F(m, r) along one axis, for stride-1 1-D convolutions (fast mode, NumPy).

A 1-D convolution with an r-tap filter computes each run of m outputs from m + r − 1 = 8
inputs: Toom-Cook's minimal filtering turns the run into 8 element-wise products in a
transformed space (V = Bᵀ d per tile of inputs, U = G g per filter, once per plan, y = Aᵀ (U ⊙
V)), and summed over input channels the products become 8 GEMMs (M, C) × (C, tiles): F(6, 3)
does 8 multiplications per 6 outputs against the direct 18, F(4, 5) 8 per 4 against 20, F(2, 7)
8 per 2 against 14. The Keras text CNN's 257 → 128 by 7 over 2048 positions took 9.1 ms as
im2col and takes 6.3 as F(2, 7) (AMD EPYC, 1 thread).

The transforms come from the interpolation points 0, ±1, ±2, ±1/2 and ∞: Aᵀ and G are their
Vandermonde rows, and Bᵀ is solved from them in exact rational arithmetic (`toom_cook`), so
the only rounding is float32's. Error (float32, unit-scale data): within about 4e-6 of the
largest output, relative (tests/test_winograd_rows.py states the bound it checks). Exact mode
never comes here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from onemodel.backends.array_types import Scratch

_POINTS = (0, 1, -1, 2, -2, Fraction(1, 2), Fraction(-1, 2))  # then ∞
TILE = len(_POINTS) + 1  # inputs per tile: m + r − 1
KERNELS = (3, 5, 7)  # filter lengths taken; m = TILE − r + 1
# Input and output channels from which it measured faster than im2col (1 thread, time /
# im2col): 64 → 64 by 3 over 256 1.04, 128 → 128 by 3 over 227 0.80, 80 → 256 by 3 over 1000
# 0.77, 128 → 128 by 7 over 682 0.84, 256 → 256 by 5 over 500 0.55.
_MIN_CHANNELS = 80
# Per image, the fewest tiles (GEMM columns) and multiply-adds of the direct sum (C·M·Lo) it
# takes: below them the transforms cost more than they save (80 → 80 by 3 over 200: 34 tiles,
# 1.3M, 1.04× im2col; 8 images of 80 → 80 by 3 over 64: 11 tiles each, 1.13×; 128 → 128 by 3
# over 227: 38 tiles, 3.7M, 0.82×).
_MIN_TILES = 32
_MIN_PRODUCTS = 1 << 21
_BAND_TILES = 256  # tiles per band: the band's transformed tiles stay in cache


@dataclass(frozen=True)
class RowWinogradFilter:
    """U = G g (TILE, M, C) of W (M, C, r) in float32, for F(block, r)."""

    block: int
    transformed: np.ndarray

    def for_output(
        self, batch: int, out_spatial: tuple[int, ...], dilations: tuple[int, ...]
    ) -> RowWinogradFilter | None:
        """Itself where it takes these outputs (`row_winograd_fits`), else None: the direct
        path (the same question `WinogradFilters.for_output` answers for 2-D filters)."""
        return self if row_winograd_fits(self, out_spatial[0], dilations) else None

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
        """`row_winograd_conv` with the leading pad (its products are its own GEMMs)."""
        row_winograd_conv(x, self, out, pads[0], allocate, bias)


def row_winograd_filter(w: np.ndarray, group: int) -> RowWinogradFilter | None:
    """The transformed filter of a float32 1-D W (M, C, r) worth a Winograd path, else None."""
    if (
        w.dtype != np.float32
        or group != 1
        or w.ndim != 3
        or w.shape[2] not in KERNELS
        or min(w.shape[:2]) < _MIN_CHANNELS
    ):
        return None
    block = TILE - w.shape[2] + 1
    _, g, _ = _transforms(block, w.shape[2])
    u = np.einsum("jk,mck->jmc", g, w.astype(np.float64))
    return RowWinogradFilter(block, np.ascontiguousarray(u, dtype=np.float32))


def row_winograd_fits(
    prepared: RowWinogradFilter, out_length: int, dilations: tuple[int, ...]
) -> bool:
    """Whether Winograd takes undilated outputs of `out_length`: enough tiles and work."""
    _, filters, channels = prepared.transformed.shape
    return (
        tuple(dilations) == (1,)
        and -(-out_length // prepared.block) >= _MIN_TILES
        and filters * channels * out_length >= _MIN_PRODUCTS
    )


def row_winograd_conv(
    x: np.ndarray,
    prepared: RowWinogradFilter,
    out: np.ndarray,
    pad: int,
    allocate: Scratch,
    bias: np.ndarray | None = None,
) -> None:
    """out (N, M, Lo) = the stride-1 undilated 1-D convolution of float32 x (N, C, L) with
    `pad` leading zeros (and as many trailing as out needs), plus `bias` (M,) when given: bands
    of tiles, each gathered, transformed, multiplied and transformed back while in cache."""
    m = prepared.block
    u = prepared.transformed
    bt, _, at = (a.astype(np.float32) for a in _transforms(m, TILE - m + 1))
    batch, channels, length = x.shape
    filters, out_length = out.shape[1:]
    tiles = -(-out_length // m)
    padded = allocate((batch, channels, tiles * m + TILE - m), np.float32)
    kept = min(length, padded.shape[2] - pad)
    padded[:, :, :pad] = 0
    padded[:, :, pad + kept :] = 0
    padded[:, :, pad : pad + kept] = x[:, :, :kept]
    sn, sc, sl = padded.strides
    # [j, c, n, tile]: input j of every tile
    grid = np.lib.stride_tricks.as_strided(
        padded, (TILE, channels, batch, tiles), (sl, sc, sn, m * sl), writeable=False
    )
    images = 1 if tiles >= _BAND_TILES else max(1, min(batch, _BAND_TILES // tiles))
    span = min(tiles, _BAND_TILES)
    gathered = allocate((TILE * channels * images * span,), np.float32)
    spectrum = allocate((TILE * channels * images * span,), np.float32)
    products = allocate((TILE * filters * images * span,), np.float32)
    rows = allocate((filters * images * span * m,), np.float32)
    for first in range(0, batch, images):
        count = min(images, batch - first)
        for start in range(0, tiles, span):
            stop = min(start + span, tiles)
            width = count * (stop - start)  # GEMM columns
            d = gathered[: TILE * channels * width].reshape(TILE, channels, count, stop - start)
            d[...] = grid[:, :, first : first + count, start:stop]
            v = spectrum[: d.size].reshape(TILE, channels, width)
            np.matmul(bt, d.reshape(TILE, -1), out=v.reshape(TILE, -1))
            y = products[: TILE * filters * width].reshape(TILE, filters, width)
            np.matmul(u, v, out=y)
            # Aᵀ from the right of yᵀ: each (filter, image, tile)'s m outputs side by side.
            z = rows[: filters * width * m].reshape(filters * width, m)
            np.matmul(y.reshape(TILE, -1).T, at.T, out=z)
            lo, hi = start * m, min(stop * m, out_length)
            result = z.reshape(filters, count, (stop - start) * m)[..., : hi - lo]
            target = out[first : first + count, :, lo:hi].transpose(1, 0, 2)
            if bias is None:
                target[...] = result
            else:
                np.add(result, bias[:, None, None], out=target)


@functools.cache
def _transforms(block: int, kernel: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Bᵀ, G, Aᵀ) of F(block, kernel) over `_POINTS` in float64 (see `toom_cook`)."""
    bt, g, at = toom_cook(block, kernel, _POINTS)
    return tuple(np.array([[float(v) for v in row] for row in a]) for a in (bt, g, at))


def toom_cook(
    block: int, kernel: int, points: tuple[int | Fraction, ...]
) -> tuple[list[list[Fraction]], list[list[Fraction]], list[list[Fraction]]]:
    """(Bᵀ, G, Aᵀ) with y = Aᵀ ((G g) ⊙ (Bᵀ d)) the correlation y_i = Σ_k d_(i+k) g_k, exact:
    Aᵀ's column j and G's row j are the powers of point j (of ∞: the last power alone), and Bᵀ
    solves the conditions Σ_j Aᵀ_ij G_jk Bᵀ_js = [s = i + k]: for every s, a consistent system
    of block · kernel equations in `len(points) + 1` unknowns, solved by elimination on its
    normal equations and checked."""
    n = block + kernel - 1
    if len(points) != n - 1:
        raise ValueError(f"F({block}, {kernel}) needs {n - 1} finite points")
    a = [Fraction(p) for p in points]
    at = [[p**i for p in a] + [Fraction(int(i == block - 1))] for i in range(block)]
    g = [[p**k for k in range(kernel)] for p in a]
    g.append([Fraction(int(k == kernel - 1)) for k in range(kernel)])
    conditions = [
        [at[i][j] * g[j][k] for j in range(n)] for i in range(block) for k in range(kernel)
    ]
    normal = [[sum(row[p] * row[q] for row in conditions) for q in range(n)] for p in range(n)]
    bt_columns = []
    for s in range(n):
        wanted = [Fraction(int(s == i + k)) for i in range(block) for k in range(kernel)]
        moments = [
            sum(row[p] * e for row, e in zip(conditions, wanted, strict=True)) for p in range(n)
        ]
        column = _solve(normal, moments)
        products = [sum(row[j] * column[j] for j in range(n)) for row in conditions]
        if products != wanted:
            raise ValueError(f"no F({block}, {kernel}) over {points}")
        bt_columns.append(column)
    bt = [[bt_columns[s][j] for s in range(n)] for j in range(n)]
    return bt, g, at


def _solve(matrix: list[list[Fraction]], rhs: list[Fraction]) -> list[Fraction]:
    """x with matrix · x = rhs, by Gauss-Jordan elimination over the rationals."""
    n = len(rhs)
    rows = [[*row, value] for row, value in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[col], strict=True)]
    return [rows[r][n] / rows[r][r] for r in range(n)]
