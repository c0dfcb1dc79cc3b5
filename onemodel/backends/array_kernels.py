"""The fast kernels, written once against an array namespace so NumPy and CuPy share them.

Everything goes through the namespace `xp` of a `Memory` (numpy or cupy) and only uses calls
both libraries spell the same way, so the CuPy backend is this class over CuPy memory rather
than a second implementation that could drift from the first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from onemodel.backends.pooling import PoolGeometry, check_max_pool2d
from onemodel.backends.protocol import BinaryOp, UnaryOp
from onemodel.tensors import DType, Memory, Tensor, TensorError, TensorShapeError

# Where a kernel may take temporary arrays from: (shape, dtype) -> a C-contiguous array.
Scratch = Callable[[Sequence[int], Any], Any]


class ArrayKernels:
    """The `Kernels` of an array library: whole-array calls, no Python loop over elements.

    Float32 only for now. Operands are validated (backend, type, shape) before any data is
    read, so a refused call leaves `out` and its version untouched.

    `flushes_subnormals` says whether the library's kernels treat subnormal inputs and results
    as zero (comparisons included); NumPy keeps IEEE subnormals.
    """

    supports_exact = False
    flushes_subnormals = False

    def __init__(self, memory: Memory, name: str | None = None) -> None:
        self.memory = memory
        self.name = memory.name if name is None else name
        xp = memory.xp
        self._binary: dict[BinaryOp, Callable[..., Any]] = {
            BinaryOp.ADD: xp.add,
            BinaryOp.SUB: xp.subtract,
            BinaryOp.MUL: xp.multiply,
            BinaryOp.DIV: xp.divide,
            BinaryOp.MAX: xp.maximum,  # maximum/minimum, not fmax/fmin: NaN propagates
            BinaryOp.MIN: xp.minimum,
        }
        self._unary: dict[UnaryOp, Callable[..., Any]] = {
            UnaryOp.NEG: xp.negative,
            UnaryOp.ABS: xp.absolute,
            UnaryOp.RELU: self._relu,
            UnaryOp.SQRT: xp.sqrt,
            UnaryOp.EXP: xp.exp,
            UnaryOp.LOG: xp.log,
            UnaryOp.TANH: xp.tanh,
            UnaryOp.SIGMOID: self._sigmoid,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def xp(self) -> Any:
        return self.memory.xp

    # -- host exchange -----------------------------------------------------------------------

    def to_host(self, tensor: Tensor) -> np.ndarray:
        self._check_memory("to_host", tensor=tensor)
        return tensor.numpy()

    def from_host(self, array: Any) -> Tensor:
        return Tensor.from_array(array, memory=self.memory)

    # -- element-wise ------------------------------------------------------------------------

    def binary(self, op: BinaryOp, a: Tensor, b: Tensor, out: Tensor) -> None:
        self._check_elementwise(f"binary {op.name}", out, a=a, b=b)
        function = self._binary[op]
        # Overflow, 0/0 and friends give IEEE results that ONNX defines; warnings (which CuPy
        # never gives) would only make the backends behave differently.
        with np.errstate(all="ignore"):
            function(a.data(), b.data(), out=out.mutable_data())

    def unary(self, op: UnaryOp, x: Tensor, out: Tensor) -> None:
        self._check_elementwise(f"unary {op.name}", out, x=x)
        function = self._unary[op]
        with np.errstate(all="ignore"):
            function(x.data(), out=out.mutable_data())

    def _relu(self, x: Any, out: Any) -> None:
        """A compare-and-select, not max(x, 0): −0 becomes +0 and NaN passes through."""
        out[...] = self.xp.where(x <= 0, x.dtype.type(0), x)

    def _sigmoid(self, x: Any, out: Any) -> None:
        """1 / (1 + exp(−x)) in place in `out`; exp overflowing to inf correctly gives 0."""
        xp = self.xp
        one = x.dtype.type(1)
        xp.negative(x, out=out)
        xp.exp(out, out=out)
        xp.add(out, one, out=out)
        xp.divide(one, out, out=out)

    # -- matmul ------------------------------------------------------------------------------

    def matmul(self, a: Tensor, b: Tensor, out: Tensor) -> None:
        self._check_float32("matmul", a=a, b=b, out=out)
        if not a.rank == b.rank == out.rank >= 2:
            raise TensorShapeError(
                f"matmul needs operands of one rank ≥ 2 (batch dims already broadcast), not "
                f"{a.shape} @ {b.shape} -> {out.shape}"
            )
        *batch, m, k = a.shape
        expected = (*batch, m, b.shape[-1])
        if tuple(batch) != b.shape[:-2] or b.shape[-2] != k or out.shape != expected:
            raise TensorShapeError(
                f"matmul shapes do not agree: {a.shape} @ {b.shape} -> {out.shape}; it needs "
                "a (..., M, K), b (..., K, N) and out (..., M, N) with one batch shape"
            )
        self._check_output("matmul", out)
        with np.errstate(all="ignore"):  # inf · 0 and overflow are results, as in `binary`
            self._matmul(a.data(), b.data(), out.mutable_data())

    def _matmul(self, a: Any, b: Any, out: Any) -> None:
        """BLAS writes a contiguous destination; a temporary for any other `out` keeps the bits
        independent of out's layout, whatever the library would do with a strided `out`."""
        xp = self.xp
        if out.flags.c_contiguous:
            xp.matmul(a, b, out=out)
        else:
            out[...] = xp.matmul(a, b)

    # -- pooling -----------------------------------------------------------------------------

    def max_pool2d(
        self,
        x: Tensor,
        out: Tensor,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        pad: tuple[int, int],
        indices: Tensor | None = None,
    ) -> None:
        self._check_memory("max_pool2d", x=x, out=out)
        geometry = check_max_pool2d(x, out, kernel, stride, pad, indices)
        self._check_output("max_pool2d", out)
        if indices is not None:
            self._check_memory("max_pool2d", indices=indices)
            self._check_output("max_pool2d indices", indices)
        self._max_pool2d(
            x.data(),
            out.mutable_data(),
            geometry,
            None if indices is None else indices.mutable_data(),
        )

    def _max_pool2d(self, x: Any, out: Any, geometry: PoolGeometry, indices: Any | None) -> None:
        """Start every window at −inf reported at its first real element, then sweep the offsets.

        That start is the answer for a window whose real values are all −inf and is replaced by
        the first real element otherwise. Per offset, the windows for which that element is
        real form one rectangle of the output and one strided slice of the input, so each offset
        is a few whole-array operations. Strict `>` keeps the first of equal values; a NaN
        replaces a non-NaN only, so the first NaN stays. Padding is never compared.
        """
        xp = self.xp
        rows, cols = geometry.rows, geometry.cols
        width = cols.size
        out[...] = -xp.inf
        if indices is not None:
            first_y = [rows.first_inside(o) for o in range(rows.extent)]
            first_x = [cols.first_inside(o) for o in range(cols.extent)]
            indices[...] = (
                xp.asarray(first_y, dtype=xp.int32)[:, None] * width
                + xp.asarray(first_x, dtype=xp.int32)[None, :]
            )
        for ky, kx in geometry.window_offsets():
            oy, ox = rows.windows_inside(ky), cols.windows_inside(kx)
            if not oy or not ox:
                continue
            y0, x0 = rows.position(oy.start, ky), cols.position(ox.start, kx)
            y_stop = y0 + (len(oy) - 1) * rows.stride + 1
            x_stop = x0 + (len(ox) - 1) * cols.stride + 1
            values = x[:, :, y0 : y_stop : rows.stride, x0 : x_stop : cols.stride]
            best = out[:, :, oy.start : oy.stop, ox.start : ox.stop]
            take = (values > best) | (xp.isnan(values) & ~xp.isnan(best))
            xp.copyto(best, values, where=take)
            if indices is not None:
                ys = xp.arange(y0, y_stop, rows.stride, dtype=xp.int32)
                xs = xp.arange(x0, x_stop, cols.stride, dtype=xp.int32)
                where = indices[:, :, oy.start : oy.stop, ox.start : ox.stop]
                xp.copyto(where, ys[:, None] * width + xs[None, :], where=take)

    # -- array-level entry points of the graph operators -------------------------------------
    # Operators call these with backend arrays whose shapes and types their `infer` already
    # checked, so they validate nothing. float16 and bfloat16 operands are computed in float32
    # and rounded once into `out`: NumPy has no fast (or, for bfloat16, any BLAS) path for them.

    def matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """out[..., m, n] = Σ_k a[..., m, k] · b[..., k, n], batch dims broadcast as NumPy does."""
        xp = self.xp
        with np.errstate(all="ignore"):
            if NARROW_FLOATS.intersection((a.dtype, b.dtype, out.dtype)):
                out[...] = xp.matmul(a.astype(xp.float32), b.astype(xp.float32))
            elif out.flags.c_contiguous and a.dtype == b.dtype == out.dtype:
                xp.matmul(a, b, out=out)
            else:
                out[...] = xp.matmul(a, b)

    def exact_matmul_arrays(self, a: Any, b: Any, out: Any) -> None:
        """matmul_arrays in the canonical order: float64 sums over k = 0, 1, …, K−1, one rounding.

        The order of exact mode: float32 (and narrower) products are exact in float64, so the
        result depends only on the K additions in this fixed order, on any machine or device.
        """
        xp = self.xp
        a64 = a.astype(xp.float64)
        b64 = b.astype(xp.float64)
        total = xp.zeros(out.shape, dtype=xp.float64)
        with np.errstate(all="ignore"):
            for k in range(a.shape[-1]):
                total += a64[..., :, k, None] * b64[..., None, k, :]
        out[...] = total

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
    ) -> None:
        """Cross-correlation of x (N, C, *S) with w (M, C/group, *K) into out (N, M, *O), no bias.

        Output o reads x at o·stride − pad + k·dilation (`pads` are the leading pads; positions
        outside the input read as zero). Lowered to im2col and one batched matmul per group;
        the padded input and the columns live in `scratch` memory when given (a run's arena).
        """
        batch, groups = x.shape[0], group
        kernel, out_spatial = w.shape[2:], out.shape[2:]
        columns = self._im2col(x, kernel, out_spatial, strides, pads, dilations, scratch)
        pixels = columns.shape[-1]
        columns = columns.reshape(batch, groups, -1, pixels)
        weights = w.reshape(groups, w.shape[0] // groups, -1)
        self.matmul_arrays(weights, columns, out.reshape(batch, groups, -1, pixels))

    def _im2col(
        self,
        x: Any,
        kernel: Sequence[int],
        out_spatial: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        scratch: Scratch | None,
    ) -> Any:
        """(N, C·ΠK, ΠO) columns, rows ordered (c, k…): strided windows over a zero-padded copy.

        The padded copy is skipped when no window reaches past the input.
        """
        xp = self.xp
        allocate = scratch or (lambda shape, dtype: xp.empty(shape, dtype=dtype))
        batch, channels, *spatial = x.shape
        reach = [
            _span(o, s, k, d)
            for o, s, k, d in zip(out_spatial, strides, kernel, dilations, strict=True)
        ]
        if any(pads) or any(r > n for r, n in zip(reach, spatial, strict=True)):
            padded = allocate((batch, channels, *reach), x.dtype)
            padded[...] = 0
            kept = [min(n, r - p) for n, r, p in zip(spatial, reach, pads, strict=True)]
            padded[(..., *(slice(p, p + k) for p, k in zip(pads, kept, strict=True)))] = x[
                (..., *(slice(0, k) for k in kept))
            ]
            x = padded
        if all(k == 1 for k in kernel) and all(s == 1 for s in strides):
            window_view = x[(..., *(slice(0, o) for o in out_spatial))]
        else:
            axis_strides = x.strides[2:]
            window_view = xp.lib.stride_tricks.as_strided(
                x,
                shape=(batch, channels, *kernel, *out_spatial),
                strides=(
                    *x.strides[:2],
                    *(a * d for a, d in zip(axis_strides, dilations, strict=True)),
                    *(a * s for a, s in zip(axis_strides, strides, strict=True)),
                ),
            )
        columns = allocate((batch, channels * _product(kernel), _product(out_spatial)), x.dtype)
        columns.reshape(window_view.shape)[...] = window_view
        return columns

    def conv_transpose_arrays(
        self,
        x: Any,
        w: Any,
        out: Any,
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        group: int,
    ) -> None:
        """Transposed convolution of x (N, C, *S) with w (C, M/group, *K) into out (N, M, *O).

        Input i adds w[·, ·, k]·x[i] at output position i·stride + k·dilation − pad (`pads` are
        the leading pads): one matmul per group to columns, then one strided add per kernel
        offset (col2im).
        """
        xp = self.xp
        batch, channels, *spatial = x.shape
        groups, kernel = group, w.shape[2:]
        out_channels = out.shape[1]
        compute = xp.float32 if out.dtype in NARROW_FLOATS else out.dtype
        weights = w.reshape(groups, channels // groups, -1).swapaxes(1, 2)
        inputs = x.reshape(batch, groups, channels // groups, -1)
        columns = xp.empty((batch, groups, weights.shape[1], inputs.shape[-1]), dtype=compute)
        self.matmul_arrays(weights, inputs, columns)
        columns = columns.reshape(batch, out_channels, *kernel, *spatial)
        # `full` holds output positions from min(−pad, 0): a negative pad starts the output
        # before the first position any input reaches.
        out_spatial = out.shape[2:]
        margins = [max(-p, 0) for p in pads]
        reach = [
            m + max(_span(n, s, k, d), p + o)
            for m, n, s, k, d, p, o in zip(
                margins, spatial, strides, kernel, dilations, pads, out_spatial, strict=True
            )
        ]
        full = xp.zeros((batch, out_channels, *reach), dtype=compute)
        with np.errstate(all="ignore"):
            for taps in itertools.product(*(range(k) for k in kernel)):
                target = tuple(
                    slice(m + t * d, m + t * d + (n - 1) * s + 1, s)
                    for m, t, d, n, s in zip(
                        margins, taps, dilations, spatial, strides, strict=True
                    )
                )
                full[(..., *target)] += columns[(slice(None), slice(None), *taps)]
        crop = (slice(m + p, m + p + o) for m, p, o in zip(margins, pads, out_spatial, strict=True))
        out[...] = full[(..., *crop)]

    def max_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
        indices: Any | None = None,
    ) -> None:
        """Max of each window of x (N, C, *S) into out (N, C, *O), N-D, with the rules of
        `max_pool2d`: padding never takes part (every window must hold a real position), the
        first of equal values wins in row-major window order, and the first NaN wins.

        Window o holds positions o·stride − pad + k·dilation (`pads` are the leading pads).
        `indices` (int64), when given, receive the row-major position of each winner in its
        (n, c) plane. Every window starts at the lowest value reported at its first real
        position, then one whole-array compare (or, without indices, maximum) per offset.
        """
        xp = self.xp
        axes = window_axes(x.shape[2:], out.shape[2:], kernel, strides, pads, dilations)
        floating = out.dtype.kind not in "iub"
        out[...] = -xp.inf if floating else np.iinfo(out.dtype).min
        if indices is not None:
            indices[...] = _plane_positions(xp, axes, [axis.first_real() for axis in axes])
        for source, target, positions in _tap_boxes(xp, axes):
            values, best = x[source], out[target]
            if indices is None:
                # maximum keeps its first operand's NaN, so the first NaN still wins; only
                # which zero a tie of −0 and +0 reports may differ from the strict rule.
                xp.maximum(best, values, out=best)
                continue
            take = values > best
            if floating:
                take |= xp.isnan(values) & ~xp.isnan(best)
            xp.copyto(best, values, where=take)
            if indices is not None:
                found = _plane_positions(xp, axes, positions)
                xp.copyto(indices[target], found, where=take)

    def sum_pool_arrays(
        self,
        x: Any,
        out: Any,
        kernel: Sequence[int],
        strides: Sequence[int],
        pads: Sequence[int],
        dilations: Sequence[int],
    ) -> None:
        """Sum of the real positions of each window of x (N, C, *S) into out (N, C, *O).

        Window placement as in `max_pool_arrays`; padding adds nothing. Average and Lp pooling
        divide or take roots afterwards. One whole-array add per kernel offset.
        """
        xp = self.xp
        axes = window_axes(x.shape[2:], out.shape[2:], kernel, strides, pads, dilations)
        narrow = out.dtype in NARROW_FLOATS
        total = xp.zeros(out.shape, dtype=xp.float32) if narrow else out
        if not narrow:
            total[...] = 0
        with np.errstate(all="ignore"):
            for source, target, _ in _tap_boxes(xp, axes):
                total[target] += x[source]
        if narrow:
            out[...] = total

    # -- validation --------------------------------------------------------------------------

    def _check_memory(self, what: str, **tensors: Tensor) -> None:
        for role, tensor in tensors.items():
            if tensor.block_size:
                raise TensorError(f"{what}: {role} is blocked; convert it with to_layout first")
            if tensor.memory.xp is not self.xp:
                raise TensorError(
                    f"{what}: {role} lives in {tensor.memory.name} memory, but the {self.name} "
                    f"backend works on {self.memory.name} memory"
                )

    def _check_float32(self, what: str, **tensors: Tensor) -> None:
        self._check_memory(what, **tensors)
        for role, tensor in tensors.items():
            if tensor.dtype is not DType.FLOAT:
                raise TensorError(
                    f"{what} supports FLOAT (float32) tensors only; {role} is {tensor.dtype.name}"
                )

    def _check_elementwise(self, what: str, out: Tensor, **inputs: Tensor) -> None:
        self._check_float32(what, **inputs, out=out)
        if any(tensor.shape != out.shape for tensor in inputs.values()):
            described = ", ".join(f"{role} {t.shape}" for role, t in inputs.items())
            raise TensorShapeError(
                f"{what} needs operands of out's shape {out.shape} (broadcast them first): "
                f"{described}"
            )
        self._check_output(what, out)

    @staticmethod
    def _check_output(what: str, out: Tensor) -> None:
        """A broadcast (stride-0) output would have several results race for one element."""
        if any(
            stride == 0 and extent > 1
            for extent, stride in zip(out.shape, out.strides, strict=True)
        ):
            raise TensorShapeError(
                f"{what}: the output is a broadcast view (strides {out.strides} for shape "
                f"{out.shape}); it must have one element per result"
            )


NARROW_FLOATS = frozenset({np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)})


def _span(count: int, stride: int, kernel: int, dilation: int) -> int:
    """The positions that `count` windows at `stride`, each of `kernel` taps `dilation` apart,
    reach from the first window's first tap to the last window's last."""
    return (count - 1) * stride + (kernel - 1) * dilation + 1


def _product(values: Sequence[int]) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


@dataclass(frozen=True)
class WindowAxis:
    """One spatial axis of a pooling: `extent` windows over `size` positions.

    Window o holds positions o·stride − pad + k·dilation for taps k = 0..kernel−1; positions
    outside 0..size−1 are padding.
    """

    size: int
    extent: int
    kernel: int
    stride: int
    pad: int
    dilation: int

    def windows_reading(self, tap: int) -> range:
        """The windows whose tap `tap` is a real position: a contiguous run."""
        shift = tap * self.dilation - self.pad
        low = -(shift // self.stride)  # ceil(−shift / stride)
        high = (self.size - 1 - shift) // self.stride + 1
        return range(max(low, 0), min(high, self.extent))

    def positions(self, windows: range, tap: int) -> slice:
        """The input positions tap `tap` of `windows` reads: one strided slice."""
        start = windows.start * self.stride - self.pad + tap * self.dilation
        return slice(start, start + (len(windows) - 1) * self.stride + 1, self.stride)

    def first_real(self) -> np.ndarray:
        """Per window, its first real position (host array); −1 for a window of padding only."""
        first = np.full(self.extent, -1, dtype=np.int64)
        for tap in reversed(range(self.kernel)):
            run = self.windows_reading(tap)
            first[run.start : run.stop] = (
                np.arange(run.start, run.stop) * self.stride - self.pad + tap * self.dilation
            )
        return first

    def windows_without_real(self) -> int:
        """How many windows hold padding only."""
        return int(np.count_nonzero(self.first_real() < 0))


def window_axes(
    spatial: Sequence[int],
    out_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> list[WindowAxis]:
    """The WindowAxis of each spatial axis (`pads` are the leading pads)."""
    return [
        WindowAxis(int(n), int(o), int(k), int(s), int(p), int(d))
        for n, o, k, s, p, d in zip(
            spatial, out_spatial, kernel, strides, pads, dilations, strict=True
        )
    ]


def _tap_boxes(
    xp: Any, axes: Sequence[WindowAxis]
) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...], list[Any]]]:
    """Per kernel offset (row-major) that some window reads from the input: the input slices
    it reads, the box of the output those windows form, and the positions read per axis."""
    for taps in itertools.product(*(range(axis.kernel) for axis in axes)):
        runs = [axis.windows_reading(tap) for axis, tap in zip(axes, taps, strict=True)]
        if not all(runs):
            continue
        slices = [axis.positions(run, tap) for axis, run, tap in zip(axes, runs, taps, strict=True)]
        positions = [xp.arange(s.start, s.stop, s.step) for s in slices]
        yield (..., *slices), (..., *(slice(run.start, run.stop) for run in runs)), positions


def _plane_positions(xp: Any, axes: Sequence[WindowAxis], per_axis: Sequence[Any]) -> Any:
    """Row-major positions in an input plane from per-axis positions, broadcast to a box."""
    position = xp.zeros((), dtype=xp.int64)
    rank = len(axes)
    for i, (axis, values) in enumerate(zip(axes, per_axis, strict=True)):
        values = xp.asarray(values, dtype=xp.int64).reshape((-1,) + (1,) * (rank - 1 - i))
        position = position * axis.size + values
    return position
