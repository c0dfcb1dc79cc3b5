"""Standardizing a few short rows (a small LayerNormalization) in eight or nine whole-array
calls.

For [14, 64] float32 the blocked kernel (normalization.Standardization._standardize_rows:
pairwise row sums, a batch of row dot products, broadcasts with one row's ufunc buffer) took
about 20 us, most of it per-call cost. Here the rows of the smallest arrays are centered by
one product with the centering matrix I − 1/n (no mean, no broadcast subtraction; the
product costs rows·n² multiply-adds, at most `CENTER_BY_PRODUCT`), the others by their
means (one matrix-vector product) and one broadcast subtraction; the variance is one
matrix-vector product of the squares, and scale and bias (constants tiled to the rows once
by `bind`, or broadcast: the same bits) need no broadcasting loop: [14, 64] about 5 us,
[4, 256] 13.5 -> 6.4 us, [16, 1024] 25 -> 16 us (AMD EPYC, one thread). Arrays over
`SMALL_ROWS_MAX` elements keep the blocked kernel, whose per-call costs no longer dominate.
`SmallRootMeanSquare` is the RMS form (RMSNormalization, SimplifiedLayerNormalization): the
blocked kernel's calls without its blocks, context and broadcast checks, held work arrays and
a tiled scale: the same bits, [4, 256] 8.1 -> 4.7 us.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.broadcasting import ufunc_into

# At most this many elements run here; the rows are centered by a product where it costs at
# most CENTER_BY_PRODUCT multiply-adds (rows·n²): [14, 64] 5.4 against 6.4 us by the means,
# [32, 32] 7.3 against 9.2, but [64, 128] 19 against 10 (AMD EPYC, one thread).
SMALL_ROWS_MAX = 1 << 14
CENTER_BY_PRODUCT = 1 << 17


def fits_small_rows(rows: int, cols: int) -> bool:
    """Whether a float32 standardization of (rows, cols) runs here."""
    return cols > 0 and 0 < rows * cols <= SMALL_ROWS_MAX


class SmallRows:
    """out = (x − mean) / √(var + ε) · scale + bias over the rows of (rows, cols) float32
    arrays of the namespace `xp`, with this instance's work arrays (one instance per run
    state or per call: never shared by concurrent runs). `scale` and `bias` broadcast to
    (rows, cols); either may be None."""

    def __init__(
        self, xp: Any, rows: int, cols: int, epsilon: float, scale: Any | None, bias: Any | None
    ) -> None:
        f = np.float32
        self.xp = xp
        self.center = None
        if rows * cols * cols <= CENTER_BY_PRODUCT:  # made on the host, copied once
            self.center = xp.asarray(np.eye(cols, dtype=f) - f(1.0 / cols))
        self.weights = xp.full((cols, 1), 1.0 / cols, dtype=f)
        self.squares = xp.empty((rows, cols), dtype=f)
        self.deviation = xp.empty((rows, 1), dtype=f)
        self.epsilon = f(epsilon)
        self.scale, self.bias = scale, bias

    def __call__(self, x: Any, out: Any) -> None:
        """x and out (rows, cols) float32, out C-contiguous; NumPy's errors ignored already."""
        xp, deviation, squares = self.xp, self.deviation, self.squares
        if self.center is None:
            xp.dot(x, self.weights, out=deviation)  # the means, for now
            ufunc_into(xp, xp.subtract, x, deviation, out=out)
        else:
            xp.dot(x, self.center, out=out)
        xp.multiply(out, out, squares)
        xp.dot(squares, self.weights, out=deviation)
        xp.add(deviation, self.epsilon, deviation)
        xp.sqrt(deviation, deviation)
        xp.divide(out, deviation, out)
        if self.scale is not None:
            xp.multiply(out, self.scale, out)
        if self.bias is not None:
            xp.add(out, self.bias, out)


class SmallRootMeanSquare:
    """out = x · 1/√(mean(x²) + ε) · scale over the rows of (rows, cols) float32 arrays, in
    normalization.root_mean_square_rows' operations (its bits), with this instance's work
    array (one per run state or per call); `scale` is tiled to (rows, cols)."""

    def __init__(self, xp: Any, rows: int, epsilon: float, scale: Any) -> None:
        f = np.float32
        self.xp = xp
        self.factor = xp.empty((rows, 1, 1), dtype=f)
        self.inverse_count = f(1.0 / scale.shape[1])
        self.epsilon = f(epsilon)
        self.scale = scale

    def __call__(self, x: Any, out: Any) -> None:
        """x and out (rows, cols) float32, out C-contiguous; NumPy's errors ignored already."""
        xp = self.xp
        xp.matmul(x[:, None, :], x[:, :, None], self.factor)
        factor = self.factor.reshape(-1, 1)
        xp.multiply(factor, self.inverse_count, factor)
        xp.add(factor, self.epsilon, factor)
        xp.sqrt(factor, factor)
        xp.reciprocal(factor, factor)
        xp.multiply(x, factor, out)
        xp.multiply(out, self.scale, out)
