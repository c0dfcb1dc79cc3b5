"""Standardizing a few short rows (a small LayerNormalization) in eight whole-array calls.

For [14, 64] float32 the blocked kernel (normalization.Standardization._standardize_rows:
pairwise row sums, a batch of row dot products, broadcasts with one row's ufunc buffer) took
about 20 us, most of it per-call cost. Here the rows are centered by one product with the
centering matrix I − 1/n (no mean, no broadcast subtraction), the variance is one
matrix-vector product of the squares, and scale and bias (constants tiled to the rows once by
`bind`, or broadcast: the same bits) need no broadcasting loop: eight calls, about 5 us
(AMD EPYC, one thread). The product costs rows·n² multiply-adds, so only short rows of small
arrays come here (`fits_small_rows`); the blocked kernel stays for the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# At most this many elements and this long a row: the centering product then costs at most
# 2**14·128 multiply-adds, under the calls it replaces (measured at [14, 64] and [64, 128]).
SMALL_ROWS_MAX = 1 << 14
SMALL_ROW_MAX = 128


def fits_small_rows(rows: int, cols: int) -> bool:
    """Whether a float32 standardization of (rows, cols) runs here."""
    return 0 < cols <= SMALL_ROW_MAX and 0 < rows * cols <= SMALL_ROWS_MAX


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
        center = np.eye(cols, dtype=f) - f(1.0 / cols)  # made on the host, copied once
        self.center = xp.asarray(center)
        self.weights = xp.full((cols, 1), 1.0 / cols, dtype=f)
        self.squares = xp.empty((rows, cols), dtype=f)
        self.deviation = xp.empty((rows, 1), dtype=f)
        self.epsilon = f(epsilon)
        self.scale, self.bias = scale, bias

    def __call__(self, x: Any, out: Any) -> None:
        """x and out (rows, cols) float32, out C-contiguous; NumPy's errors ignored already."""
        xp, deviation, squares = self.xp, self.deviation, self.squares
        xp.dot(x, self.center, out=out)
        xp.multiply(out, out, out=squares)
        xp.dot(squares, self.weights, out=deviation)
        xp.add(deviation, self.epsilon, out=deviation)
        xp.sqrt(deviation, out=deviation)
        xp.divide(out, deviation, out=out)
        if self.scale is not None:
            xp.multiply(out, self.scale, out=out)
        if self.bias is not None:
            xp.add(out, self.bias, out=out)
