"""Attention with nothing to mask (no mask, cache, window or causal frontier, no softcap, one
query head per key/value head), float32: a dozen calls into held work arrays.

The general path (graph/operators/attention.py, `AttentionOp._attend`) builds its scores
through grouped 5-D views, new temporaries and boolean fix-ups of the softmax (a row of −inf
gives zeros): about 45 us for [2, 4, 7, 16] (AMD EPYC, one thread) where the arithmetic is a
few microseconds. Here K is scaled straight into its transpose (BLAS then reads contiguous
operands), the row totals are one matrix-vector product (a sum over rows of 7 scores costs
3 us in NumPy's reduction loop, the product 0.5), and the fix-ups are `maximum`s with the same
effect: a peak of −inf becomes −FLT_MAX (the row's exp is still all zeros), and a total of 0
becomes 1 (every other total is at least 1, from exp(0) at the peak). Written against the
namespace `xp`, so every backend computes the same calls; the row maximum is exact whichever
way it is taken, so NumPy's is its ufunc's reduce (1.5 us less than `np.max`'s wrapper).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onemodel.backends.broadcasting import ufunc_into

_LOWEST = np.float32(np.finfo(np.float32).min)
_ONE = np.float32(1)


class PlainAttention:
    """softmax(q·√s · (k·√s)ᵀ) · v for (B, H, S, D) float32 q, k, v of fixed shapes, with
    this instance's work arrays (one instance per run state, or per call)."""

    def __init__(
        self, xp: Any, q_shape: tuple[int, ...], k_shape: tuple[int, ...], root: float
    ) -> None:
        f = np.float32
        batch, heads, queries, _ = q_shape
        keys, depth = k_shape[2:]
        self.xp = xp
        self.root = f(root)
        self.q = xp.empty(q_shape, dtype=f)
        self.k_t = xp.empty((batch, heads, depth, keys), dtype=f)
        self.scores = xp.empty((batch, heads, queries, keys), dtype=f)
        self.rows = self.scores.reshape(-1, keys)
        self.ones = xp.ones((keys, 1), dtype=f)
        self.peak = xp.empty((self.rows.shape[0], 1), dtype=f)
        self.total = xp.empty_like(self.peak)
        self.row_max = np.maximum.reduce if xp is np else xp.max

    def __call__(self, q: Any, k: Any, v: Any, out: Any) -> None:
        """out (B, H, S, Dv) C-contiguous; NumPy's errors ignored already."""
        xp, scores, rows, peak, total = self.xp, self.scores, self.rows, self.peak, self.total
        xp.multiply(q, self.root, self.q)
        xp.multiply(k.swapaxes(-1, -2), self.root, self.k_t)
        xp.matmul(self.q, self.k_t, scores)
        self.row_max(rows, axis=1, keepdims=True, out=peak)
        xp.maximum(peak, _LOWEST, out=peak)
        ufunc_into(xp, xp.subtract, rows, peak, out=rows)
        xp.exp(rows, rows)
        xp.dot(rows, self.ones, out=total)
        xp.maximum(total, _ONE, out=total)
        ufunc_into(xp, xp.divide, rows, total, out=rows)
        xp.matmul(scores, v, out)
