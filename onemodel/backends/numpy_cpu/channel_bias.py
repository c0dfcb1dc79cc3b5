"""A per-channel bias added to values channels last, as long runs.

Channels last, a bias (M,) broadcast over (P, M) rows is one short inner loop per pixel:
16 channels at 112×112 took 0.107 ms against 0.022 planar, where each channel's plane is
one run (AMD EPYC, one thread). The same sum over (P/k, k·M) rows with the bias tiled k
times has runs of up to `_RUN` values again.
"""

from __future__ import annotations

import numpy as np

_RUN = 4096  # values per run of the tiled bias, at most


class LastAxisBias:
    """Adds a bias (M,) to a C-contiguous array of P·M values, channels last."""

    def __init__(self, pixels: int, channels: int) -> None:
        copies = max(1, _RUN // max(channels, 1))
        while pixels % copies:
            copies -= 1
        self.copies = copies
        self.run = copies * channels
        self._bias: np.ndarray | None = None
        self._tiled: np.ndarray | None = None

    def __call__(self, values: np.ndarray, bias: np.ndarray) -> None:
        if bias is not self._bias:  # a plan's bias is one constant array, run after run
            self._tiled = np.tile(bias, self.copies)
            self._bias = bias
        rows = values.reshape(-1, self.run)
        np.add(rows, self._tiled, out=rows)
