"""A depthwise 1×1 convolution: every channel's plane (its every s-th pixel at a stride) times
its one weight, plus its bias.

MobileOne's and FastViT's unfused branches (the `conv_scale` beside a k×k one), exported
before re-parameterization, hold such filters. Through the shared im2col each channel was one
GEMM of one row (48 channels at 128×128: 1.35 ms against onnxruntime's 0.58, AMD EPYC, one
thread); here it is one multiply and one add over the planes, each a long run per channel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class ChannelScale:
    """out (N, C, Ho, Wo) = x[..., ::sh, ::sw] · w_c + b_c for taps (C, 1), no pads. Call it
    as (x, out, bias or None); it returns True (any layout of x and out: NumPy broadcasts)."""

    def __init__(self, x_shape: Sequence[int], taps: np.ndarray, strides: Sequence[int]) -> None:
        self.scale = taps.reshape(-1, 1)
        self.planes = (x_shape[0], x_shape[1], -1)
        self.every = (Ellipsis, *(slice(None, None, s) for s in strides))

    def __call__(self, x: np.ndarray, out: np.ndarray, bias: np.ndarray | None) -> bool:
        x = x[self.every]
        if x.flags.c_contiguous and out.flags.c_contiguous:  # one run per channel
            x, out = x.reshape(self.planes), out.reshape(self.planes)
            scale = self.scale
        else:
            scale = self.scale[:, :, None]
        np.multiply(x, scale, out=out)
        if bias is not None:
            np.add(out, bias.reshape(scale.shape), out=out)
        return True
