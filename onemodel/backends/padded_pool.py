"""2-D max and sum pooling over a held padded copy of the input: strided views of one buffer.

The shared kernels (array_kernels.ArrayKernels.max_pool_arrays and sum_pool_arrays) place
windows, split the image into phases and allocate per call, a dozen small decisions and
temporaries that cost 40-50 us at [1, 4, 16, 16] (AMD EPYC, one thread) where the data needs a
few microseconds. Here an instance made once per shape (by `bind`, for one run state) holds
the input padded with the pooling's neutral value (−inf or the lowest integer for max, −0 for
sums: x + −0 = x for every x) where only the interior is rewritten in a run, and every tap is
a strided view of it fixed in advance. Max pools the columns, then the rows (the first NaN in
row-major window order still wins: maximum returns its first operand's NaN); sums follow
onnxruntime's order for the node's opset: rows then columns (one axis at a time), or one
tap after another in row-major order. Ceil mode, dilations and pads only move the views.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onemodel.backends.fp_errors import buffered_run_state

# Inputs up to this many elements pool here; beyond, the interior copy and the strided
# passes over it cost more than the shared kernels' phases (at [1, 32, 56, 56] 96 against 131
# us for max, at [1, 64, 64, 64] 271 against 237).
PADDED_POOL_MAX = 1 << 17
# NumPy's ufunc buffer for the taps (strided views, which its iterator copies through
# buffers): 1024 elements rather than 8192 allocate 12 KiB instead of 64 per call, and
# measure no slower (numpy_cpu/ufunc_buffers.py has the same finding for convolutions).
POOL_BUFFER = 1024


class PaddedPool:
    """Max (`maximum`) or sum pooling of (N, C, H, W) arrays of one shape and type into
    (N, C, out_h, out_w), with this instance's work arrays (one per run state, or per call).
    `divisor` (broadcasting to the output) divides sums as AveragePool does.

    The padded input is held split into its column phases (columns by residue modulo the
    column stride, each phase flat: rows × phase columns and the last taps' reach): a column
    tap then reads contiguous values instead of every stride-th one (a strided NumPy loop, 75
    against 20 us a pass at [1, 64, 64, 64]), for max one flat run per plane whose slack
    columns the row pass never reads; the split costs one strided copy per phase, of what
    the run copies in anyway."""

    def __init__(
        self,
        xp: Any,
        x_shape: Sequence[int],
        out_hw: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        dtype: Any,
        maximum: bool,
        row_major: bool = False,
        divisor: Any | None = None,
    ) -> None:
        n, c, height, width = x_shape
        (oh, ow), (kh, kw), (sh, sw), (top, left), (dh, dw) = (
            out_hw,
            kernel,
            strides,
            pads,
            dilations,
        )
        rows, cols = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
        phase_cols = (kw - 1) * dw // sw + ow
        dtype = np.dtype(dtype)
        if not maximum:
            fill = -0.0
        elif dtype.kind == "f":
            fill = -np.inf
        else:
            fill = np.iinfo(dtype).min
        self.xp = xp
        # per phase a flat run of `rows` grid rows and the reach of the last column taps
        span = rows * phase_cols
        reach = (kw - 1) * dw // sw
        flat = xp.full((n, c, sw, span + reach), fill, dtype=dtype)
        grid = flat[..., :span].reshape(n, c, sw, rows, phase_cols)
        kept_h, kept_w = min(height, rows - top), min(width, cols - left)
        # per phase: (its interior in the grid, the input columns that go there)
        self.copies = []
        for phase in range(sw):
            first = (phase - left) % sw
            count = len(range(first, kept_w, sw))
            if count:
                column = (first + left) // sw
                self.copies.append((
                    grid[:, :, phase, top : top + kept_h, column : column + count],
                    (slice(None), slice(None), slice(0, kept_h),
                     slice(first, first + (count - 1) * sw + 1, sw)),
                ))  # fmt: skip
        self.combine = xp.maximum if maximum else xp.add
        self.divisor = divisor
        every = slice(None)
        row_taps = [slice(k * dh, k * dh + (oh - 1) * sh + 1, sh) for k in range(kh)]
        col_taps = [divmod(k * dw, sw) for k in range(kw)]  # (phase column, phase)

        def columns(array: Any, rows: Any) -> list[Any]:
            return [array[:, :, phase, rows, q : q + ow] for q, phase in col_taps]

        self.first: list[Any] = []
        self.first_into = None
        if row_major and not maximum:  # onnxruntime's row-major loop: each tap in turn
            self.second = [tap for r in row_taps for tap in columns(grid, r)]
        elif maximum:  # the columns first, each tap one flat run of a phase (with slack)
            if kw > 1:
                self.first = [flat[:, :, phase, q : q + span] for q, phase in col_taps]
                self.first_into = xp.empty((n, c, span), dtype=dtype)
                middle = self.first_into.reshape(n, c, rows, phase_cols)[..., :ow]
            else:
                middle = grid[:, :, 0, :, :ow]
            self.second = [middle[:, :, r] for r in row_taps]
        else:  # sums: the rows first
            self.first = [grid[:, :, :, r] for r in row_taps]
            if kh > 1:
                self.first_into = xp.empty((n, c, sw, oh, phase_cols), dtype=dtype)
                middle = self.first_into
            else:
                middle, self.first = self.first[0], []
            self.second = columns(middle, every)

    def __call__(self, x: Any, out: Any) -> None:
        """out (N, C, out_h, out_w) = the pooling of x; NumPy's errors ignored already."""
        xp = self.xp
        for target, source in self.copies:
            xp.copyto(target, x[source])
        state = buffered_run_state(POOL_BUFFER) if xp is np else None
        if state is None:
            self._combine(out)
            return
        token = state[0].set(state[1])
        try:
            self._combine(out)
        finally:
            state[0].reset(token)

    def _combine(self, out: Any) -> None:
        xp, combine = self.xp, self.combine
        first = self.first
        if first:
            target = self.first_into
            combine(first[0], first[1], out=target)
            for tap in first[2:]:
                combine(target, tap, out=target)
        second = self.second
        if len(second) == 1:
            xp.copyto(out, second[0])
        else:
            combine(second[0], second[1], out=out)
            for tap in second[2:]:
                combine(out, tap, out=out)
        if self.divisor is not None:
            xp.divide(out, self.divisor, out=out)
