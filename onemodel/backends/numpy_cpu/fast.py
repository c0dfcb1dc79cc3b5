"""The NumPy fast backend: the shared array kernels over host memory, BLAS threads per run."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from onemodel.backends.array_kernels import ArrayKernels
from onemodel.backends.array_types import Scratch, stacked_rows
from onemodel.backends.convolution import conv_geometry
from onemodel.backends.fp_errors import quiet
from onemodel.backends.numpy_cpu.compiled_activations import run_compiled
from onemodel.backends.numpy_cpu.compiled_casts import compiled_cast
from onemodel.backends.numpy_cpu.compiled_exponentials import compiled_softmax
from onemodel.backends.numpy_cpu.compiled_recurrent import (
    compiled_gru_steps,
    compiled_lstm_steps,
    compiles,
)
from onemodel.backends.numpy_cpu.depthwise import grouped_conv, held_grouped, takes_grouped
from onemodel.backends.numpy_cpu.held_conv import held_conv
from onemodel.backends.numpy_cpu.movement import take_checked, transpose_copy
from onemodel.backends.numpy_cpu.pair_pool import PairMaxPool, PairSumPool, pair_pool_fits
from onemodel.backends.numpy_cpu.plane_blocks import Reused, plane_blocks
from onemodel.backends.numpy_cpu.pointwise_conv import PointwiseConv
from onemodel.backends.numpy_cpu.threads import BLAS_THREADS
from onemodel.backends.numpy_cpu.tiled_pool import TiledMaxPool, tiled_pool_fits
from onemodel.backends.numpy_cpu.ufunc_buffers import small_buffers
from onemodel.backends.numpy_cpu.winograd import WinogradFilter, WinogradFilters, winograd_filter
from onemodel.backends.numpy_cpu.winograd_rows import RowWinogradFilter, row_winograd_filter
from onemodel.backends.pixel_doubling import double_last_axes_host
from onemodel.tensors import HOST

_GROUPED_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_BLAS_TYPES = _GROUPED_TYPES
# Output pixels from which `_shifted_conv` beats the held im2col (64 -> 16 channels, 3x3,
# 1 thread: shifted 0.06 against held 0.03 ms at 10x10, 0.10 against 0.10 at 20x20, 0.26
# against 0.31 at 40x40).
_SHIFTED_FROM = 400


@dataclass(frozen=True)
class PreparedConv:
    """A constant W prepared once per plan: the matrix the direct paths multiply and, for a
    3×3 filter worth it, its Winograd transforms, for a 1-D one its row Winograd transform
    (None otherwise). `copies` > 1: W is its
    first filter `copies` times over (weights made by ConstantOfShape), and both describe
    that one filter."""

    matrix: Any
    winograd: WinogradFilters | RowWinogradFilter | None
    copies: int = 1


class NumpyKernels(ArrayKernels):
    """Whatever NumPy does fastest (BLAS matmul, SIMD ufuncs). Bits may vary across machines
    and BLAS thread counts (OpenBLAS picks other GEMM kernels when threaded); exact mode is
    the one whose bits do not."""

    take_checks_bounds = True
    holds_channels_last = True

    def __init__(self) -> None:
        super().__init__(HOST, name="numpy")

    def use_threads(self, count: int) -> None:
        BLAS_THREADS.use(count)

    def compiled_activation(self, kernel: Any, x: Any, out: Any, parameters: tuple) -> bool:
        """numba's one-pass form (numpy_cpu/compiled_activations.py), where it has one."""
        return run_compiled(kernel, x, out, parameters)

    def compiled_cast(self, x: Any, out: Any) -> bool:
        """numba's float32 ↔ float16 (numpy_cpu/compiled_casts.py), where it applies."""
        return compiled_cast(x, out)

    def compiled_softmax(self, x: Any, out: Any, log: bool) -> bool:
        """numba's rows (numpy_cpu/compiled_exponentials.py), where they apply."""
        return compiled_softmax(x, out, log)

    @property
    def compiles_recurrent_loops(self) -> bool:
        """Where numba is installed (numpy_cpu/compiled_recurrent.py)."""
        return compiles()

    def compiled_lstm_steps(
        self, projected: Any, rt: Any, states: Any, c: Any, backward: bool
    ) -> bool:
        """numba's time loop (numpy_cpu/compiled_recurrent.py), where it applies."""
        return compiled_lstm_steps(projected, rt, states, c, backward)

    def compiled_gru_steps(
        self, projected: Any, rzr: Any, rn: Any, bias_n: Any, states: Any, backward: bool,
        before_reset: bool,
    ) -> bool:  # fmt: skip
        """numba's time loop (numpy_cpu/compiled_recurrent.py), where it applies."""
        return compiled_gru_steps(projected, rzr, rn, bias_n, states, backward, before_reset)

    def conv_weights(self, w: Any, group: int) -> Any:
        """The shared matrix, with the Winograd transform of a 3×3 filter that has one.

        A bank of identical filters is prepared as one filter: its output channels are then
        one computed channel copied, identical as the arithmetic says they are. A GEMM does
        not promise that: OpenBLAS 0.3.31 rounds rows 6–11 of every 12 of a product
        differently from rows 0–5 (measured with all-equal rows), and the ONNX suite's light
        SqueezeNet (every weight 0.02) needs its 1000 logits of about 1e10 bit-identical for
        a uniform softmax."""
        if group == 1 and w.shape[0] > 1 and bool((w == w[:1]).all()):
            one = self.conv_weights(w[:1], 1)
            matrix, transform = (
                (one.matrix, one.winograd) if isinstance(one, PreparedConv) else (one, None)
            )
            return PreparedConv(matrix, transform, copies=w.shape[0])
        matrix = super().conv_weights(w, group)
        transformed = winograd_filter(w, group) or row_winograd_filter(w, group)
        return matrix if transformed is None else PreparedConv(matrix, transformed)

    def held_pool(
        self,
        x_shape: Sequence[int],
        dtype: Any,
        out_spatial: Sequence[int],
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        divisor: Any | None = None,
    ) -> Callable[[Any, Any], None] | None:
        """Max pools whose windows tile the input by strided and contiguous maxima
        (numpy_cpu/tiled_pool.py); 3×3/2 float32 pools by column pairs (numpy_cpu/pair_pool.py)
        where they fit."""
        if divisor is None and tiled_pool_fits(x_shape, out_spatial, kernel, strides, dilations):
            return TiledMaxPool(x_shape, kernel)
        geometry = (kernel, strides, pads, dilations)
        if not pair_pool_fits(x_shape, out_spatial, *geometry, dtype):
            return None
        return PairMaxPool(x_shape) if divisor is None else PairSumPool(x_shape, divisor)

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
        allocate: Scratch | None = None,
        *,
        x_channels_last: bool = False,
        out_channels_last: bool = False,
    ) -> Any:
        """Im2col with held buffers (numpy_cpu/held_conv.py) for one group, where `_conv`
        would take im2col or a single GEMM: not a Winograd filter whose tiles fill its GEMMs,
        a bank of copied filters or `_shifted_conv`'s layers above `_SHIFTED_FROM` output
        pixels; for several groups, a depthwise filter's held form (numpy_cpu/depthwise.py).
        With x or out held channels last (graph/layouts.py), the forms that take them: a
        depthwise filter's channels-last taps, a 1×1 kernel's transposed GEMMs
        (numpy_cpu/pointwise_conv.py); None for any other."""
        layouts = {"x_channels_last": x_channels_last, "out_channels_last": out_channels_last}
        if group != 1:
            if np.dtype(dtype) not in _GROUPED_TYPES or getattr(weights, "dtype", None) != dtype:
                return None
            taps = weights.reshape(out_shape[1], -1)
            geometry = (kernel, strides, pads, dilations)
            return held_grouped(x_shape, taps, out_shape, *geometry, **layouts)
        if x_channels_last or out_channels_last:
            if isinstance(weights, PreparedConv) and weights.copies == 1:
                weights = weights.matrix
            pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in strides)
            same_planes = tuple(x_shape[2:]) == tuple(out_shape[2:])
            if not (pointwise and same_planes) or getattr(weights, "dtype", None) != dtype:
                return None
            return PointwiseConv(x_shape, weights, out_shape, **layouts)
        if isinstance(weights, PreparedConv):
            if weights.copies > 1 or (
                all(s == 1 for s in strides)
                and _winograd_for(weights, x_shape[0], out_shape[2:], dilations) is not None
            ):
                return None
            weights = weights.matrix
        geometry = conv_geometry(kernel, out_shape[2:], strides, pads, dilations)
        shifted = geometry.shiftable(1, x_shape[1], out_shape[1])
        if group != 1 or weights is None or (shifted and math.prod(out_shape[2:]) > _SHIFTED_FROM):
            return None
        geometry = (kernel, strides, pads, dilations)
        return held_conv(x_shape, dtype, weights, out_shape, *geometry, allocate=allocate)

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
        """Winograd for a stride-1 3×3 float32 convolution with a prepared transform whose
        tiles fill its GEMMs, gathered columns or tap passes for a 2-D grouped one (depthwise
        included, numpy_cpu/depthwise.py), the shared paths for the rest; all with small
        ufunc buffers (numpy_cpu/ufunc_buffers.py), the bias added in each path's last pass."""
        allocate = scratch or self._allocate
        with small_buffers(), quiet():  # inf · 0 and overflow are results, as in `binary`
            if isinstance(weights, PreparedConv) and weights.copies > 1:
                self._copied_filter(x, w, out, strides, pads, dilations, allocate, weights, bias)
            else:
                self._conv(x, w, out, strides, pads, dilations, group, allocate, weights, bias)

    def _copied_filter(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        allocate: Scratch,
        weights: PreparedConv,
        bias: Any | None,
    ) -> None:
        """A bank of `weights.copies` identical filters: one channel computed, then copied."""
        one = allocate((out.shape[0], 1, *out.shape[2:]), out.dtype)
        single = (
            weights.matrix
            if weights.winograd is None
            else PreparedConv(weights.matrix, weights.winograd)
        )
        self._conv(x, w[:1], one, strides, pads, dilations, 1, allocate, single, None)
        if bias is None:
            out[...] = one
        else:
            np.add(one, bias.reshape(-1, *(1,) * (out.ndim - 2)), out=out)  # broadcast copy

    def _conv(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
        allocate: Scratch,
        weights: Any | None,
        bias: Any | None,
    ) -> None:
        if isinstance(weights, PreparedConv):
            geometry = (x.shape[0], out.shape[2:], dilations)
            unit = all(s == 1 for s in strides)
            prepared = _winograd_for(weights, *geometry) if unit else None
            if prepared is not None and x.dtype == out.dtype == prepared.transformed.dtype:
                geometry = (tuple(pads), tuple(dilations))
                prepared.conv(x, out, *geometry, allocate, self.matmul_arrays, bias)
                return
            weights = weights.matrix
        if (
            x.ndim == 4
            and (group > 1 or x.shape[1] == 1)
            and w.shape[2:] != (1, 1)
            and takes_grouped(w.shape, out.shape)
            and x.dtype == out.dtype
            and x.dtype in _GROUPED_TYPES
        ):
            taps = (w if weights is None else weights).reshape(w.shape[0], -1)
            grouped_conv(x, taps, out, strides, pads, dilations, w.shape[2:], allocate, bias)
            return
        if weights is None:
            weights = super().conv_weights(w, group)
        if x.dtype == out.dtype:  # the path a bound step holds, made for this run: its bits
            geometry = (w.shape[2:], tuple(strides), tuple(pads), tuple(dilations))
            once = self.held_conv(x.shape, x.dtype, out.shape, *geometry, group, weights, allocate)
            if once is not None and once(x, out, bias):
                return
        super().conv_arrays(x, w, out, strides, pads, dilations, group, allocate, weights, bias)

    def weight_product(self, dtype: Any, rank: int) -> Callable[..., Any] | None:
        """Matrices of float32 or float64: np.dot, the BLAS call np.matmul makes for them (the
        same bits, tests/test_bound_steps.py) without the ufunc machinery's 0.8 µs; a stack
        of them as one matrix of all its rows, as `matmul_arrays` multiplies it. Other types
        of 4 bytes or more: `matmul_arrays`' own np.matmul (integers sum exactly)."""
        if dtype not in _BLAS_TYPES:
            return np.matmul if rank > 2 and dtype.itemsize >= 4 else None
        return np.dot if rank == 2 else _stacked_dot

    def max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        indices: Any | None = None,
        scratch: Scratch | None = None,
    ) -> None:
        """The shared kernel a block of planes at a time (numpy_cpu/plane_blocks.py); with
        `indices` (plane positions, any block size alike) the shared kernel whole. (Small
        ufunc buffers measure slower here: 0.75 against 0.54 ms at [1, 64, 64, 64].)"""
        if indices is not None:
            super().max_pool_arrays(x, out, kernel, strides, pads, dilations, indices, scratch)
            return
        reused = Reused(scratch or self._allocate)
        for block_x, block_out in plane_blocks(x, out):
            reused.next_block()
            super().max_pool_arrays(
                block_x, block_out, kernel, strides, pads, dilations, None, reused
            )

    def sum_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        scratch: Scratch | None = None,
        row_major: bool = False,
        divisor: Any | None = None,
    ) -> None:
        """The shared kernel a block of planes at a time (numpy_cpu/plane_blocks.py) with small
        ufunc buffers (numpy_cpu/ufunc_buffers.py); a divisor broadcasts over the spatial
        axes only, as AveragePool's counts do."""
        reused = Reused(scratch or self._allocate)
        # The taps over flat phases run (N, C, out_h·cols) views: with NumPy's default buffer
        # 8 adds took 0.23 ms at [1, 64, 64, 64], with small buffers 0.12.
        with small_buffers():
            for block_x, block_out in plane_blocks(x, out):
                reused.next_block()
                super().sum_pool_arrays(
                    block_x, block_out, kernel, strides, pads, dilations, reused, row_major,
                    divisor,
                )  # fmt: skip

    def transpose_arrays(self, x: Any, perm: Sequence[int], out: Any) -> None:
        """Blocked for the cache (numpy_cpu/movement.py)."""
        transpose_copy(x, perm, out)

    def double_last_axes_arrays(self, x: Any, out: Any, scratch: Scratch) -> bool:
        """Through a contiguous buffer and whole-row moves (backends/pixel_doubling.py)."""
        return double_last_axes_host(x, out, scratch)

    def take_arrays(self, data: Any, positions: Any, axis: int, out: Any) -> None:
        take_checked(data, positions, axis, out)

    @staticmethod
    def _allocate(shape: Sequence[int], dtype: Any) -> Any:
        return np.empty(tuple(shape), dtype=dtype)


def _winograd_for(
    weights: PreparedConv, batch: int, out_spatial: Sequence[int], dilations: Sequence[int]
) -> WinogradFilter | RowWinogradFilter | None:
    """The Winograd transform that pays for these outputs, or None: the direct paths."""
    if weights.winograd is None:
        return None
    return weights.winograd.for_output(batch, tuple(out_spatial), tuple(dilations))


def _stacked_dot(a: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
    """out = a @ w as one np.dot over all the stack's rows; np.matmul where out is a strided
    view (its reshape would be a copy the product never reaches)."""
    if not out.flags.c_contiguous:
        np.matmul(a, w, out=out)
        return
    rows, product = stacked_rows(a, out)
    np.dot(rows, w, out=product)
