"""A 1×1 convolution (unit strides, no pads) whose input or output is held channels last.

Per image, a planar x is the (C, P) matrix of its planes and a channels-last one the (P, C)
matrix of its pixels; the same holds for out with M channels. Each of the four pairs is one
GEMM of contiguous matrices or their transposes, which BLAS reads as they lie: out (M, P) =
W · x (C, P) or W · (P, C)ᵀ, out (P, M) = (C, P)ᵀ · Wᵀ or (P, C) · Wᵀ. (24 → 144 channels at
56×56, AMD EPYC, one thread: all four 0.24–0.29 ms; Wᵀ is held C-contiguous, which BLAS
reads faster: 320 → 1280 at 7×7 0.49 ms against 0.67 as W's transposed view.) So the values
on either side of a depthwise convolution change layout for nothing (graph/layouts.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from onemodel.backends.numpy_cpu.channel_bias import LastAxisBias


class PointwiseConv:
    """out = W ⋆ x + bias for a 1×1 kernel, x or out channels last as the flags say. Call it
    as (x, out, bias or None); it returns False, having written nothing, where an array is
    not laid out as its flag says."""

    def __init__(
        self,
        x_shape: Sequence[int],
        matrix: np.ndarray,
        out_shape: Sequence[int],
        x_channels_last: bool,
        out_channels_last: bool,
    ) -> None:
        self.matrix = matrix.reshape(out_shape[1], x_shape[1])
        self.transposed = np.ascontiguousarray(self.matrix.T)  # BLAS reads it faster so
        self.pixels = math.prod(x_shape[2:])
        self.x_channels_last = x_channels_last
        self.out_channels_last = out_channels_last
        self.bias = LastAxisBias(self.pixels, out_shape[1])

    def _matrix(self, array: np.ndarray, channels_last: bool) -> np.ndarray | None:
        """One image's (C, P) matrix, or (P, C) channels last; None if it is not one array."""
        if channels_last:
            array = array.transpose(1, 2, 0)
            shape = (self.pixels, -1)
        else:
            shape = (-1, self.pixels)
        return array.reshape(shape) if array.flags.c_contiguous else None

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        images = [
            (self._matrix(x[n], self.x_channels_last), self._matrix(out[n], self.out_channels_last))
            for n in range(x.shape[0])
        ]
        if any(source is None or target is None for source, target in images):
            return False
        for source, target in images:
            if self.x_channels_last:
                source = source.T  # (C, P)
            if self.out_channels_last:
                np.dot(source.T, self.transposed, out=target)
                if bias is not None:
                    self.bias(target, bias)
            else:
                np.dot(self.matrix, source, out=target)
                if bias is not None:
                    np.add(target, bias[:, None], out=target)
        return True
